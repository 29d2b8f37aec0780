"""Tiny stand-ins for the Llasa family, built locally so tests never touch the network.

`build_llasa_family(root)` writes three folders shaped like the Hub repositories:
a target and a draft (random `LlamaForCausalLM`s sharing one tokenizer that carries
Llasa's special tokens and a few hundred `<|s_N|>` speech tokens, with a Llama-3.2
style chat template) and a codec (a random `Xcodec2Model` whose codebook has as many
entries as there are speech tokens). `install_in_hub_cache` copies such a folder into
a Hugging Face cache layout so that offline `snapshot_download` finds it.

Everything is a few hundred kilobytes and builds in well under a second.

Config-true stand-ins (`llasa_config`, `build_real_layout_tokenizer`, `build_config_true_family`)
keep what the real checkpoints have and the tiny ones do not: 193,800 tokens with the speech
tokens added the way Llasa's training added them, the real head counts, head sizes, rotary
scaling and tied or untied output layers, and a codec with 65,536 codes; only the widths and
depths are small.
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


def _small_bpe():
    """A byte-level BPE tokenizer (Llama 3's kind) with a few hundred tokens learnt from `_CORPUS`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    return tokenizer


def build_tokenizer(
    extra_speech_tokens: int = NUM_SPEECH_TOKENS,
    drop_special: str | None = None,
    extra_text_tokens: tuple[str, ...] = (),
):
    """A byte-level BPE tokenizer with Llama-3 and Llasa special tokens and `<|s_N|>` speech tokens.

    `drop_special` leaves one Llasa control token out; `extra_text_tokens` are added before the
    special tokens, shifting every special id (a tokenizer that looks alike but is not).
    """
    from transformers import PreTrainedTokenizerFast

    tokenizer = _small_bpe()
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
    """A Llasa-like small Llama (4 heads, 2 key/value heads, 2,048 positions, transformers' init)."""
    from support.tiny_models import tiny_llama

    return tiny_llama(seed, vocab=vocab_size, layers=layers, width=hidden, init=0.02, heads=4, kv_heads=2,
                      max_positions=2048)


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


# -- config-true stand-ins ------------------------------------------------------------------------

#: Llama 3's 128,256 tokens + Llasa's 8 control tokens + 65,536 speech tokens.
LLASA_VOCAB_SIZE = 193_800
LLAMA3_VOCAB_SIZE = 128_256
REAL_SPEECH_TOKENS = 4**8  # XCodec2's FSQ: 8 dimensions of 4 levels
_LLAMA3_ROPE = {"high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                "rope_type": "llama3"}
#: The values of the Llasa repositories' config.json that shape the model (Llama 3.2 1B and 3B, Llama 3.1 8B,
#: each with the 193,800-token vocabulary). Shared by all three:
LLASA_COMMON_CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": LLASA_VOCAB_SIZE,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "attention_bias": False, "mlp_bias": False,
}
LLASA_CONFIGS = {
    "1B": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 64, "tie_word_embeddings": True,
           "rope_scaling": {"factor": 32.0, **_LLAMA3_ROPE}},
    "3B": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
           "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True,
           "rope_scaling": {"factor": 32.0, **_LLAMA3_ROPE}},
    "8B": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
           "rope_scaling": {"factor": 8.0, **_LLAMA3_ROPE}},
}
#: Parameter counts of the three sizes to three digits (8.57B x 2 bytes = the 17.14 GB of Llasa-8B's bf16 shards).
LLASA_PARAMETERS = {"1B": 1_370_000_000, "3B": 3_410_000_000, "8B": 8_570_000_000}


def llasa_config(size: str, tiny: bool = False, **overrides):
    """The LlamaConfig of Llasa-`size`; `tiny` keeps everything but the width (hidden = one unit per head),
    the MLP and the depth, which shrink to a few kilobytes of weights per layer."""
    from transformers import LlamaConfig

    values = {**LLASA_COMMON_CONFIG, **LLASA_CONFIGS[size]}
    if tiny:
        heads = values["num_attention_heads"]
        # transformers wants the width to be a multiple of the head count; head_dim stays the real one.
        values.update(hidden_size=heads, intermediate_size=2 * heads, num_hidden_layers=2, initializer_range=0.3)
    values.update(overrides)
    return LlamaConfig(**values)


def real_width_parameters(size: str) -> int:
    """Parameters of Llasa-`size` at its real widths, counted on the meta device (nothing allocated)."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(llasa_config(size))
    return sum(p.numel() for p in model.parameters())


def build_config_true_llama(size: str, seed: int = 0):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llasa_config(size, tiny=True)).eval()


#: Llama 3's special tokens at their real ids (128000 + index); the rest are reserved names.
_LLAMA3_NAMED_SPECIALS = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>",
                          6: "<|start_header_id|>", 7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>",
                          10: "<|python_tag|>"}


def build_real_layout_tokenizer():
    """A tokenizer with Llasa's id layout: 128,000 byte-level BPE tokens, Llama 3's 256 special tokens,
    then the 8 control tokens and 65,536 speech tokens appended with `add_tokens`, as Llasa's training
    script adds them (ordinary added tokens, not special ones). Only the BPE merges are small."""
    import json

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    state = json.loads(_small_bpe().to_str())
    vocab = state["model"]["vocab"]
    # Fillers no merge can produce, so the specials land on Llama 3's ids.
    vocab.update({f"<|unused_text_{i}|>": i for i in range(len(vocab), 128_000)})
    tokenizer = Tokenizer.from_str(json.dumps(state))
    specials = [_LLAMA3_NAMED_SPECIALS.get(i, f"<|reserved_special_token_{i}|>") for i in range(256)]
    tokenizer.add_special_tokens(specials)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", pad_token="<|eot_id|>"
    )
    wrapped.add_tokens(LLASA_SPECIALS + [f"<|s_{i}|>" for i in range(REAL_SPEECH_TOKENS)])
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


@dataclass(frozen=True)
class ConfigTrueLlasa:
    """Paths of config-true stand-ins: Llasa-1B, -3B and -8B shapes and a 65,536-code codec."""

    sizes: dict[str, Path]
    codec: Path


def build_config_true_family(root: Path, sizes: tuple[str, ...] = ("1B", "3B", "8B")) -> ConfigTrueLlasa:
    root = Path(root)
    tokenizer = build_real_layout_tokenizer()
    folders = {}
    for index, size in enumerate(sizes):
        folders[size] = root / f"llasa-{size.lower()}-config-true"
        build_config_true_llama(size, seed=10 + index).save_pretrained(folders[size])
        tokenizer.save_pretrained(folders[size])
    codec_model, extractor = build_codec(levels=(4,) * 8)
    codec = root / "xcodec2-65536"
    codec_model.save_pretrained(codec)
    extractor.save_pretrained(codec)
    return ConfigTrueLlasa(sizes=folders, codec=codec)


#: Published metadata of the pinned codec checkpoint (HKUSTAudio/xcodec2-hf, model.safetensors at the
#: commit in ssd_demo.backends.llasa_loading.DEFAULT_CODEC_REVISION): 811 tensors in 2,517,231,448 bytes,
#: among them these.
REAL_CODEC_TENSORS = 811
REAL_CODEC_SHAPES = {
    "acoustic_decoder.head.linear.weight": (1282, 1024),
    "acoustic_decoder.layers.11.self_attn.q_proj.weight": (1024, 1024),
    "acoustic_encoder.block.4.conv1.weight": (1536, 768, 10),
    "fc_encoder.weight": (2048, 2048),
    "quantizer.project_in.weight": (8, 2048),
    "semantic_encoder.encoder.layers.15.self_attn.distance_embedding.weight": (73, 64),
    "semantic_encoder.feature_projection.projection.weight": (1024, 160),
}
