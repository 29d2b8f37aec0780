"""`eval --engine vllm` and `stimuli --engine vllm`: what is refused before any model loads, how batch numbers add
up and are reported, and (marked vllm) an evaluation whose systems each render their texts in one vLLM batch."""

import json

import numpy as np
import pytest
import soundfile as sf

from ssd_demo.__main__ import main
from ssd_demo.backends.vllm.synthesizer import BatchRender, TextRender
from ssd_demo.backends.vllm.worker import WorkerBatch
from ssd_demo.measure.evaluation_batch import batch_numbers, voice_groups
from ssd_demo.measure.evaluation_inputs import EvalItem
from ssd_demo.measure.evaluation_report import markdown
from support.vllm_support import needs_vllm

MISSING = {"SSD_DEMO_VLLM_PYTHON": "/nonexistent/vllm/bin/python"}


@pytest.mark.parametrize("argv, environment, message", [
    (["eval"], {}, "the embedded voice runs on our engine only"),
    (["eval", "--preset", "cosyvoice2-paper"], {}, "preset cosyvoice2-paper runs on our engine only"),
    (["eval", "--target-model", "org/t", "--draft-model", "org/d", "--repeats", "2"], {}, "--repeats"),
    (["eval", "--target-model", "org/t", "--draft-model", "org/d", "--adaptive-draft-len"], {}, "fixed K"),
    (["eval", "--target-model", "org/t", "--draft-model", "org/d"], MISSING, "needs its own environment"),
    (["stimuli", "--name", "s"], {}, "preset 'embedded' runs on our engine only"),
    (["stimuli", "--name", "s", "--preset", "llasa-1b-3b"], MISSING, "needs its own environment"),
])
def test_vllm_engine_choices_are_refused_before_models_load(tmp_path, monkeypatch, capsys, argv, environment, message):
    monkeypatch.setenv("SSD_DEMO_VLLM_PYTHON", str(tmp_path / "no-such-python"))  # no vLLM unless a test needs one
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    out = ["--out", str(tmp_path / "out")] if argv[0] == "eval" else ["--data-dir", str(tmp_path / "data")]
    assert main([*argv, "--engine", "vllm", *out]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


def _render(lengths: list[int], wall: float, mode: str = "speculative", drafted=10, accepted=5) -> BatchRender:
    texts = [TextRender(f"t{n}", np.zeros(n * 100, np.float32), [[7] * n], latency_seconds=wall * (i + 1) / len(lengths))
             for i, n in enumerate(lengths)]
    batch = WorkerBatch([[7] * n for n in lengths], ["stop"] * len(lengths), [t.latency_seconds for t in texts], wall,
                        drafts=4, draft_tokens=drafted, accepted_tokens=accepted)
    return BatchRender(texts, 1000, batch, mode, config=None, codec_seconds=0.5)


def test_batches_of_several_voice_prompts_add_up_to_one_throughput():
    one = batch_numbers([_render([3, 5], wall=2.0)])
    assert one["batches"] == 1 and one["tokens_per_second"] == pytest.approx(4.0)
    assert one["audio_seconds_per_second"] == pytest.approx(0.4) and one["acceptance_rate"] == pytest.approx(0.5)
    both = batch_numbers([_render([3, 5], wall=2.0), _render([8], wall=6.0, drafted=30, accepted=3)])
    assert both["batches"] == 2 and both["texts"] == 3 and both["tokens"] == 16
    assert both["tokens_per_second"] == pytest.approx(16 / 8.0) and both["audio_seconds"] == pytest.approx(1.6)
    assert both["acceptance_rate"] == pytest.approx(8 / 40) and both["latency_seconds"]["max"] == pytest.approx(6.0)
    assert batch_numbers([_render([3], wall=1.0, mode="ar")])["acceptance_rate"] is None


def test_items_sharing_a_voice_prompt_are_one_batch():
    shared, own = object(), object()
    items = [EvalItem("a", "A.", "b", shared), EvalItem("b", "B.", "b", own), EvalItem("c", "C.", "b", shared)]
    assert voice_groups(items) == [[0, 2], [1]]
    assert voice_groups([EvalItem("a", "A.", "b"), EvalItem("b", "B.", "b")]) == [[0, 1]]


def test_the_batched_report_shows_throughput_and_latency_instead_of_per_text_speedups():
    row = {"system": "AR", "acceptance": None, "tokens_per_second": 123.4, "audio_seconds_per_second": 2.5,
           "throughput_vs_ar": 1.0, "lm_rtf": 0.4, "latency_median_s": 1.25, "latency_max_s": 2.0, "wer": 0.1}
    report = {"engine": "vllm", "metrics": ["wer"], "embedded": False, "pair": "custom pair d -> t",
              "texts": ["a", "b"], "test_set": None, "asr": {"model": "w", "normaliser": "seed-tts"}, "commit": "c",
              "date": "d", "machine": "m", "systems": [row], "bucket_names": [],
              "config": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "draft_len": 4}}
    text = markdown(report, "python -m ssd_demo eval --engine vllm")
    assert "| tokens/s | audio s / s | throughput vs AR | LM-RTF | latency median / max s |" in text
    assert "| 123.4 | 2.50 | 1.00 | 0.400 | 1.25 / 2.00 |" in text
    assert "LM speedup" not in text and "end-to-end speedup" not in text and "continuous batching" in text


@pytest.mark.vllm
@needs_vllm
def test_eval_on_vllm_renders_each_system_in_one_batch_and_scores_wer(tmp_path, capsys):
    from support.llasa_fixtures import build_config_true_family
    from support.tiny_whisper import build_tiny_whisper

    family = build_config_true_family(tmp_path / "pair", sizes=("1B", "3B"))
    whisper = build_tiny_whisper(tmp_path / "whisper")
    texts = tmp_path / "texts.txt"
    texts.write_text("Hello there.\nThe cat sat on the mat.\nThree.\n", encoding="utf-8")
    out = tmp_path / "eval"
    assert main(["eval", "--engine", "vllm", "--target-model", str(family.sizes["3B"]),
                 "--draft-model", str(family.sizes["1B"]), "--codec", str(family.codec), "--device", "cpu",
                 "--test-set", str(texts), "--betas", "0", "--draft-len", "3", "--max-new-tokens", "8",
                 "--whisper", str(whisper), "--threads", "1", "--out", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    report = json.loads((out / "eval.json").read_text())
    assert report["engine"] == "vllm" and [row["system"] for row in report["systems"]] == [
        "AR", f"SSD {family.sizes['1B'].name} beta=0"]
    for row in report["systems"]:
        label = row["system"]
        numbers, texts_rows = report["batches"][label], report["per_text"][label]
        assert numbers["batches"] == 1 and numbers["texts"] == 3  # all three texts in one submission
        assert numbers["tokens"] == sum(t["tokens"] for t in texts_rows) > 0
        assert row["tokens_per_second"] == pytest.approx(numbers["tokens"] / numbers["lm_seconds"])
        assert row["latency_max_s"] == pytest.approx(max(t["latency_s"] for t in texts_rows))
        assert [t["reference_words"] for t in texts_rows] == [2, 6, 1]
        assert row["wer"] == pytest.approx(np.mean([t["wer"] for t in texts_rows]))
        assert f"{label}: 3 texts" in printed and "tokens/s" in printed
    speculative = report["systems"][1]
    assert speculative["acceptance"] is not None and "wer_vs_ar" in speculative and "lm_speedup" not in speculative
    assert report["systems"][0]["throughput_vs_ar"] == pytest.approx(1.0)
    assert "| tokens/s |" in (out / "eval.md").read_text()


class _RecordingBatcher:
    """Just what `batch_renderer` uses of a VllmSynthesizer: config, render_batch (each text's audio a constant
    made from its index, so a mix-up shows), close, draft_name."""

    draft_name = "d"

    def __init__(self):
        self.calls, self.closed = [], 0

    def config(self, **overrides):
        from ssd_demo.config import DecodingConfig

        return DecodingConfig(**overrides)

    def render_batch(self, texts, mode, config, draft=None):
        self.calls.append((list(texts), mode, config.seed))
        render = _render([2] * len(texts), wall=1.0, mode=mode)
        for index, (text, clip) in enumerate(zip(texts, render.texts)):
            clip.text, clip.audio = text, np.full(300, 0.1 * (index + 1), np.float32)
        render.config = config
        return render

    def close(self):
        self.closed += 1


def test_stimuli_on_vllm_render_each_system_in_one_batch(tmp_path):
    from ssd_demo.listening.stimuli import batch_renderer, create_stimulus_set

    synth, lines = _RecordingBatcher(), []
    texts = ["One.", "Two.", "Three."]
    render = batch_renderer(synth, texts, base_seed=5, progress=lines.append)
    stimulus_set = create_stimulus_set("s", texts, ["AR", "exact speculative K=3"], render, root=tmp_path, base_seed=5)
    assert synth.calls == [(texts, "ar", 5), (texts, "speculative", 5)] and synth.closed == 2
    assert [line.split(":")[0] for line in lines] == ["AR on vLLM", "exact speculative K=3 on vLLM"]
    manifest = json.loads((stimulus_set.root / "manifest.json").read_text())
    for index, item in enumerate(manifest["items"]):
        assert item["text"] == texts[index]
        for clip in item["clips"]:
            assert clip["settings"]["engine"] == "vllm" and clip["seed"] == 5 + index
            audio, _ = sf.read(stimulus_set.root / clip["path"])
            assert audio[0] == pytest.approx(0.1 * (index + 1), abs=1e-3)  # text i's clip is the batch's text i


def test_stimuli_on_vllm_render_a_spoken_check_and_the_draft_alone_one_clip_at_a_time_on_our_engine(tmp_path):
    from ssd_demo.listening.stimuli import batch_renderer, create_stimulus_set
    from support.toy_backend import build_toy_synthesizer

    toy = build_toy_synthesizer(max_new_tokens=12)
    synth = _RecordingBatcher()
    synth.backend, synth.target, synth.drafts, synth.draft_name = toy.backend, toy.target, toy.drafts, toy.draft_name
    texts = ["One.", "Two."]
    stimulus_set = create_stimulus_set("s", texts, ["AR", "anchor draft", "attention spoken mos"],
                                       batch_renderer(synth, texts), root=tmp_path)
    assert synth.calls == [(texts, "ar", 0)]  # only the sentences under AR went to the engine, in one batch
    clips = stimulus_set.items[0].clips
    assert clips["AR"].settings["engine"] == "vllm"
    assert "engine" not in clips["anchor draft"].settings and clips["anchor draft"].settings["draft"] == "small"
    spoken = clips["attention spoken mos target=2"].settings  # every target of the check is rendered
    assert "engine" not in spoken["decoding"] and spoken["instruction"].startswith("This is an attention check.")


def test_the_batch_command_skips_comments_and_names_texts_cut_at_the_length_limit(tmp_path):
    from ssd_demo.measure.vllm_batch import limit_note, read_texts, summary

    texts = tmp_path / "texts.txt"
    texts.write_text("Hello there.\n# a comment line\n   \nSecond text.\n", encoding="utf-8")
    assert read_texts(texts) == ["Hello there.", "Second text."]
    render = _render([3, 5], wall=2.0)
    assert limit_note(summary(render)) is None
    render.texts[1].stopped_at_limit = True
    note = limit_note(summary(render))
    assert note.startswith("note: 1 of 2 texts stopped at the length limit") and note.endswith("(texts 2)")
