"""The training recipe end to end at tiny sizes, so it cannot rot: data, three models, resume, export."""

import json
import shutil
import argparse

import pytest
import torch

from ssd_demo.cli import train as cli
from ssd_demo.errors import InputError


def _args(out, **overrides):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    argv = ["--smoke", "--out", str(out), "--threads", "1"]
    for key, value in overrides.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return parser.parse_args(argv)


@pytest.mark.train
def test_smoke_recipe_trains_resumes_and_exports(tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    # An interrupted first run: data + a target trained for 2 of its steps.
    assert cli.main(_args(out, stages="data,target", target_steps=2)) == 0
    first = torch.load(out / "target" / "checkpoint.pt", weights_only=False)
    assert first["step"] == 2
    shutil.rmtree(out / "target" / "model")  # as if it had stopped before finishing
    # Resuming continues from step 2 to the smoke recipe's 4 steps, then trains the drafts and exports.
    assert cli.main(_args(out)) == 0
    summary = json.loads((out / "target" / "summary.json").read_text())
    assert summary["steps"] == 4
    export = out / "export"
    meta = json.loads((export / "voice.json").read_text())
    assert len(meta["test_sentences"]) == 4
    assert meta["supplements"][0]["kind"] == "short utterances" and meta["supplements"][0]["sentences"] == 3
    # Resumed with other data, the folder's models would be exported as trained on it: refused, dataset untouched
    dataset = (out / "dataset.npz").read_bytes()
    with pytest.raises(InputError, match=r"\(short_utterances differ\): use a new --out"):
        cli.main(_args(out, short_utterances=0))
    assert (out / "dataset.npz").read_bytes() == dataset
    from ssd_demo.backends.vocab import VocabLayout
    from ssd_demo.training.dataset import load_dataset, longest_opening, longest_symbol, pack, symbol_frame_cap
    data = load_dataset(out / "dataset.npz")
    longest = longest_symbol(*pack([e["speech"] for e in data["train"]]), VocabLayout.from_dict(data["layout"]))
    assert meta["max_symbol_frames"] == symbol_frame_cap(longest)  # not the data stage's 200-frame truncation
    opening = longest_opening(*pack([e["speech"] for e in data["train"]]), VocabLayout.from_dict(data["layout"]))
    assert meta["max_opening_frames"] == symbol_frame_cap(opening)
    assert set(meta["training"]) == {"target", "layers", "distilled", "heads"}
    heads_summary = meta["training"]["heads"]
    assert len(heads_summary["expected_acceptance"]) == 2 and all(0 < a <= 1 for a in heads_summary["expected_acceptance"])
    split = json.loads((out / "split.json").read_text())
    assert not set(split["test"]) & set(split["train"])
    for folder in ("target", "draft_layers", "draft_distilled"):
        model = AutoModelForCausalLM.from_pretrained(export / folder, dtype=torch.float32)
        assert model.config.vocab_size == meta["vocab"]["vocab_size"]
        assert next(model.parameters()).dtype == torch.float32
    layers = AutoModelForCausalLM.from_pretrained(export / "draft_layers")
    assert layers.config.num_hidden_layers == 2  # bottom 1 + top 1 of the 3-layer smoke target
    from ssd_demo.engine.draft_heads import DraftHeads
    from ssd_demo.backends.embedded import load_synthesizer
    assert DraftHeads.load(export / "draft_heads").config.hidden == 32
    voice = load_synthesizer(draft="heads", path=export)  # the exported voice speaks with its heads
    result = voice.synthesize("Hello there.", mode="speculative", config=voice.config(max_new_tokens=20, seed=1))
    assert result.generation.stats.draft_len == voice.config().draft_len and len(result.audio) > 0
    # A latent voice samples its phoneme-end marker at its own probability (engine.sampling._with_untempered)
    assert voice.config().untempered_token_ids == (meta["vocab"]["next_phoneme_id"],)
    assert (export / "codec" / "codebook.npy").exists() and (export / "codec" / "decoder.onnx").exists()
    # The recipe's codes are of the teacher's prior latent: the exported codec decodes through its flow
    assert json.loads((export / "codec" / "codec_config.json").read_text())["latent"] == "prior"
    assert meta["phonemes"]["espeak_voice"] == "en-us" and meta["teacher"]["scales"]["noise_scale"] == 0.333
    assert (export / "examples.txt").read_text().strip()


@pytest.mark.train
def test_heads_stage_options_and_a_warm_start_of_another_shape(tmp_path, capsys):
    from ssd_demo.engine.draft_heads import DraftHeads

    out = tmp_path / "run"
    assert cli.main(_args(out, heads_unroll=3)) == 0
    assert json.loads((out / "heads" / "summary.json").read_text())["unroll"] == 3
    assert len(json.loads((out / "heads" / "summary.json").read_text())["expected_acceptance"]) == 3
    # Other heads from the exported voice: a warm start of the same shape continues, another shape starts afresh.
    shutil.rmtree(out / "heads")
    assert cli.main(_args(out, stages="heads", init_from=out / "export")) == 0
    assert "heads: warm start from" in capsys.readouterr().out
    shutil.rmtree(out / "heads")
    assert cli.main(_args(out, stages="heads", init_from=out / "export", heads_inner=48)) == 0
    assert "another shape" in capsys.readouterr().out
    assert DraftHeads.load(out / "heads" / "model").config.inner == 48
    with pytest.raises(ValueError, match="heads-unroll"):
        cli.main(_args(out, stages="heads", heads_unroll=0))


def test_layer_subset_draft_copies_the_right_layers():
    from ssd_demo.backends.vocab import VocabLayout
    from ssd_demo.training.train import ModelSpec, layer_subset_draft, make_llama

    layout = VocabLayout(n_phonemes=5, n_speech=7)
    target = make_llama(layout, ModelSpec(layers=4, hidden=16, intermediate=32, heads=2, kv_heads=1))
    draft, trainable = layer_subset_draft(target, bottom=1, top=2)
    assert draft.config.num_hidden_layers == 3
    for draft_index, target_index in ((0, 0), (1, 2), (2, 3)):
        a = draft.model.layers[draft_index].mlp.up_proj.weight
        b = target.model.layers[target_index].mlp.up_proj.weight
        assert torch.equal(a, b)
    assert any(n.startswith("model.layers.0.") for n in trainable)
    assert not any(n.startswith("model.layers.1.") or n.startswith("model.layers.2.") for n in trainable)
    assert "lm_head.weight" in trainable and "model.embed_tokens.weight" not in trainable
    with pytest.raises(ValueError):
        layer_subset_draft(target, bottom=3, top=2)


def test_warm_start_keeps_every_row_when_the_layout_is_the_same():
    # A continued run (same vocabulary layout) must keep the learned phoneme and NEXT rows: re-initialising
    # them would make the model relearn how every phoneme sounds.
    from ssd_demo.backends.vocab import VocabLayout
    from ssd_demo.training.train import ModelSpec, make_llama, warm_start

    layout = VocabLayout(n_phonemes=6, n_speech=16)
    spec = ModelSpec(layers=2, hidden=16, intermediate=32, heads=2, kv_heads=1, max_positions=64)
    torch.manual_seed(0)
    source, fresh = make_llama(layout, spec), make_llama(layout, spec)
    warm_start(fresh, source, layout.to_dict(), layout)
    for name, tensor in source.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name

    # Across layouts only speech and special rows carry over; phoneme rows stay as initialised.
    other = VocabLayout(n_phonemes=7, n_speech=16)
    moved = make_llama(other, spec)
    before = moved.model.embed_tokens.weight[other.phoneme_offset].clone()
    warm_start(moved, source, layout.to_dict(), other)
    assert torch.equal(moved.model.embed_tokens.weight[other.phoneme_offset], before)
    assert torch.equal(moved.model.embed_tokens.weight[other.speech_offset], source.model.embed_tokens.weight[layout.speech_offset])


@pytest.mark.train
def test_a_voice_with_codes_relative_to_the_phoneme_trains_exports_and_speaks(tmp_path):
    """--symbol-codes N: a codebook of N centroids per phoneme symbol, a vocabulary of N speech codes; the exported
    voice decodes each code in its symbol's codebook, streamed by codec windows or whole, to the same audio."""
    import numpy as np

    from ssd_demo.backends.embedded import load_synthesizer
    from ssd_demo.speech.latent_codec import LatentCodec

    out = tmp_path / "run"
    assert cli.main(_args(out, symbol_codes=4)) == 0
    meta = json.loads((out / "export" / "voice.json").read_text())
    assert meta["vocab"]["symbol_codes"] and meta["vocab"]["n_speech"] == 4
    codec = LatentCodec.load(out / "export" / "codec")
    assert codec.config.symbols == meta["vocab"]["n_phonemes"] and len(codec.codebook) == 4 * codec.config.symbols
    voice = load_synthesizer(draft="heads", path=out / "export")
    config = voice.config(max_new_tokens=40, seed=1)
    streamed = voice.stream("Hello there.", mode="speculative", config=config).run()
    whole = voice.synthesize("Hello there.", mode="speculative", config=config)
    assert streamed.generation.tokens == whole.generation.tokens and len(whole.audio) > 0
    assert len(streamed.audio) == len(whole.audio)
    assert np.abs(streamed.audio - whole.audio).max() < 0.25  # windows cross-faded at their joins
    with pytest.raises(InputError, match="symbol-codes"):
        cli.main(_args(tmp_path / "other", symbol_codes=1))
