"""The CosyVoice 2 draft recipe end to end at tiny sizes: on-policy generations with the official prompt and
length rules, distillation that changes only the paper's trained tensors and raises held-out acceptance,
resuming (generations and training) to the same result as an uninterrupted run, and an export that the
checkpoint-folder loader takes as the paper's draft."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from ssd_demo.backends.cosyvoice2.llm import build_speech_lm, layer_draft, materialise
from ssd_demo.backends.cosyvoice2.loading import load_cosyvoice2
from ssd_demo.cli import train_draft
from ssd_demo.training import cosyvoice2_draft as recipe
from ssd_demo.speech.synthesis import VoicePrompt
from support.cosyvoice2 import FLOW, HIFT, FakeEncoders, default_voice, folder  # noqa: F401  (folder: a fixture)


def _args(out, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    train_draft.add_arguments(parser)
    return parser.parse_args(["--out", str(out), "--threads", "1", "--device", "cpu", *extra])


def _report(out) -> dict:
    import json

    return json.loads((out / recipe.SUMMARY_FILE).read_text())


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("draft-smoke")
    assert train_draft.main(_args(out, "--smoke")) == 0
    return out


@pytest.mark.train
def test_smoke_run_raises_held_out_acceptance_and_writes_everything(smoke_run):
    for name in (recipe.GENERATIONS_FILE, recipe.CHECKPOINT_FILE, recipe.DRAFT_FILE, recipe.SUMMARY_FILE):
        assert (smoke_run / name).is_file(), name
    report = _report(smoke_run)
    smoke = recipe.smoke_recipe()
    assert report["training"]["steps"] == smoke.stage.steps and report["training"]["resumed_from_step"] is None
    assert report["held_out_generations"] == smoke.held_out
    assert report["train_generations"] == smoke.texts - smoke.held_out
    before, after = report["acceptance"]["before"], report["acceptance"]["after"]
    assert after["ras"] > before["ras"] + 0.1 and after["softmax"] > before["softmax"] + 0.05
    assert after["kl"] < before["kl"] / 2
    assert 0 < before["ras"] < after["ras"] <= 1 and before["positions"] == after["positions"] > 0
    assert report["draft"]["bottom"] == 2 and report["draft"]["top"] == 6
    assert report["training"]["final_loss"] < report["training"]["losses"][0][1]
    # The deviation from the paper and the prompt mix are on record.
    assert report["recipe"]["loss"] == "kl_on_target_generations"
    assert report["recipe"]["paper_loss"] == "cross-entropy on LibriTTS"
    prompts = report["prompts"]
    assert prompts["zero_shot_fraction"] == smoke.zero_shot_fraction == 0.8
    mix = {kind: prompts["train"][kind] + prompts["held_out"][kind] for kind in prompts["train"]}
    assert sum(mix.values()) == smoke.texts and mix["generation"] > smoke.texts / 2  # most prompts zero-shot


@pytest.mark.train
def test_zero_shot_generations_are_prompted_with_an_earlier_generation_as_the_voice(smoke_run):
    items = torch.load(smoke_run / recipe.GENERATIONS_FILE, weights_only=False)["items"]
    layout = recipe.SMOKE_LAYOUT
    zero_shot = [(i, item) for i, item in enumerate(items) if item["voice"]["kind"] == "generation"]
    assert zero_shot
    for index, item in zero_shot:
        source = items[item["voice"]["from"]]
        assert item["voice"]["from"] < index
        speech = [t for t in source["generated"] if t < layout.speech_tokens]
        # [sos, the voice's text + the text, task, the voice's speech tokens]: the official zero-shot input
        assert item["prompt"] == layout.prompt_ids(source["text_ids"] + item["text_ids"], speech)
    for item in items:
        if item["voice"]["kind"] == "cross_lingual":
            assert item["prompt"] == layout.prompt_ids(item["text_ids"])


@pytest.mark.train
def test_the_export_is_the_layer_draft_with_only_the_trained_tensors_changed(smoke_run):
    target = recipe.smoke_target().model
    shell = layer_draft(target, 2, 6)
    untrained = shell.state_dict()
    state = recipe.load_draft_state(smoke_run / recipe.DRAFT_FILE)
    trained = set(_report(smoke_run)["draft"]["trained"])
    assert trained == {n for n in untrained if n.startswith(("lm_head.", "model.layers.0.", "model.layers.1."))}
    assert set(state) == trained  # the file holds what training changed; the rest is the target's
    for name, tensor in state.items():
        assert not torch.equal(tensor, untrained[name]), f"{name} did not train"
    draft = materialise(build_speech_lm(shell.config, device="meta"), {**untrained, **state})  # strict
    # The loaded draft scores the held-out generations as the run reported.
    items = torch.load(smoke_run / recipe.GENERATIONS_FILE, weights_only=False)["items"]
    held_out = items[-recipe.smoke_recipe().held_out:]
    again = recipe.expected_acceptance(draft, target, recipe.SMOKE_LAYOUT, held_out, batch_size=8)
    assert again == _report(smoke_run)["acceptance"]["after"]


@pytest.mark.train
def test_an_interrupted_run_continues_to_the_same_draft(tmp_path):
    small = ("--smoke", "--num-texts", "16", "--held-out", "4", "--checkpoint-every", "1")
    first, fresh = tmp_path / "interrupted", tmp_path / "fresh"
    assert train_draft.main(_args(first, *small, "--steps", "2")) == 0
    assert torch.load(first / recipe.CHECKPOINT_FILE, weights_only=False)["step"] == 2
    # As if generation had stopped after 5 texts too: the next run generates the rest, and the same.
    generations = torch.load(first / recipe.GENERATIONS_FILE, weights_only=False)
    complete = generations["items"]
    torch.save({**generations, "items": complete[:5]}, first / recipe.GENERATIONS_FILE)
    assert train_draft.main(_args(first, *small, "--steps", "4")) == 0
    assert torch.load(first / recipe.GENERATIONS_FILE, weights_only=False)["items"] == complete
    report = _report(first)["training"]
    assert report["resumed_from_step"] == 2 and report["steps"] == 4
    # The smoke warmup is 4 steps, so the learning rates of steps 0-3 do not depend on the planned total:
    # resumed at step 2, the run must end where an uninterrupted 4-step run does.
    assert train_draft.main(_args(fresh, *small, "--steps", "4")) == 0
    resumed, straight = (recipe.load_draft_state(d / recipe.DRAFT_FILE) for d in (first, fresh))
    for name in resumed:
        assert torch.allclose(resumed[name], straight[name], atol=1e-6), name


def test_generation_follows_the_official_prompt_and_length_rules():
    target = recipe.smoke_target()
    layout = target.layout
    with torch.no_grad():  # make the end of speech the likeliest token: only the minimum length holds it back
        target.model.lm_head.bias[layout.end_of_speech] = 8.0
    item = recipe.generate(target, "one two three", seed=0)
    text = target.tokenize("one two three")
    # [sos, text, task] and no prompt speech: the official cross-lingual input
    assert item["prompt"] == [layout.sos_id, *(layout.text_offset + t for t in text), layout.task_id]
    assert item["text_count"] == 3
    generated = item["generated"]
    assert layout.end_of_speech not in generated[:6] and generated[-1] in layout.stop_ids  # at least 2 per text token
    config = recipe.generation_config(layout, 3, seed=0)
    assert config.max_new_tokens == 20 * 3 and config.eos_ids == layout.stop_ids
    assert recipe.generation_config(layout, 3, seed=0, cap=10).max_new_tokens == 10
    ras = recipe.official_sampling(layout, 3)
    assert (ras.top_p, ras.top_k, ras.win_size, ras.tau_r, ras.min_len) == (0.8, 25, 10, 0.1, 6)


@pytest.mark.train
def test_a_checkpoint_folder_trains_and_its_draft_loads_into_the_synthesizer(tmp_path, folder):  # noqa: F811
    texts = tmp_path / "texts.txt"
    texts.write_text("a cat sat\n\nthe mat\na dog ran\n  a   cat sat  \nthe sun is up\none more\n")
    out = tmp_path / "run"
    assert train_draft.main(_args(out, "--checkpoint", str(folder), "--texts", str(texts), "--held-out", "2",
                             "--steps", "3", "--batch-size", "2", "--max-new-tokens", "12")) == 0
    report = _report(out)
    assert report["texts"] == 5 and report["train_generations"] == 3  # blank and repeated lines dropped
    state = recipe.load_draft_state(out / recipe.DRAFT_FILE)
    synth = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT, draft_state=state)
    draft = synth.drafts["layers"]
    assert torch.equal(draft.lm_head.bias, state["lm_head.bias"])
    assert not torch.equal(draft.lm_head.bias, synth.target.lm_head.bias)
    result = synth.synthesize("a cat sat", mode="speculative", config=synth.config(seed=1, max_new_tokens=16))
    assert result.generation.tokens


@pytest.mark.train
def test_bad_requests_are_refused_clearly(smoke_run, tmp_path):
    with pytest.raises(ValueError, match="cosyvoice2"):
        train_draft.main(_args(tmp_path, "--smoke", "--preset", "llasa"))
    with pytest.raises(ValueError, match="--checkpoint .* or --smoke"):
        train_draft.main(_args(tmp_path))
    with pytest.raises(ValueError, match="--steps must be at least 1"):
        train_draft.main(_args(tmp_path, "--smoke", "--steps", "0"))
    with pytest.raises(ValueError, match="generations of other texts"):  # another recipe in the same folder
        train_draft.main(_args(smoke_run, "--smoke", "--num-texts", "20"))
    with pytest.raises(ValueError, match="generations of other texts, settings"):  # another prompt mix
        train_draft.main(_args(smoke_run, "--smoke", "--zero-shot-fraction", "0.5"))
    with pytest.raises(ValueError, match="--zero-shot-fraction must be from 0 to 1"):
        train_draft.main(_args(tmp_path, "--smoke", "--zero-shot-fraction", "1.5"))
    with pytest.raises(ValueError, match="--default-voice needs --checkpoint"):
        train_draft.main(_args(tmp_path / "voice", "--smoke", "--default-voice"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "a cat", "speech_tokens": [1, 99]}) + "\n")
    with pytest.raises(ValueError, match="line 1: .speech_tokens. must be a list of speech token ids from 0 to 60"):
        train_draft.main(_args(tmp_path / "data", "--smoke", "--data", str(bad)))


def test_texts_are_prompted_as_the_app_speaks_them():
    from ssd_demo.training.cosyvoice2_draft import spoken_chunks

    notes = []
    chunks = spoken_chunks(["It costs 12 euros", "Say <|endofprompt|> now", "It costs 12 euros"],
                           lambda text: text.split(), notes.append)
    assert chunks == ["It costs twelve euros."]  # numbers spelt out, a full stop added, repeats once
    assert notes and "markup" in notes[0]


def test_a_zero_shot_training_prompt_is_the_one_the_backend_builds(folder):  # noqa: F811
    """The voice an earlier generation gives (its text as the transcript, its speech tokens as the clip's)
    prompts the target exactly as the app prompts it for a clip with that transcript and those tokens."""
    synth = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT)
    backend = synth.backend
    backend.encoders = FakeEncoders()  # a clip's speech tokens: [3, 1, 4, 1, 5, 9]
    target = recipe.checkpoint_target(folder, "cpu")
    transcript, text = "Take 2 at 10:30.", "a cat sat on the mat"
    earlier = {"text_ids": recipe.text_ids(target, transcript), "generated": [3, 1, 4, 1, 5, 9, target.layout.end_of_speech]}
    voice = recipe.prompts.generated_voice(earlier, target.layout)
    prompt, count = recipe.backend_prompt(target, text, voice)
    clip = VoicePrompt(audio=np.zeros(16000, np.float32), sample_rate=16000, transcript=transcript)
    assert prompt == backend.prompt_ids(text, clip) and count == backend.prompt_ids(text, clip).text_count
    # The app's default voice as a training voice, and the cross-lingual prompt (a clip without transcript).
    app_voice = default_voice()
    assert recipe.backend_prompt(target, text, app_voice)[0] == backend.prompt_ids(text)
    silent = VoicePrompt(audio=np.ones(16000, np.float32), sample_rate=16000, transcript="")
    assert recipe.backend_prompt(target, text)[0] == backend.prompt_ids(text, silent)
    # A generation's stored voice record reproduces its prompt through the same code.
    item = recipe.generate(target, text, seed=0, cap=8, voice=voice)
    assert item["prompt"] == prompt and item["text_ids"] == recipe.text_ids(target, text)


@pytest.mark.train
def test_data_trains_the_draft_with_cross_entropy(tmp_path):
    import random

    rng = random.Random(0)
    words = "a cat sat on the mat dog ran sun is up one more".split()
    data = tmp_path / "speech.jsonl"
    with data.open("w") as lines:
        for index in range(24):  # speech with a pattern to learn: steps of 7 from a random start
            start = rng.randrange(61)
            record = {"text": " ".join(rng.choice(words) for _ in range(rng.randint(2, 5))),
                      "speech_tokens": [(start + 7 * k) % 61 for k in range(12)]}
            if index % 2:  # half of them zero-shot in a voice of their own
                record |= {"prompt_text": "the cat", "prompt_speech_tokens": [(start + 3 * k) % 61 for k in range(5)]}
            lines.write(json.dumps(record) + "\n")
    out = tmp_path / "run"
    assert train_draft.main(_args(out, "--smoke", "--data", str(data), "--held-out", "4", "--steps", "12")) == 0
    report = _report(out)
    assert report["recipe"]["loss"] == "cross_entropy_on_data" and report["recipe"]["data"] == str(data)
    assert report["recipe"]["paper_loss"] == "cross-entropy on LibriTTS"
    assert report["prompts"]["train"] == {"cross_lingual": 10, "default": 0, "generation": 0, "data": 10}
    assert report["prompts"]["held_out"] == {"cross_lingual": 2, "default": 0, "generation": 0, "data": 2}
    assert report["train_generations"] == 20 and report["held_out_generations"] == 4
    losses = [loss for _, loss in report["training"]["losses"]]
    assert losses[-1] < losses[0] - 0.3  # the loss goes down
    # Each example is the backend's prompt, then the line's speech tokens and the end of speech.
    target = recipe.smoke_target()
    examples = recipe.read_data(data, target)
    first, second = (json.loads(line) for line in data.read_text().splitlines()[:2])
    assert examples[0]["prompt"] == recipe.backend_prompt(target, first["text"])[0]
    assert examples[0]["generated"] == first["speech_tokens"] + [target.layout.end_of_speech]
    voice = recipe.voice_of(recipe.text_ids(target, "the cat"), second["prompt_speech_tokens"])
    assert examples[1]["prompt"] == recipe.backend_prompt(target, second["text"], voice)[0]
    assert examples[1]["prompt"][-5:] == second["prompt_speech_tokens"]


def test_the_packages_run_is_the_function_however_it_is_imported():
    """The package imports its modules on first use: `run` stays the command's function, never a module of that name."""
    import types

    from ssd_demo.training.cosyvoice2_draft import recipe_from, run

    assert isinstance(run, types.FunctionType) and callable(recipe_from)
