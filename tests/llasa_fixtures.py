"""Tiny stand-ins for the Llasa family, built locally so tests never touch the network.

`build_llasa_family(root)` writes three folders shaped like the Hub repositories:
a target and a draft (random `LlamaForCausalLM`s sharing one tokenizer that carries
Llasa's special tokens and a few hundred `<|s_N|>` speech tokens, with a Llama-3.2
style chat template) and a codec (a random `Xcodec2Model` whose codebook has as many
entries as there are speech tokens). `install_in_hub_cache` copies such a folder into
a Hugging Face cache layout so that offline `snapshot_download` finds it.

Everything is a few hundred kilobytes and builds in well under a second.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

# Real Llasa uses 65,536 speech tokens (4^8 FSQ levels); 4^4 keeps the fixture tiny.
QUANTIZATION_LEVELS = (4, 4, 4, 4)
NUM_SPEECH_TOKENS = int(np.prod(QUANTIZATION_LEVELS))

LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLASA_SPECIALS = [
    "<|TEXT_GENERATION_START|>",
    "<|TEXT_GENERATION_END|>",
    "<|TEXT_UNDERSTANDING_START|>",
    "<|TEXT_UNDERSTANDING_END|>",
    "<|SPEECH_GENERATION_START|>",
    "<|SPEECH_GENERATION_END|>",
    "<|SPEECH_UNDERSTANDING_START|>",
    "<|SPEECH_UNDERSTANDING_END|>",
]

# The parts of Llama 3.2's chat template that matter without tools: BOS, a system header
# with the knowledge cut-off and a date (today's unless `date_string` is given), then one
# header per message with trimmed content and <|eot_id|>.
CHAT_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- if strftime_now is defined %}\n"
    '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
    "    {%- else %}\n"
    '        {%- set date_string = "26 Jul 2024" %}\n'
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    '    {%- set system_message = "" %}\n'
    "{%- endif %}\n"
    '{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n'
    '{{- "Cutting Knowledge Date: December 2023\\n" }}\n'
    '{{- "Today Date: " + date_string + "\\n\\n" }}\n'
    "{{- system_message }}\n"
    '{{- "<|eot_id|>" }}\n'
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)

_CORPUS = [
    "Convert the text to speech: hello world, this is a tiny test of speech synthesis.",
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens.",
    "A target model verifies what the draft proposes, and keeps what it agrees with.",
    "Numbers like 1, 2, 3 and punctuation! Questions? Quotes 'and' \"more\".",
]


@dataclass(frozen=True)
class TinyLlasa:
    """Paths of a tiny Llasa family."""

    target: Path
    draft: Path
    codec: Path


def build_tokenizer(
    extra_speech_tokens: int = NUM_SPEECH_TOKENS,
    drop_special: str | None = None,
    extra_text_tokens: tuple[str, ...] = (),
):
    """A byte-level BPE tokenizer with Llama-3 and Llasa special tokens and `<|s_N|>` speech tokens.

    `drop_special` leaves one Llasa control token out; `extra_text_tokens` are added before the
    special tokens, shifting every special id (a tokenizer that looks alike but is not).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    if extra_text_tokens:
        tokenizer.add_tokens(list(extra_text_tokens))
    specials = LLAMA_SPECIALS + [t for t in LLASA_SPECIALS if t != drop_special]
    specials += [f"<|s_{i}|>" for i in range(extra_speech_tokens)]
    tokenizer.add_special_tokens(specials)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", pad_token="<|end_of_text|>"
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_llama(vocab_size: int, layers: int, hidden: int = 64, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def xcodec2_config(levels: tuple[int, ...] = QUANTIZATION_LEVELS):
    """A small but complete Xcodec2Config: every module exists, each one tiny."""
    from transformers import Xcodec2Config

    hidden = 32  # GroupNorm in the decoder needs a multiple of 32
    semantic_hidden = 32
    return Xcodec2Config(
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        encoder_hidden_size=4,
        quantization_dim=hidden + semantic_hidden,
        quantization_levels=list(levels),
        semantic_model_config=dict(
            model_type="wav2vec2-bert",
            hidden_size=semantic_hidden,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            feature_projection_input_dim=160,
            conv_depthwise_kernel_size=3,
            output_hidden_size=semantic_hidden,
        ),
    )


def build_codec(levels: tuple[int, ...] = QUANTIZATION_LEVELS, seed: int = 0):
    from transformers import Xcodec2FeatureExtractor, Xcodec2Model

    config = xcodec2_config(levels)
    torch.manual_seed(seed)
    model = Xcodec2Model(config).eval()
    extractor = Xcodec2FeatureExtractor(hop_length=config.hop_length)
    return model, extractor


def save_causal_lm(path: Path, tokenizer, layers: int, seed: int, vocab_size: int | None = None) -> Path:
    model = build_llama(vocab_size or len(tokenizer), layers=layers, seed=seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_llasa_family(root: Path) -> TinyLlasa:
    """Target (2 layers), draft (1 layer) and codec folders under `root`."""
    root = Path(root)
    tokenizer = build_tokenizer()
    target = save_causal_lm(root / "tiny-llasa-target", tokenizer, layers=2, seed=1)
    draft = save_causal_lm(root / "tiny-llasa-draft", tokenizer, layers=1, seed=2)
    codec_model, extractor = build_codec()
    codec = root / "tiny-xcodec2"
    codec_model.save_pretrained(codec)
    extractor.save_pretrained(codec)
    return TinyLlasa(target=target, draft=draft, codec=codec)


def install_in_hub_cache(folder: Path, cache_dir: Path, repo_id: str, revision: str = "main") -> str:
    """Copy `folder` into a Hub cache layout (`models--org--name/snapshots/<commit>` + `refs/<revision>`).

    Returns the commit hash: `revision` itself when it is one (a pinned commit), else a made-up one.
    Files are plain copies rather than blob symlinks, which the cache readers accept.
    """
    is_commit = len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)
    commit = revision if is_commit else hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
    repo_dir = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / commit
    if snapshot.exists():
        shutil.rmtree(snapshot)
    shutil.copytree(folder, snapshot)
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / revision).write_text(commit)
    return commit


def sine_clip(seconds: float = 1.0, sample_rate: int = 24_000, freq: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)



def rename_tensors(folder: Path, old: str, new: str) -> int:
    """Rewrite `folder`'s safetensors with `old` replaced by `new` in tensor names (a checkpoint from an
    older conversion); returns how many names changed."""
    from safetensors.torch import load_file, save_file

    changed = 0
    for file in Path(folder).glob("*.safetensors"):
        tensors = load_file(file)
        renamed = {name.replace(old, new): tensor for name, tensor in tensors.items()}
        changed += sum(old in name for name in tensors)
        save_file(renamed, file, metadata={"format": "pt"})
    return changed
