"""A voice's Llama loaded without transformers holds the same weights, computes the same bits in the engine's forwards,
refuses a checkpoint that does not match its config, and leaves other models to transformers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.engine.kv import CachedLM, cached_lm
from ssd_demo.engine.onnx_forward import OnnxForward
from ssd_demo.engine.static_cache import StaticCacheLM, supports
from ssd_demo.errors import ModelLoadError
from ssd_demo.models.plain_llama import PlainLlamaForCausalLM, Unsupported, load, load_causal_lm
from support.tiny_models import check_same_logits, tiny_llama

STEPS = [(0, 5, False), (5, 6, True), (6, 8, True), ("cut", 4), (4, 9, False), (9, 10, True), ("cut", 7),
         (7, 12, False), ("cut", 9), (9, 30, True)]
REPO = Path(__file__).resolve().parents[2]


def _saved(folder: Path, seed: int = 3, dtype=torch.float32, **settings) -> tuple[LlamaForCausalLM, Path]:
    """A tiny transformers Llama saved (in `dtype`) and read back by transformers, as the voice's loader did."""
    model = tiny_llama(seed=seed, **{**dict(vocab=50, layers=2, width=32, init=0.3, heads=4, kv_heads=2), **settings})
    model.to(dtype).save_pretrained(folder)
    return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), folder


def test_same_rotary_tables_and_logits_as_transformers(tmp_path):
    reference, folder = _saved(tmp_path, dtype=torch.float16)  # as voices ship: float16, read as float32
    plain = load(folder)
    assert isinstance(plain, PlainLlamaForCausalLM) and supports(plain)
    assert plain.config._name_or_path == plain.name_or_path == str(folder)  # what a stimulus set's revision hashes
    for name, parameter in reference.named_parameters():
        assert torch.equal(plain.get_parameter(name), parameter), name
    positions = torch.arange(1300)[None]
    for got, expected in zip(plain.model.rotary_emb(torch.zeros(1), positions),
                             reference.model.rotary_emb(torch.zeros(1), positions)):
        assert torch.equal(got, expected)
    ids = torch.randint(0, 50, (2, 17), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(plain(input_ids=ids).logits, reference(ids).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("forward", [StaticCacheLM, OnnxForward])
def test_the_engines_forwards_give_the_same_bits_over_either_model(tmp_path, forward):
    reference, folder = _saved(tmp_path)
    sequence = torch.randint(0, 50, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    peak = check_same_logits(forward(reference, capacity=4), forward(load(folder), capacity=4), sequence, STEPS,
                             atol=0, rtol=0)
    assert peak > 0.1


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_same_tokens_from_either_model_in_both_decoders(tmp_path, temperature):
    target, target_folder = _saved(tmp_path / "target", seed=11, vocab=32, width=16, heads=2, kv_heads=1)
    draft, draft_folder = _saved(tmp_path / "draft", seed=12, vocab=32, layers=1, width=16, heads=2, kv_heads=1)
    config = DecodingConfig(draft_len=3, max_new_tokens=40, temperature=temperature, seed=5)
    prompt = torch.tensor([[1, 2, 3]])
    plain_target, plain_draft = load(target_folder), load(draft_folder)
    expected = speculative_generate(target, draft, prompt, config)
    got = speculative_generate(plain_target, plain_draft, prompt, config)
    assert got.tokens == expected.tokens
    assert [s.accepted for s in got.steps] == [s.accepted for s in expected.steps]
    assert (autoregressive_generate(plain_target, prompt, config).tokens
            == autoregressive_generate(target, prompt, config).tokens)


def test_without_the_lean_forward_transformers_runs_the_same_weights(tmp_path):
    reference, folder = _saved(tmp_path)
    plain = load(folder)
    lm = cached_lm(plain, 64, static_cache=False)
    assert isinstance(lm, CachedLM) and isinstance(lm.model, LlamaForCausalLM)
    assert cached_lm(plain, 64, static_cache=False).model is lm.model  # converted once
    assert [name for name, _ in plain.named_parameters()] == [name for name, _ in reference.named_parameters()]
    sequence = list(range(1, 31))
    check_same_logits(CachedLM(reference), lm, sequence, STEPS, atol=0, rtol=0)


def test_refuses_a_checkpoint_that_does_not_match_its_config(tmp_path):
    _, folder = _saved(tmp_path)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(ModelLoadError, match="missing model.layers.2"):
        load(folder)
    config_path.write_text(json.dumps({**config, "intermediate_size": 48}))
    with pytest.raises(ModelLoadError, match=r"mlp.gate_proj.weight \(64, 32\) vs \(48, 32\)"):
        load(folder)
    config_path.write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(ModelLoadError, match="unexpected model.layers.1"):
        load(folder)


@pytest.mark.parametrize("settings, why", [
    (dict(attention_bias=True), "biases"),
    (dict(tie_word_embeddings=True), "tied embeddings"),
    (dict(max_positions=2048, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
     "rotary type"),
])
def test_other_llamas_load_through_transformers(tmp_path, settings, why):
    reference, folder = _saved(tmp_path, **settings)
    with pytest.raises(Unsupported, match=why):
        load(folder)
    model = load_causal_lm(folder)
    assert isinstance(model, LlamaForCausalLM) and not model.training
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(model(ids).logits, reference(ids).logits)


def test_the_shipped_voice_speaks_without_importing_transformers():
    """Importing transformers' modelling code costs seconds: the command line's `synth` must not pay it."""
    code = ("import sys; from ssd_demo.backends.embedded import load_synthesizer; "
            "result = load_synthesizer().synthesize('Hi there.', mode='speculative'); "
            "assert result.audio.size > 0; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"
