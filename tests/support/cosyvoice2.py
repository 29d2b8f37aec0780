"""A CosyVoice 2 checkpoint in miniature for the tests: the official folder layout and tensor names with tiny
random weights (`build_tiny_checkpoint`, the `folder` fixture), the tiny configs, a default voice, stand-in
encoders, and a Qwen-style tokenizer folder with the official special ids."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config

from ssd_demo.backends.cosyvoice2.flow import CFMConfig, CosyVoice2Flow, FlowConfig
from ssd_demo.backends.cosyvoice2.flow_decoder import EstimatorConfig
from ssd_demo.backends.cosyvoice2.flow_encoder import EncoderConfig
from ssd_demo.backends.cosyvoice2.frontend import VoiceFeatures, text_tokens
from ssd_demo.backends.cosyvoice2.hift import HiFTConfig, HiFTVocoder
from ssd_demo.backends.cosyvoice2.llm import (ADDED_SPECIAL_TOKENS, BACKBONE_FOLDER, SpeechVocabLayout, build_speech_lm,
                                              speech_lm_config, unified_to_official)
from support.llasa_fixtures import _small_bpe


def tiny_backbone(layers: int = 2, init: float = 0.5) -> Qwen2Config:
    return Qwen2Config(vocab_size=10, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                       initializer_range=init, tie_word_embeddings=True)


SPEECH = 16
MELS, SPEAKER = 8, 6
FLOW = FlowConfig(
    vocab_size=SPEECH, input_size=16, n_mels=MELS, spk_embed_dim=SPEAKER,
    encoder=EncoderConfig(input_size=16, d_model=16, heads=2, ffn_units=32, num_blocks=1, num_up_blocks=1),
    estimator=EstimatorConfig(n_mels=MELS, channels=16, heads=2, head_dim=8, n_blocks=1, num_mid_blocks=1),
    cfm=CFMConfig(n_timesteps=2, noise_frames=2000))
HIFT = HiFTConfig(in_channels=MELS, base_channels=16, f0_cond_channels=8)


def build_tiny_checkpoint(root):
    """A CosyVoice2-0.5B-shaped folder with tiny random weights under the official names (no ONNX files)."""
    backbone_dir = root / "CosyVoice-BlankEN"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_small_bpe(), eos_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|endoftext|>"]})
    tokenizer.save_pretrained(backbone_dir)
    text_rows = len(tokenizer) + len(ADDED_SPECIAL_TOKENS) + 8  # Qwen's table has spare rows too
    backbone = tiny_backbone(layers=10)
    backbone.vocab_size = text_rows
    (backbone_dir / "config.json").write_text(json.dumps(backbone.to_dict(), default=str))
    torch.manual_seed(0)
    layout = SpeechVocabLayout(text_rows=text_rows, speech_tokens=SPEECH)
    speech_lm = build_speech_lm(speech_lm_config(backbone, layout))
    with torch.no_grad():  # stop ids unlikely, so the tiny model speaks for a while
        speech_lm.lm_head.bias[SPEECH:] = -4.0
    torch.save(unified_to_official(speech_lm), root / "llm.pt")
    torch.save(CosyVoice2Flow(FLOW).state_dict(), root / "flow.pt")
    torch.save({"generator." + k: v for k, v in HiFTVocoder(HIFT).state_dict().items()}, root / "hift.pt")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("CosyVoice2-0.5B"))


def default_voice(transcript_tokens=(5, 6, 7)) -> VoiceFeatures:
    generator = torch.Generator().manual_seed(1)
    return VoiceFeatures.aligned(list(transcript_tokens), torch.randint(0, SPEECH, (12,), generator=generator).tolist(),
                                 torch.randn(25, MELS, generator=generator), torch.randn(SPEAKER, generator=generator))


def bpe_token_count():
    """Text tokens as the backend counts them (`text_tokens`), straight from the tiny BPE: `count(piece) -> int`,
    for the chunking tests, which count a great deal."""
    bpe = _small_bpe()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    assert len(bpe.encode("Take 2 at ten thirty.").ids) == len(text_tokens(wrapped, "Take 2 at ten thirty."))
    return lambda piece: len(bpe.encode(piece, add_special_tokens=False).ids)


class FakeEncoders:
    """Stands in for the two ONNX encoders: features of the tiny models' shapes, counting its calls."""

    calls = 0

    def encode(self, audio, sample_rate, transcript_tokens):
        FakeEncoders.calls += 1
        return VoiceFeatures.aligned(transcript_tokens, [3, 1, 4, 1, 5, 9], torch.zeros(12, MELS), torch.ones(SPEAKER))


# The real CosyVoice-BlankEN holds Qwen's vocab.json and merges.txt and a tokenizer_config.json that
# declares three added tokens after the 151,643 ordinary ones; no tokenizer.json. Laid out the same way
# with a small vocabulary, the ids keep their offsets from the end of the vocabulary.
QWEN_ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
REAL_VOCABULARY = 151643  # entries in the real vocab.json: <|endoftext|>'s id
REAL_SPECIAL_IDS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|endofprompt|>": 151646,
                    "[breath]": 151647}  # the official CosyVoice 3 code hard-codes <|endofprompt|> as 151646


def write_qwen_style_tokenizer(root):
    """A byte-level BPE saved as vocab.json + merges.txt beside a Qwen2-style tokenizer_config.json (its
    added_tokens_decoder, eos and pad <|endoftext|>, no bos), as in CosyVoice-BlankEN; its vocabulary size."""
    import json

    folder = root / BACKBONE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    _small_bpe().model.save(str(folder))
    vocabulary = len(json.loads((folder / "vocab.json").read_text()))
    decoder = {str(vocabulary + i): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                                     "single_word": False, "special": True} for i, token in enumerate(QWEN_ADDED)}
    config = {"add_prefix_space": False, "added_tokens_decoder": decoder, "additional_special_tokens": list(QWEN_ADDED[1:]),
              "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>", "errors": "replace",
              "model_max_length": 32768, "pad_token": "<|endoftext|>", "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return vocabulary


def check_official_special_ids(tokenizer, vocabulary: int) -> None:
    """The ids the official CosyVoice2Tokenizer gives: Qwen's three added tokens where its config puts
    them, CosyVoice 2's new ones after them in the official order; nothing prepended or appended."""
    new = [token for token in ADDED_SPECIAL_TOKENS if token not in QWEN_ADDED]
    expected = {token: vocabulary + i for i, token in enumerate(list(QWEN_ADDED) + new)}
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in expected} == expected
    assert len(tokenizer) == vocabulary + len(expected)
    assert tokenizer.bos_token is None and tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    for text in ("a cat sat.", "Hello world"):
        ids = text_tokens(tokenizer, text)
        assert ids == tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))  # no BOS, no EOS
        assert all(i < vocabulary for i in ids)
    assert text_tokens(tokenizer, "[breath]") == [expected["[breath]"]]
    assert text_tokens(tokenizer, "hi<|endofprompt|>")[-1] == expected["<|endofprompt|>"]
