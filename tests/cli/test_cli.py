"""The command line: synth writes a WAV, compare runs the app's pipeline, bench runs on local models, bad input exits 2 with a message."""

from support.paths import REPOSITORY

import json
from pathlib import Path

import pytest
import soundfile as sf
import torch

from ssd_demo.__main__ import main
from ssd_demo.backends.embedded import DEFAULT_PATH
from ssd_demo.measure import teacher_reference
from support.tiny_models import tiny_llama

needs_voice = pytest.mark.skipif(not (DEFAULT_PATH / "voice.json").exists(), reason="embedded voice not shipped")
VOICE_RATE = 22_050  # the shipped voice speaks at its teacher's rate (Piper en_US-joe-medium)


@needs_voice
def test_synth_writes_int16_wav(tmp_path, capsys):
    out = tmp_path / "hello.wav"
    code = main(["synth", "Good morning to you.", "--out", str(out), "--mode", "speculative",
                 "--draft-len", "3", "--beta", "0.2", "--seed", "5", "--threads", "1"])
    assert code == 0
    info = sf.info(str(out))
    assert info.subtype == "PCM_16" and info.samplerate == VOICE_RATE and 0.3 < info.duration < 8
    printed = capsys.readouterr()
    assert "acceptance" in printed.out
    # what ran the LM, in one short line; the timings behind the choice only with --verbose
    assert "LM on " in printed.err and printed.err.rstrip().endswith("(--verbose says why)")


@needs_voice
def test_synth_verbose_says_why_and_names_a_folder_it_made(tmp_path, capsys):
    out = tmp_path / "new" / "folder" / "hi.wav"
    assert main(["synth", "Hi!", "--out", str(out), "--threads", "1", "--verbose"]) == 0
    err = capsys.readouterr().err
    assert f"made the folder {out.parent}" in err and "torch thread(s)" in err and "--verbose says why" not in err
    assert sf.info(str(out)).duration > 0.1


@needs_voice
def test_synth_reads_a_paragraph_from_a_file_in_chunks(tmp_path, capsys):
    text = tmp_path / "story.txt"
    text.write_text("The first sentence is short. The second one, which is a little longer, follows it!\n",
                    encoding="utf-8")
    out = tmp_path / "story.wav"
    assert main(["synth", "--text-file", str(text), "--out", str(out), "--mode", "ar", "--threads", "1"]) == 0
    assert "in 2 chunks" in capsys.readouterr().out
    assert sf.info(str(out)).duration > 2


@pytest.mark.parametrize("argv, message", [
    (["synth", "Hello.", "--voice-prompt", "x.wav"], "go together"),
    (["synth"], "one of them"),
    (["synth", "Hello.", "--text-file", "story.txt"], "one of them"),
    (["synth", "--text-file", "/no/such/file.txt"], "does not exist"),
    (["synth", "\u4f60\u597d"], "latin letters"),
    (["synth", "Hello.", "--target-model", "some/model"], "both --target-model and --draft-model"),
    (["synth", "   "], "empty"),
    (["synth", "Hello.", "--beta", "-1"], "beta"),
    (["synth", "Hello.", "--preset", "nope"], "unknown preset"),
    (["synth", "Hello.", "--beta", "5"], "beta must be between 0 and 1"),
    (["synth", "--text-file", "/"], "is a folder"),
    (["synth", "Hello.", "--out", "/tmp"], "is a folder"),
    (["synth", "Hello.", "--out", "hello.mp3"], "ending in .wav"),
    (["synth", "Hello.", "--out", "/proc/no-such-dir/x.wav"], "cannot be written"),
    (["synth", "Hello.", "--out", "/dev/null/x.wav"], "is a file, not a folder"),
    (["synth", "Hello.", "--voice", "/no/such/voice"], "--voice /no/such/voice does not exist"),
    (["synth", "Hello.", "--voice", "/dev/null"], "is a file"),
    # checked before the model loads: a cache for 10^11 tokens, or 10^5 threads, would fail with a traceback
    (["synth", "Hello.", "--max-new-tokens", "99999999999"], "from 1 to 100,000"),
    (["synth", "Hello.", "--threads", "100000"], "this machine's cpus"),
    (["synth", "Hello.", "--preset", "embedded", "--text-normalizer", "official"], "is cosyvoice 2's"),
])
def test_bad_input_exits_2_with_a_message(argv, message, capsys):
    if "--preset" not in argv and not (DEFAULT_PATH / "voice.json").exists():
        pytest.skip("embedded voice not shipped")
    assert main(argv + ([] if "--out" in argv else ["--out", "/dev/null"])) == 2
    assert message in capsys.readouterr().err.lower()


@pytest.mark.parametrize("argv, message", [
    (["compare", "Hello.", "--beta", "5"], "beta must be between 0 and 1"),
    (["compare", "Hello.", "--preset", "nope"], "unknown preset"),
    (["compare", "Hello.", "--draft", "nope"], "has the drafts"),
    (["compare", "Hello.", "--out-dir", "/dev/null"], "is a file"),
    (["compare", "Hello.", "--threads", "100000"], "this machine's cpus"),
])
def test_compare_refuses_bad_input_before_loading(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err.lower()


@needs_voice
@pytest.mark.slow
def test_compare_runs_the_apps_pipeline_and_writes_both_wavs(tmp_path, capsys):
    report = tmp_path / "compare.json"
    code = main(["compare", "The cat sat on the mat.", "--out-dir", str(tmp_path / "out"), "--seed", "3",
                 "--draft-len", "3", "--threads", "1", "--json", str(report)])
    assert code == 0
    for name in ("ar.wav", "speculative.wav"):
        info = sf.info(str(tmp_path / "out" / name))
        assert info.subtype == "PCM_16" and info.samplerate == VOICE_RATE and 0.3 < info.duration < 8
    captured = capsys.readouterr()
    assert "measured" in captured.out and "predicted" in captured.out and "acceptance" in captured.out
    assert "Autoregressive decoding" in captured.err  # the pipeline's progress lines
    numbers = json.loads(report.read_text())
    assert numbers["seed"] == 3 and numbers["config"]["draft_len"] == 3
    assert numbers["speedup"]["measured"] > 0 and numbers["calibration"] is not None
    assert numbers["speculative"]["tokens"] > 0 and numbers["speculative"]["acceptance_rate"] > 0


def test_a_text_file_that_is_not_utf8_is_named_in_the_error(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"\xff caf\xe9")
    assert main(["synth", "--text-file", str(bad), "--out", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "latin1.txt is not UTF-8 text" in err and "Traceback" not in err


def _saved_pair(folder: Path) -> tuple[Path, Path]:
    """A tiny target (2 x 32) and draft (1 x 32) over 64 ids, saved as model directories."""
    target_dir, draft_dir = folder / "target", folder / "draft"
    tiny_llama(seed=1, vocab=64, layers=2, width=32, init=0.2).save_pretrained(target_dir)
    tiny_llama(seed=2, vocab=64, layers=1, width=32, init=0.2).save_pretrained(draft_dir)
    return target_dir, draft_dir


def test_bench_on_local_models(tmp_path, capsys):
    target_dir, draft_dir = _saved_pair(tmp_path)
    out = tmp_path / "bench.json"
    code = main(["bench", "--target", str(target_dir), "--draft", str(draft_dir), "--repeats", "2", "--warmup", "1",
                 "--max-new-tokens", "12", "--prompt-len", "4", "--threads", "1", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    methods = {m["method"]: m for m in result["methods"]}
    assert set(methods) == {"ar", "speculative", "speculative_calibrated", "hf_assisted", "hf_assisted_default",
                            "hf_generate", "ar_transformers", "speculative_transformers"}
    costs = result["calibration"]["verify_costs"]
    assert len(costs) == 16 + 1 and costs == sorted(costs) and costs[0] == 1.0  # K up to 16, never cheaper with more
    assert all(m["median_tokens"] == 12 for m in methods.values())
    assert methods["ar"]["speedup_vs_ar"] == 1.0
    assert 0 <= result["speculative"]["alpha"] <= 1 and result["speculative"]["predicted_speedup_strict"] > 0
    assert result["speculative_vs_hf_assisted"] > 0 and result["speculative_transformers_vs_hf_assisted"] > 0
    stream = result["weight_stream"]  # the floor each target call is set against, with the CPU's name
    assert stream["seconds"] > 0 and stream["bytes"] == 4 * sum(p.numel() for p in tiny_llama(
        seed=1, vocab=64, layers=2, width=32).parameters()) and stream["cpu"]
    for name, method in methods.items():
        ours = not name.startswith("hf_")
        assert (method["median_target_call_seconds"] is not None) == ours
        if ours:
            assert method["target_call_vs_weight_stream"] == pytest.approx(
                method["median_target_call_seconds"] / stream["seconds"])
    out = capsys.readouterr().out
    assert "speculative vs hf_assisted" in out and "x weight stream" in out and "stream once in" in out
    # what served each model's forward, the draft's too (a small draft may run on another forward than its target)
    assert f"target forward: {result['machine']['kernels']}" in out and result["machine"]["kernels"]
    assert f"draft forward: {result['machine']['draft_kernels']}" in out and result["machine"]["draft_kernels"]


def test_bench_loads_the_pair_in_the_dtype_asked_and_streams_that_many_bytes(tmp_path, capsys):
    target_dir, draft_dir = _saved_pair(tmp_path)
    out = tmp_path / "bench.json"
    code = main(["bench", "--target", str(target_dir), "--draft", str(draft_dir), "--repeats", "1", "--warmup", "0",
                 "--max-new-tokens", "8", "--prompt-len", "4", "--methods", "ar,speculative", "--dtype", "bfloat16",
                 "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    parameters = sum(p.numel() for p in tiny_llama(seed=1, vocab=64, layers=2, width=32).parameters())
    assert result["machine"]["dtype"] == result["weight_stream"]["dtype"] == "bfloat16"
    assert result["weight_stream"]["bytes"] == 2 * parameters
    assert "(bfloat16) stream once in" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--dtype", "float8"])
    assert exited.value.code == 2 and "invalid choice: 'float8'" in capsys.readouterr().err


@needs_voice
def _latent_voice() -> bool:
    """Whether the shipped voice is on the teacher's latent codec (only then is there a codec round trip row)."""
    from ssd_demo.backends.embedded import DEFAULT_PATH

    return "phonemes" in json.loads((DEFAULT_PATH / "voice.json").read_text())


@pytest.mark.slow
def test_eval_scores_visitor_texts_by_length_and_writes_its_section(tmp_path):
    docs, out = tmp_path / "benchmarks.md", tmp_path / "eval"
    assert main(["eval", "--per-bucket", "1", "--buckets", "3-8 words,9-15 words", "--betas", "0",
                 "--drafts", "distilled", "--repeats", "2", "--draft-len", "6", "--adaptive-draft-len", "--threads", "1",
                 "--out", str(out), "--docs", str(docs)]) == 0
    report = json.loads((out / "eval.json").read_text())
    rows = {row["system"]: row for row in report["systems"]}
    references = ({"teacher (Piper en_US-joe-medium)"} | ({"codec round trip of the teacher"} if _latent_voice() else set())
                  if teacher_reference.available() else set())
    assert set(rows) == references | {"AR", "SSD distilled beta=0"}
    assert report["buckets"] == ["3-8 words", "9-15 words"]
    assert set(rows["AR"]["wer_by_bucket"]) == set(rows["AR"]["dnsmos_ovrl_by_bucket"]) == {"3-8 words", "9-15 words"}
    if references:  # Whisper tiny.en hears the teacher, and the codec round trip keeps most of it
        assert rows["teacher (Piper en_US-joe-medium)"]["wer"] <= 0.1
        if _latent_voice():  # the round trip exists for a voice on the teacher's latent codec
            assert rows["codec round trip of the teacher"]["dnsmos_ovrl"] > 2.5
    assert 0 <= rows["AR"]["wer"] < 1.5 and 1 <= rows["AR"]["dnsmos_ovrl"] <= 5
    assert rows["AR"]["lm_speedup"] == 1.0 and rows["SSD distilled beta=0"]["lm_speedup"] > 0
    assert len(rows["SSD distilled beta=0"]["wer_vs_ar"]) == 3
    assert 0 < rows["SSD distilled beta=0"]["acceptance"] <= 1 and report["repeats"] == 2
    spec = rows["SSD distilled beta=0"]  # the strict prediction from its own alpha, K and measured costs
    assert spec["predicted_strict"] is None  # adaptive K: no single K for the formula
    assert spec["cost_ratio"] > 0 and spec["verify_ratio"] > 0
    assert "predicted_strict" not in rows["AR"]
    assert report["config"]["adaptive_draft_len"] and report["config"]["draft_len"] == 6
    text = docs.read_text()
    assert "By length" in text and "| WER % |" in text and "| DNSMOS OVRL |" in text and "--repeats 2" in text and "| predicted (strict) |" in text
    fixed = main(["eval", "--per-bucket", "2", "--buckets", "3-8 words", "--betas", "0", "--drafts", "heads",
                  "--threads", "1", "--out", str(out), "--docs", ""])
    heads = {row["system"]: row for row in json.loads((out / "eval.json").read_text())["systems"]}["SSD heads beta=0"]
    assert fixed == 0 and heads["predicted_strict"] > 0
    assert "--draft-len 6 --repeats 2 --threads 1 --adaptive-draft-len" in text and "K chosen each round in 0..6" in text
    assert main(["eval", "--buckets", "huge", "--docs", ""]) == 2


@needs_voice
@pytest.mark.slow
def test_sweep_runs_a_chosen_subset_of_rules(tmp_path, capsys, monkeypatch):
    out = tmp_path / "sweep"
    monkeypatch.chdir(tmp_path)  # where a default docs path would land
    assert main(["sweep", "--sentences", "1", "--rules", "exact-adaptive", "--threads", "1", "--out", str(out)]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sweep"]  # no --docs: no docs written
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert [p["rule"] for p in points] == ["exact-adaptive"] and points[0]["lm_speedup"] > 0
    # several drafts on one map: every setting runs with each, labelled by its draft
    assert main(["sweep", "--sentences", "1", "--rules", "exact-adaptive", "--draft", "distilled,heads", "--threads", "1",
                 "--out", str(out), "--docs", ""]) == 0
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert [(p["draft"], p["label"]) for p in points] == [("distilled", "distilled: exact adaptive K<=8"),
                                                          ("heads", "heads: exact adaptive K<=8")]
    assert main(["sweep", "--sentences", "1", "--draft", "distilled,nope", "--docs", ""]) == 2
    assert main(["sweep", "--sentences", "1", "--rules", "magic", "--docs", ""]) == 2
    assert "unknown rule" in capsys.readouterr().err


@needs_voice
@pytest.mark.slow
def test_clicks_times_the_app_handler_and_writes_its_section(tmp_path, capsys):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## App: one click on the embedded voice\nold numbers\n")
    clicks = _script_function("click_timing", "cli")  # a developer script, loaded from its file

    assert clicks(["--clicks", "2", "--docs", str(docs)]) == 0
    text = docs.read_text()
    assert "old numbers" not in text and "| first click" in text and "| LM speedup shown on the page |" in text
    assert clicks(["--clicks", "1", "--docs", ""]) == 2  # the first click alone says nothing
    assert "at least 2" in capsys.readouterr().err


def test_bench_answers_a_pair_it_cannot_run_in_one_line(tmp_path, capsys):
    target_dir, draft_dir, empty = tmp_path / "target", tmp_path / "draft", tmp_path / "empty"
    tiny_llama(seed=1, vocab=64, layers=1, width=16).save_pretrained(target_dir)
    tiny_llama(seed=2, vocab=80, layers=1, width=16).save_pretrained(draft_dir)
    empty.mkdir()
    cases = {
        ("--target", str(target_dir), "--draft", str(draft_dir)): "must share a vocabulary; their output layers have 64 and 80",
        ("--target", str(empty), "--draft", str(draft_dir)): "holds no causal LM transformers can load",
        ("--device", "gpu"): "unknown device 'gpu'",
        ("--repeats", "0"): "--repeats >= 1",
        ("--threads", "-1"): "--threads must be between 1 and",  # torch's own refusal was an internal error
    }
    if not torch.cuda.is_available():
        cases[("--device", "cuda")] = "no CUDA device here"
    for argv, message in cases.items():
        assert main(["bench", *argv, "--methods", "ar"]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and "a bug" not in err, (argv, err)


@pytest.mark.slow
def test_the_gpu_step_script_runs_end_to_end_on_tiny_shapes(tmp_path, capsys):
    """The prepared GPU script, smoke-tested on the CPU so that it works the day a GPU is at hand."""
    script = _script_globals("cuda_step_bench")

    def run(argv: list[str]) -> int:
        return script["run_cli"]("cuda_step_bench", script["__doc__"], script["add_arguments"], script["main"], argv)

    out = tmp_path / "gpu.json"
    assert run(["--device", "cpu", "--dtype", "float32", "--pairs", "tiny:tiny/1", "--tokens", "8", "--repeats", "1",
                "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["pair"] == "tiny:tiny/1" and row["bound_seconds"] > 0 and row["c"] > 0 and row["v"] > 0
    assert row["logit_differences"]["vs eager"] == 0 and row["logit_differences"]["vs transformers"] < 1e-4
    assert set(row["tokens_per_second"]) >= {"ar", "speculative", "hf_assisted", "hf_generate", "ar (no graphs)"}
    assert "target step vs bound" in capsys.readouterr().out
    for pairs in ("9B:1B", "tiny", "tiny:tiny/0", "tiny:tiny/x"):
        assert run(["--device", "cpu", "--pairs", pairs]) == 2
        assert "--pairs takes target:draft pairs" in capsys.readouterr().err
    saved = json.loads(out.read_text())
    assert saved["settings"]["tokens"] == 8 and saved["cpu"] and "targets" in saved


def _script_globals(script: str) -> dict:
    """A developer script's globals, run from its file (scripts/ is a folder of programs, imported by nothing)."""
    import runpy

    return runpy.run_path(str(REPOSITORY / "scripts" / f"{script}.py"), run_name=script)


def _script_function(script: str, name: str):
    """A function of a developer script (see `_script_globals`)."""
    return _script_globals(script)[name]


@pytest.mark.parametrize("command", ["eval", "sweep", "scripts.click_timing"])
def test_commands_rewrite_docs_only_when_asked(command):
    # A run on another machine or with other settings must not replace the recorded numbers by accident.
    import argparse
    import importlib

    from ssd_demo.__main__ import SUBCOMMANDS
    from ssd_demo.measure.reporting import docs_target

    parser = argparse.ArgumentParser()
    if command in SUBCOMMANDS:
        importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(parser)
    else:  # a developer script, loaded from its file (nothing imports scripts/)
        _script_function(command.split(".")[1], "add_arguments")(parser)
    assert docs_target(parser.parse_args([])) is None
    assert docs_target(parser.parse_args(["--docs", "docs/benchmarks.md"])) == Path("docs/benchmarks.md")


def test_help_and_unknown_command(capsys):
    assert main([]) == 0
    assert main(["frobnicate"]) == 2
    shown = capsys.readouterr()
    assert "synth" in shown.out and "unknown command 'frobnicate'; the commands are synth, bench" in shown.err


@pytest.mark.slow
def test_top_level_help_and_the_package_import_leave_torch_unloaded():
    # `python -m ssd_demo --help` should answer at once: the package's public names load on first use.
    import subprocess
    import sys

    code = ("import sys, ssd_demo\n"
            "from ssd_demo.__main__ import main\n"
            "main(['--help'])\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import at start'\n"
            "missing = [n for n in ssd_demo.__all__ if getattr(ssd_demo, n, None) is None]\n"
            "assert not missing, missing\n"
            "assert ssd_demo.DecodingConfig.__module__ == 'ssd_demo.config'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "synth" in done.stdout


def test_bench_summary_names_no_comparison_with_a_method_that_did_not_run():
    from ssd_demo.measure.bench import markdown_table

    spec = {"alpha": 0.8, "cost_ratio": 0.08, "verify_ratio": 1.2, "measured_decode_speedup": 2.0,
            "predicted_speedup_strict": 2.1, "predicted_speedup_classic": 2.5, "fraction_of_strict_prediction": 0.95}
    row = {"method": "ar", "median_seconds": 1.0, "median_tokens": 128, "median_tokens_per_second": 128.0,
           "speedup_vs_ar": 1.0}
    text = markdown_table({"methods": [row], "speculative": spec})
    assert "nan" not in text and "speculative: alpha 0.800" in text
    assert "speculative vs hf_assisted: 1.30x; alpha" in markdown_table(
        {"methods": [row], "speculative": spec, "speculative_vs_hf_assisted": 1.3})


def test_a_voice_folder_without_a_voice_says_what_a_voice_folder_holds(tmp_path, capsys):
    assert main(["synth", "Hello.", "--voice", str(tmp_path), "--out", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "not an embedded voice folder" in err and "voice.json, target, codec" in err and "Traceback" not in err


def test_synth_on_a_gpu_the_machine_lacks_says_so(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["synth", "Hello.", "--device", "cuda", "--out", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "no usable CUDA GPU" in err and "Traceback" not in err
