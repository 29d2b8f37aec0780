"""The ssd-vllm-plugin's rule and checks, and the engine choice, without vLLM: the plugin's sampler is plain
torch (run here on this project's torch), and choosing vLLM where it is missing is a clear UserError."""

from __future__ import annotations

import sys

import pytest
import torch

from ssd_demo.errors import UserError

import ssd_vllm_plugin
from ssd_vllm_plugin import tolerance


def test_only_the_tested_vllm_release_is_accepted():
    ssd_vllm_plugin.check_vllm_version("0.32.0")
    ssd_vllm_plugin.check_vllm_version("0.32.0+cpu")
    with pytest.raises(ssd_vllm_plugin.UnsupportedVllm, match="tested with vLLM 0.32.0.*has vLLM 0.33.0"):
        ssd_vllm_plugin.check_vllm_version("0.33.0")


def test_registering_in_another_vllm_refuses_with_a_clear_message(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.31.0"))
    with pytest.raises(ssd_vllm_plugin.UnsupportedVllm, match="scripts/vllm_env.sh"):
        ssd_vllm_plugin.register()  # what vLLM calls in every process it starts


@pytest.mark.parametrize("raw, beta", [("", 0.0), ("0", 0.0), ("0.25", 0.25), ("1", 1.0)])
def test_beta_comes_from_the_environment(monkeypatch, raw, beta):
    monkeypatch.setenv(ssd_vllm_plugin.BETA_VARIABLE, raw)
    assert ssd_vllm_plugin.configured_beta() == beta


@pytest.mark.parametrize("raw", ["-0.1", "1.5", "lots", "nan"])
def test_a_bad_beta_is_refused(monkeypatch, raw):
    monkeypatch.setenv(ssd_vllm_plugin.BETA_VARIABLE, raw)
    with pytest.raises(ValueError, match="SSD_VLLM_BETA"):
        ssd_vllm_plugin.configured_beta()


def test_a_request_names_its_own_beta_or_gets_the_engines():
    assert ssd_vllm_plugin.request_beta({"ssd_beta": 0.3}, default=0.0) == 0.3
    assert ssd_vllm_plugin.request_beta({"ssd_beta": 0}, default=0.5) == 0.0  # 0 is a choice, not "unset"
    assert ssd_vllm_plugin.request_beta(None, default=0.2) == 0.2
    assert ssd_vllm_plugin.request_beta({"other": 1}, default=0.2) == 0.2
    for bad in (1.2, -0.5, "much", True, float("inf")):
        with pytest.raises(ValueError, match="ssd_beta"):
            ssd_vllm_plugin.request_beta({"ssd_beta": bad}, default=0.0)


def test_accept_probability_is_min_one_ratio_plus_beta():
    target = torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]])
    draft = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]])
    drafted = torch.tensor([0, 0, -1])  # q/p = 0.2, 5 (capped at 1), padding
    keep = tolerance.accept_probability(drafted, draft, target, beta=0.3)
    assert torch.allclose(keep, torch.tensor([0.5, 1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(tolerance.accept_probability(drafted, None, target, 0.0),
                          torch.tensor([0.1, 0.5, 0.0], dtype=torch.float64))
    # one beta per drafted token (each its request's): the first token's request is exact
    per_token = tolerance.accept_probability(drafted, draft, target, torch.tensor([0.0, 0.3, 0.3], dtype=torch.float64))
    assert torch.allclose(per_token, torch.tensor([0.2, 1.0, 0.0], dtype=torch.float64))
    masked = torch.tensor([[0.0, 0.7, 0.3]])  # a token the target cannot emit is never kept, whatever beta
    assert tolerance.accept_probability(torch.tensor([0]), draft[:1], masked, beta=0.9).item() == 0.0


def test_the_residual_is_the_positive_part_of_target_minus_draft():
    target = torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.5, 0.0]])
    draft = torch.tensor([[0.5, 0.25, 0.25], [0.5, 0.5, 0.0]])
    residual = tolerance.residuals(torch.tensor([0, 1]), draft, target)
    assert torch.allclose(residual[0], torch.tensor([0.0, 0.35, 0.05]))
    assert torch.allclose(residual[1], target[1])  # p == q: falls back to q, as ssd_demo.rules.exact does
    point_mass = tolerance.residuals(torch.tensor([1, 0]), None, target)  # no draft probabilities
    assert torch.allclose(point_mass, torch.tensor([[0.1, 0.0, 0.3], [0.0, 0.5, 0.0]]))


def test_outputs_are_laid_out_as_vllms_sampler_returns_them():
    drafted = torch.tensor([5, 6, 7, 8, 9, 4])  # request 0: 3 drafts, request 1: 0, request 2: 3
    accepted = torch.tensor([True, False, True, True, True, True])
    recovered = torch.tensor([50, 60, 70, 80, 90, 40])
    bonus = torch.tensor([[100], [101], [102]])
    out = tolerance.place(accepted, drafted, recovered, bonus, [3, 0, 3], max_spec_len=3)
    assert out.tolist() == [[5, 60, -1, -1], [101, -1, -1, -1], [8, 9, 4, 102]]


def test_a_draw_from_the_residual_follows_it():
    residual = torch.tensor([[0.0, 3.0, 1.0]]).expand(20_000, -1).contiguous()
    torch.manual_seed(0)
    draws = tolerance.recovered_tokens(residual, [20_000], {})
    share = (draws == 1).float().mean().item()
    assert (draws != 0).all() and abs(share - 0.75) < 0.02


def test_choosing_vllm_without_its_environment_is_a_clear_user_error(monkeypatch):
    from ssd_demo.backends.vllm import VllmUnavailableError, engine_choice, use_engine

    monkeypatch.setenv("SSD_DEMO_VLLM_PYTHON", "/nonexistent/bin/python")
    with pytest.raises(VllmUnavailableError, match="scripts/vllm_env.sh") as caught:
        use_engine(object(), "vllm")
    assert isinstance(caught.value, UserError)
    with pytest.raises(UserError, match="ours, vllm"):
        engine_choice("fast")
    monkeypatch.setenv("SSD_DEMO_ENGINE", "VLLM")
    assert engine_choice() == "vllm" and engine_choice("ours") == "ours"


def test_synth_with_the_vllm_engine_but_no_environment_says_how_to_build_it(monkeypatch, tmp_path, capsys):
    from ssd_demo.__main__ import main

    monkeypatch.setenv("SSD_DEMO_VLLM_PYTHON", str(tmp_path / "missing"))
    assert main(["synth", "Hello.", "--engine", "vllm", "--out", str(tmp_path / "x.wav")]) == 2
    assert "bash scripts/vllm_env.sh" in capsys.readouterr().err


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.4, 1.0])
def test_the_plugins_rule_equals_the_engines_ssd_rule_on_the_same_blocks(beta):
    """The plugin keeps its own copy of SSD's maths (it runs inside vLLM, which never imports ssd_demo): on the
    same random blocks its keep probabilities and residuals equal the engine's `ssd` rule's. One difference, on
    purpose: a drafted token the target cannot emit (q = 0) the plugin never keeps, since vLLM's draft is not
    masked as the target is (a Llasa draft could propose a text token), where the engine keeps it with
    probability beta (its draft is masked like the target; only a top-k/top-p cut can leave q = 0)."""
    from ssd_demo import DecodingConfig
    from ssd_demo.rules import Block, make_rule

    rule = make_rule(DecodingConfig(acceptance="ssd", beta=beta))
    generator = torch.Generator().manual_seed(int(beta * 10))
    for _ in range(20):
        k, vocab = 5, 12
        draft = torch.softmax(3 * torch.randn(k, vocab, generator=generator), dim=-1)
        target = torch.softmax(3 * torch.randn(k + 1, vocab, generator=generator), dim=-1)
        drafted = torch.multinomial(draft, 1, generator=generator)[:, 0]
        block = Block(drafted=drafted, draft_probs=draft, target_probs=target, target_scores=target.log())
        ours = rule.accept_probability(block).double()
        theirs = tolerance.accept_probability(drafted, draft, target[:k], beta)
        assert torch.allclose(ours, theirs, atol=1e-6), (ours, theirs)
        residual = tolerance.residuals(drafted, draft, target[:k])
        for i in range(k):
            expected = rule.residual(block, i)
            assert torch.allclose(residual[i] / residual[i].sum(), expected / expected.sum(), atol=1e-6)
    masked = Block(drafted=torch.tensor([0]), draft_probs=torch.tensor([[0.5, 0.5]]),
                   target_probs=torch.tensor([[0.0, 1.0], [0.5, 0.5]]), target_scores=torch.tensor([[-1e9, 0.0]] * 2))
    assert rule.accept_probability(masked).item() == pytest.approx(beta)
    assert tolerance.accept_probability(masked.drafted, masked.draft_probs, masked.target_probs[:1], beta).item() == 0
