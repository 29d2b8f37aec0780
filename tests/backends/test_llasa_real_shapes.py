"""The Llasa path on config-true stand-ins: the real vocabulary, id layout, head counts, head sizes, rotary
scaling and tied/untied output layers of Llasa-1B, -3B and -8B (only widths and depths are small), and the
real codec's tensor names. Nothing is downloaded; real-width models are only ever built on the meta device."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from support.llasa_fixtures import (  # noqa: E402
                            LLASA_COMMON_CONFIG,
                            LLASA_CONFIGS,
                            LLASA_PARAMETERS,
                            LLASA_VOCAB_SIZE,
                            LLAMA3_VOCAB_SIZE,
                            REAL_CODEC_SHAPES,
                            REAL_CODEC_TENSORS,
                            REAL_SPEECH_TOKENS,
                            build_codec,
                            build_config_true_family,
                            build_config_true_llama,
                            build_real_layout_tokenizer,
                            real_width_parameters,
                            sine_clip,
                            )

from ssd_demo.models import hub, memory as model_memory
from ssd_demo.backends import registry as presets  # noqa: E402
from ssd_demo.backends.llasa_loading import load_llasa_pair  # noqa: E402
from ssd_demo.engine.kv import CachedLM  # noqa: E402
from ssd_demo.engine.static_cache import StaticCacheLM  # noqa: E402
from ssd_demo.speech.synthesis import VoicePrompt  # noqa: E402
from support.tiny_models import check_same_logits  # noqa: E402

SIZES = ("1B", "3B", "8B")
CPU = hub.LoadOptions(device="cpu")


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return build_config_true_family(tmp_path_factory.mktemp("config-true"))


@pytest.fixture(scope="module")
def tokenizer():
    return build_real_layout_tokenizer()


# -- real widths, counted without allocating ---------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_parameter_counts_at_real_widths(size):
    exact = real_width_parameters(size)
    assert round(exact, -7) == LLASA_PARAMETERS[size]
    # The pre-flight estimate from config.json alone (no safetensors headers yet) is exact for these.
    assert model_memory.config_parameter_count({**LLASA_COMMON_CONFIG, **LLASA_CONFIGS[size]}) == exact


def test_preset_memory_figures_follow_from_the_real_sizes():
    from transformers import Xcodec2Config, Xcodec2Model

    with torch.device("meta"):
        codec = sum(p.numel() for p in Xcodec2Model(Xcodec2Config()).parameters())
    draft = real_width_parameters("1B")
    for key, size in (("llasa-1b-3b", "3B"), ("llasa-1b-8b", "8B")):
        estimate = model_memory.MemoryEstimate(real_width_parameters(size), draft, codec, torch.bfloat16, 1.25)
        stated = int(re.search(r"needs about (\d+) GB", presets.get_preset(key).description).group(1))
        assert stated == round(estimate.required_bytes / 1e9), key


# -- the real codec's tensors ------------------------------------------------------------------------------


def test_default_codec_config_has_the_pinned_checkpoints_tensors():
    from transformers import Xcodec2Config, Xcodec2Model

    with torch.device("meta"):
        state = Xcodec2Model(Xcodec2Config()).state_dict()
    assert len(state) == REAL_CODEC_TENSORS
    assert {name: tuple(state[name].shape) for name in REAL_CODEC_SHAPES} == REAL_CODEC_SHAPES
    assert int(np.prod(Xcodec2Config().quantization_levels)) == REAL_SPEECH_TOKENS
    # The tiny codec fixture is saved with the same (current) names: a subset of the real ones.
    tiny, _ = build_codec()
    assert set(tiny.state_dict()) <= set(state)


# -- the lean forward on the real shapes --------------------------------------------------------------


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "modules"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("size", SIZES)
def test_lean_forward_matches_transformers_on_real_shapes(size, dtype, pack):
    model = build_config_true_llama(size, seed=1).to(dtype)
    config, real = model.config, LLASA_CONFIGS[size]
    assert config.vocab_size == LLASA_VOCAB_SIZE and config.head_dim == real["head_dim"]
    assert (config.num_attention_heads, config.num_key_value_heads) == (real["num_attention_heads"], 8)
    assert config.rope_parameters["rope_type"] == "llama3" and config.rope_parameters["rope_theta"] == 500000.0
    assert config.rope_parameters["factor"] == real["rope_scaling"]["factor"]
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tied == real["tie_word_embeddings"]

    reference, lean = CachedLM(model), StaticCacheLM(model, capacity=8, pack=pack)
    assert (lean._packed is not None) == pack
    ids = torch.randint(0, LLASA_VOCAB_SIZE, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    tolerance = 1e-4 if dtype == torch.float32 else 0.05  # bf16: one rounding step of logits near 8
    steps = [(0, 12, False), (12, 13, True), (13, 20, False), ("cut", 15), (15, 40, False)]  # with a rollback
    peak = check_same_logits(reference, lean, ids, steps, atol=tolerance, rtol=0.0)
    assert peak > 1.0  # logits large enough for the comparison to mean something


# -- the real tokenizer layout -------------------------------------------------------------------------------


def test_tokenizer_layout_is_llasas(tokenizer):
    vocab = tokenizer.get_vocab()
    assert len(tokenizer) == LLASA_VOCAB_SIZE
    assert vocab["<|begin_of_text|>"] == 128000 and vocab["<|eot_id|>"] == 128009
    assert vocab["<|TEXT_GENERATION_START|>"] == LLAMA3_VOCAB_SIZE
    assert vocab["<|SPEECH_GENERATION_END|>"] == LLAMA3_VOCAB_SIZE + 5
    assert vocab["<|s_0|>"] == LLAMA3_VOCAB_SIZE + 8 and vocab["<|s_65535|>"] == LLASA_VOCAB_SIZE - 1
    # Added as ordinary tokens, as Llasa's training script adds them: the model cards' decode with
    # skip_special_tokens=True keeps them.
    assert "<|s_0|>" not in tokenizer.all_special_tokens
    assert tokenizer.decode([vocab["<|s_7|>"]], skip_special_tokens=True) == "<|s_7|>"
    ids = tokenizer("<|SPEECH_GENERATION_START|><|s_12|><|s_65535|>", add_special_tokens=False)["input_ids"]
    assert ids == [vocab["<|SPEECH_GENERATION_START|>"], vocab["<|s_12|>"], vocab["<|s_65535|>"]]


@pytest.mark.parametrize("target", ["3B", "8B"])
@pytest.mark.slow
def test_llasa_1b_drafts_for_the_larger_sizes(family, target):
    synth = load_llasa_pair(
        str(family.sizes[target]), str(family.sizes["1B"]), codec_ref=str(family.codec), options=CPU
    )
    backend = synth.backend
    assert (backend.vocab.first_id, backend.vocab.size, backend.eos_token_id) == (128264, 65536, 128261)
    assert len(backend.allowed_token_ids()) == REAL_SPEECH_TOKENS + 1
    vp = VoicePrompt(sine_clip(1.0, 16_000), 16_000, "A reference clip.")
    prompt = backend.prompt_ids("Hello there.", vp)
    assert backend.prompt_codes(prompt) == backend.encode_prompt(vp) and len(backend.prompt_codes(prompt)) == 51
    result = synth.synthesize("Hello there.", mode="speculative", config=synth.config(max_new_tokens=10, seed=1),
                              voice_prompt=vp)
    codes = backend.tokens_to_codes(result.generation.tokens)
    assert all(128264 <= t < LLASA_VOCAB_SIZE or t == 128261 for t in result.generation.tokens)
    assert result.audio.shape == (len(codes) * backend.hop_length,) and np.isfinite(result.audio).all()
