"""CosyVoice 2's speech LM as a unified causal LM: strict loading from an official-layout llm.pt, the
same logits as the official way of calling it, the lean step, and exact decoding with RAS."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.backends.cosyvoice2.llm import (
    SpeechVocabLayout, build_speech_lm, layer_draft, load_speech_lm, official_to_unified, speech_lm_config,
    unified_to_official,
)
from ssd_demo.errors import ModelLoadError
from ssd_demo.engine.repetition_aware import RepetitionAwareSampling
from ssd_demo.engine.static_cache import StaticCacheLM, supports
from support.cosyvoice2 import tiny_backbone
from support.stats import chi_square_p, marginal, sample_count

LAYOUT = SpeechVocabLayout(text_rows=10, speech_tokens=3)  # 6 output ids: 3 speech, end, 2 more stops


def tiny_speech_lm(seed: int = 0, layers: int = 2, init: float = 0.5):
    torch.manual_seed(seed)
    model = build_speech_lm(speech_lm_config(tiny_backbone(layers, init), LAYOUT))
    with torch.no_grad():  # biases are zero at init: make them count, as trained ones do
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0, init)
    return model


def official_logits(state: dict[str, torch.Tensor], backbone: Qwen2Config, text: list[int], prompt_speech: list[int],
                    generated: list[int]) -> torch.Tensor:
    """What the official Qwen2LM computes, written out: a stock Qwen2ForCausalLM over input embeddings
    [sos, Qwen embeddings of the text, task, speech embeddings], its last hidden states through the
    biased decoder. [n_speech + 1, speech rows] (the rows that predict speech tokens)."""
    qwen = Qwen2ForCausalLM(backbone).eval()
    qwen.load_state_dict({k[len("llm.model."):]: v for k, v in state.items() if k.startswith("llm.model.")})
    sos, task = state["llm_embedding.weight"]
    speech = state["speech_embedding.weight"][torch.tensor(prompt_speech + generated, dtype=torch.long)]
    embeds = torch.cat([sos[None], qwen.model.embed_tokens(torch.tensor(text)), task[None], speech])[None]
    with torch.no_grad():
        hidden = qwen(inputs_embeds=embeds, output_hidden_states=True).hidden_states[-1][0]
    logits = hidden @ state["llm_decoder.weight"].T + state["llm_decoder.bias"]
    return logits[len(text) + 1:]


def write_checkpoint(folder, state: dict, backbone: Qwen2Config) -> None:
    (folder / "CosyVoice-BlankEN").mkdir(parents=True, exist_ok=True)
    (folder / "CosyVoice-BlankEN" / "config.json").write_text(json.dumps(backbone.to_dict(), default=str))
    torch.save(state, folder / "llm.pt")


def test_official_checkpoint_loads_strictly_and_computes_the_official_logits(tmp_path):
    model = tiny_speech_lm()
    state = unified_to_official(model)
    assert {"llm_embedding.weight", "speech_embedding.weight", "llm_decoder.bias", "llm.model.lm_head.weight"} <= set(state)
    write_checkpoint(tmp_path, state, tiny_backbone())
    loaded = load_speech_lm(tmp_path)
    text, prompt_speech, generated = [3, 7, 1, 9], [2, 0, 1], [1, 1, 0, 3]
    ids = torch.tensor([LAYOUT.prompt_ids(text, prompt_speech) + generated])
    with torch.no_grad():
        ours = loaded(input_ids=ids).logits[0, len(text) + 1:]
    expected = official_logits(state, tiny_backbone(), text, prompt_speech, generated)
    assert ours.shape == (len(prompt_speech) + len(generated) + 1, LAYOUT.speech_rows)
    assert torch.allclose(ours, expected, atol=1e-5), (ours - expected).abs().max()


@pytest.mark.parametrize("damage", ["extra", "missing", "layers", "no decoder"])
def test_a_checkpoint_that_does_not_match_is_refused(tmp_path, damage):
    state = unified_to_official(tiny_speech_lm())
    backbone = tiny_backbone()
    if damage == "extra":
        state["speaker_projection.weight"] = torch.zeros(2, 2)
    elif damage == "missing":
        del state["llm.model.model.layers.1.mlp.up_proj.weight"]
    elif damage == "layers":
        backbone = tiny_backbone(layers=3)
    else:
        del state["llm_decoder.bias"]
    write_checkpoint(tmp_path, state, backbone)
    with pytest.raises(ModelLoadError, match="llm.pt"):
        load_speech_lm(tmp_path)


def test_a_folder_without_the_files_says_what_is_missing(tmp_path):
    with pytest.raises(ModelLoadError, match="CosyVoice 2 checkpoint folder"):
        load_speech_lm(tmp_path)


def test_layout_maps_text_and_speech_apart():
    assert LAYOUT.speech_rows == 6 and LAYOUT.stop_ids == (3, 4, 5) and LAYOUT.end_of_speech == 3
    assert LAYOUT.prompt_ids([0, 9], [2]) == [6, 8, 17, 7, 2]
    with pytest.raises(ValueError, match="outside"):
        LAYOUT.prompt_ids([10])
    with pytest.raises(ValueError, match="speech tokens"):
        LAYOUT.prompt_ids([1], [3])  # the end id is no prompt token
    mapped, layout = official_to_unified(unified_to_official(tiny_speech_lm()))
    assert layout == LAYOUT and mapped["model.embed_tokens.weight"].shape[0] == LAYOUT.input_rows


def test_the_lean_step_matches_transformers_with_biases():
    model = tiny_speech_lm(seed=3)
    assert supports(model)
    ids = LAYOUT.prompt_ids([1, 2, 3], [0, 1]) + [2, 0]
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids])).logits[0]
    lean = StaticCacheLM(model, capacity=4)  # grows on the way
    got = torch.cat([lean.forward(ids[:5]), lean.forward(ids[5:6]), lean.forward(ids[6:])])
    assert torch.allclose(got, expected, atol=1e-5)


def test_layer_draft_shares_the_target_tensors():
    target = tiny_speech_lm(layers=4)
    draft = layer_draft(target, bottom=1, top=2)
    assert draft.config.num_hidden_layers == 3
    assert draft.model.layers[1].self_attn.q_proj.weight.data_ptr() == target.model.layers[2].self_attn.q_proj.weight.data_ptr()
    assert draft.lm_head.bias.data_ptr() == target.lm_head.bias.data_ptr()
    whole = layer_draft(target, bottom=2, top=2)
    ids = torch.tensor([LAYOUT.prompt_ids([4, 5], [1]) + [0]])
    with torch.no_grad():
        assert torch.allclose(whole(input_ids=ids).logits, target(input_ids=ids).logits, atol=1e-6)
    with pytest.raises(ValueError, match="cannot take"):
        layer_draft(target, bottom=3, top=2)


# Exactness with RAS on the CosyVoice-shaped model: the target's joint over the first NEW tokens is
# enumerated (each position's RAS row on its own prefix) and speculative samples are tested against it.
NEW = 4
RAS = RepetitionAwareSampling(top_p=0.8, top_k=3, win_size=2, tau_r=0.5, masked_until_min_len=(LAYOUT.end_of_speech,), min_len=2)
PROMPT = LAYOUT.prompt_ids([2, 5, 8], [0, 2])


def ras_joint(model, ras: RepetitionAwareSampling | None) -> dict[tuple[int, ...], float]:
    vocab = LAYOUT.speech_rows
    sequences = list(itertools.product(range(vocab), repeat=NEW))
    inputs = torch.cat([torch.tensor([PROMPT]).expand(len(sequences), -1), torch.tensor(sequences)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=inputs).logits[:, len(PROMPT) - 1: -1].float()  # [S, NEW, V]
    rows = logits.reshape(-1, vocab)
    if ras is None:
        probs = torch.softmax(rows, dim=-1)
    else:
        probs = ras(rows, [list(s[:i]) for s in sequences for i in range(NEW)])
    picked = probs.reshape(len(sequences), NEW, vocab).gather(-1, torch.tensor(sequences)[..., None])[..., 0]
    return {s: float(p) for s, p in zip(sequences, picked.double().prod(dim=-1))}


@pytest.mark.stats
def test_speculative_decoding_with_ras_is_exact_on_the_speech_lm():
    target = tiny_speech_lm(seed=5, layers=2, init=0.6)
    draft = layer_draft(target, bottom=1, top=0)
    config = DecodingConfig(max_new_tokens=NEW, draft_len=3)
    samples = [tuple(speculative_generate(target, draft, torch.tensor([PROMPT]), config.with_(seed=seed),
                                          prefix_distribution=RAS).tokens)
               for seed in range(sample_count(1500, minimum=200))]  # fewer: the power check weakens
    assert not any(LAYOUT.end_of_speech in s[:RAS.min_len] for s in samples)
    joint, plain = ras_joint(target, RAS), ras_joint(target, None)
    for positions in (slice(0, 2), slice(2, 4)):
        picked = [s[positions] for s in samples]
        assert chi_square_p(picked, marginal(joint, positions)) > 1e-3
        assert chi_square_p(picked, marginal(plain, positions)) < 1e-6, "test has no power"


def test_greedy_speculative_equals_greedy_autoregressive_on_the_speech_lm():
    target = tiny_speech_lm(seed=6, layers=3)
    draft = layer_draft(target, bottom=1, top=1)
    config = DecodingConfig(max_new_tokens=24, temperature=0.0, draft_len=4)  # stop ids as plain tokens here
    prompt = torch.tensor([LAYOUT.prompt_ids([1, 4, 4, 7, 2], [0, 0, 1])])
    expected = autoregressive_generate(target, prompt, config).tokens
    assert len(expected) == 24 and len(set(expected)) > 2
    assert speculative_generate(target, draft, prompt, config).tokens == expected
