"""Spoken attention checks ("This is an attention check. For this sample, move the slider to twenty. Again:
twenty."): every target's instruction rendered once by the study's voice, planned into MUSHRA, MOS and A/B blocks
with a target drawn per rater (raters of the same sentence hear different words), a set rendered before that
still served, and screened with a rule per trial kind; the noise check stays available."""

from __future__ import annotations

from pathlib import Path

import json

import pytest

from ssd_demo.errors import InputError
from ssd_demo.listening import attention, study_sessions
from ssd_demo.listening.errors import StudyFileError
from ssd_demo.listening.screening import attention_failed, screen
from ssd_demo.listening.stimuli import tone_renderer
from ssd_demo.listening.study import ATTENTION_SYSTEM, parse_study
from ssd_demo.listening.study_plan import plan_study
from ssd_demo.listening.study_sessions import StudyRegistry
from ssd_demo.listening.study_setup import create_study
from ssd_demo.listening.study_store import ListeningStore, RatingRow
from ssd_demo.speech.system import parse_system

SENTENCES = [f"Sentence number {n}." for n in range(1, 9)]
SPOKEN_STUDY = f"""
name = "spoken"
systems = ["SSD beta=0.3 K=4"]
items_per_rater = 2
sentences = {SENTENCES!r}
[mushra]
[mos]
[ab]
[attention]
kind = "spoken"
per_block = 1
""".replace("'", '"')


@pytest.fixture()
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)  # tone clips: no waiting for plays to count
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    path = tmp_path / "spoken.toml"
    path.write_text(SPOKEN_STUDY, encoding="utf-8")
    data = tmp_path / "data"
    create_study(path, root=data, render=tone_renderer(seconds=0.2))
    return data


def test_the_instruction_names_its_target_in_words():
    assert attention.instruction("mushra", 20) == ("This is an attention check. For this sample, move the slider "
                                                   "to twenty. Again: twenty.")
    assert attention.instruction("mos", 1).endswith("Please give this sample a score of one. Again: one.")
    assert attention.instruction("ab", "B").endswith("Please choose the second sample. Again: the second sample, B.")
    assert 50 not in attention.SPOKEN_TARGETS["mushra"] and 3 not in attention.SPOKEN_TARGETS["mos"]


@pytest.mark.parametrize("kind, label, score, fails", [
    ("mushra", "C", 20, False), ("mushra", "C", 30, False), ("mushra", "C", 10, False), ("mushra", "C", 31, True),
    ("mushra", "C", 9, True), ("mushra", "C", 100, True),
    ("mos", "A", 2, False), ("mos", "A", 3, True), ("mos", "A", 1, True),
])
def test_a_spoken_check_fails_outside_its_tolerance(kind, label, score, fails):
    target = 20 if kind == "mushra" else 2
    assert attention.failed(kind, label, attention.check_system(kind, target), score) is fails


@pytest.mark.parametrize("clip_label, choice, fails", [
    ("A", "A", False),  # the clip says "choose A" and sits at A: choosing it passes
    ("B", "A", False),  # the clip says "choose A" and sits at B: choosing A (the other sample) passes
    ("A", "B", True), ("B", "B", True), ("A", "none", True), ("B", "none", True),
])
def test_an_ab_spoken_check_passes_only_when_the_named_sample_is_chosen(clip_label, choice, fails):
    score = {"none": 0.5}.get(choice, 1.0 if choice == clip_label else 0.0)  # the clip's own A/B rating
    assert attention.failed("ab", clip_label, attention.check_system("ab", "A"), score) is fails


def test_other_samples_of_a_check_trial_give_no_verdict_and_the_noise_check_is_unchanged():
    assert attention.failed("mushra", "A", "AR", 10) is None
    assert attention.failed("mos", "A", attention.check_system("mushra", 20), 2) is None  # kinds must agree
    assert attention.failed("mos", "A", ATTENTION_SYSTEM, 3) is True
    assert attention.failed("mos", "A", ATTENTION_SYSTEM, 2) is False
    assert attention.failed("ab", "B", ATTENTION_SYSTEM, 0.5) is True
    assert attention.parse_check("attention spoken mushra target=20") == ("mushra", 20)
    assert attention.parse_check("attention spoken ab target=B") == ("ab", "B")
    assert attention.parse_check("attention spoken mushra") is None


def test_system_names_for_spoken_checks_and_the_draft_alone_anchor():
    spoken = parse_system("attention spoken mushra")
    assert spoken.mode == "attention" and spoken.derived and spoken.overrides == {"spoken": "mushra"}
    assert parse_system("attention noise").overrides == {}
    alone = parse_system("anchor draft")
    assert alone.mode == "draft" and not alone.derived and alone.draft is None and not alone.speculates
    assert parse_system("anchor draft=distilled").draft == "distilled"
    for bad, message in (("attention spoken abx", "attention spoken KIND"), ("attention shout", "attention noise"),
                         ("anchor draft=", "name the draft"), ("anchor highpass=200", "anchor draft")):
        with pytest.raises(InputError, match=message):
            parse_system(bad)


def test_the_study_file_chooses_the_kind_of_check():
    study = parse_study(SPOKEN_STUDY)
    assert study.attention_kind == "spoken" and study.attention_kinds == ("mushra", "mos", "ab")
    assert study.rendered_systems()[-3:] == ("attention spoken mushra", "attention spoken mos", "attention spoken ab")
    noise = parse_study(SPOKEN_STUDY.replace('kind = "spoken"\n', ""))
    assert noise.attention_kind == "noise" and noise.attention_kinds == ("mos", "ab")
    assert noise.rendered_systems()[-1] == ATTENTION_SYSTEM
    mushra_only = SPOKEN_STUDY.replace("[mos]\n[ab]\n", "")
    assert parse_study(mushra_only).attention_kinds == ("mushra",)  # MUSHRA has spoken checks
    with pytest.raises(StudyFileError, match="noise attention checks are made for"):
        parse_study(mushra_only.replace('kind = "spoken"', 'kind = "noise"'))
    with pytest.raises(StudyFileError, match="attention.kind must be one of"):
        parse_study(SPOKEN_STUDY.replace('kind = "spoken"', 'kind = "loud"'))
    crowded = SPOKEN_STUDY.replace('systems = ["SSD beta=0.3 K=4"]', "systems = [" + ", ".join(
        f'"SSD beta=0.{n} K=4"' for n in range(1, 11)) + "]")
    with pytest.raises(StudyFileError, match="adds its spoken clip"):
        parse_study(crowded)  # 1 + 10 systems + the anchor + the spoken clip: 13 on one screen


def test_creating_the_study_renders_every_targets_instruction_once_with_the_voice_and_records_it(root):
    study, stimulus_set = study_sessions.load_study_and_stimuli("spoken", root)
    first = stimulus_set.items[0]
    for item in stimulus_set.items:
        for kind, targets in attention.SPOKEN_TARGETS.items():
            clips = attention.spoken_clips(item.clips, kind)
            assert sorted(clips, key=str) == sorted(targets, key=str)  # every target, for every sentence
            for target, clip in clips.items():
                assert clip.system == attention.check_system(kind, target)
                assert clip.settings["instruction"] == attention.instruction(kind, target)
                assert clip.settings["target"] == target and clip.seed == study.seed
                assert clip.settings["voice"] == "AR" and clip.settings["decoding"]["renderer"] == "tone"
                assert clip.path == first.clips[clip.system].path  # rendered once: the words do not depend on it
    assert attention.spoken_system("mushra") in stimulus_set.systems  # the set lists the check, not its targets
    assert not any(attention.parse_check(system) for system in stimulus_set.systems)


def test_every_block_gets_its_spoken_check_with_the_target_in_the_stored_system(root):
    study, stimulus_set = study_sessions.load_study_and_stimuli("spoken", root)
    for seed in range(5):
        checks = [t for t in plan_study(study, stimulus_set, seed) if t.attention_check]
        assert [t.kind for t in checks] == ["mushra", "mos", "ab"]
        mushra, mos, ab = checks
        spoken = [c for c in mushra.conditions if attention.parse_check(c.system)]
        assert len(spoken) == 1 and spoken[0].role == "rated"
        assert len(mushra.conditions) == 5  # labelled reference; hidden reference, system, anchor, spoken clip
        item = stimulus_set.item(mushra.item_id)
        assert spoken[0].clip == item.clips[spoken[0].system].path  # the stored system names the clip's target
        [mos_clip] = mos.conditions
        assert mos_clip.clip == stimulus_set.item(mos.item_id).clips[mos_clip.system].path
        assert attention.parse_check(mos_clip.system)[0] == "mos"
        assert sorted(c.system.split()[0] for c in ab.conditions) == ["AR", "attention"]


def test_each_rater_draws_the_targets_so_raters_of_one_sentence_hear_different_words(root):
    study, stimulus_set = study_sessions.load_study_and_stimuli("spoken", root)
    heard: dict[tuple[str, str], set] = {}
    for seed in range(40):  # 40 raters' sessions
        for trial in plan_study(study, stimulus_set, seed):
            for condition in trial.conditions:
                check = attention.parse_check(condition.system)
                if check is not None:
                    heard.setdefault((trial.kind, trial.item_id), set()).add(check[1])
    assert max(len(targets) for targets in heard.values()) > 1  # one sentence, several raters, several targets
    for kind, targets in attention.SPOKEN_TARGETS.items():  # every target is drawn: none can be learned
        assert set().union(*(t for (k, _), t in heard.items() if k == kind)) == set(targets)
    assert plan_study(study, stimulus_set, 7) == plan_study(study, stimulus_set, 7)  # the draw is the session's seed


def test_a_set_rendered_before_targets_were_drawn_per_rater_is_served_with_its_sentences_target(root):
    """Such a set holds one clip per sentence and kind, `attention spoken KIND`, with the target in its manifest
    entry; it is planned as before, with that target."""
    study, stimulus_set = study_sessions.load_study_and_stimuli("spoken", root)
    manifest_path = stimulus_set.root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    chosen = {"mushra": 30, "mos": 4, "ab": "B"}
    for item in manifest["items"]:
        kept = []
        for clip in item["clips"]:
            check = attention.parse_check(clip["system"])
            if check is None:
                kept.append(clip)
            elif check[1] == chosen[check[0]]:  # the one clip the sentence had, under the check's own name
                kept.append({**clip, "system": attention.spoken_system(check[0])})
        item["clips"] = kept
    manifest_path.write_text(json.dumps(manifest))
    old = study_sessions.load_stimulus_set(stimulus_set.root)
    assert all(attention.spoken_system(k) in item.clips for item in old.items for k in chosen)
    for seed in range(5):
        checks = [c for t in plan_study(study, old, seed) for c in t.conditions if attention.parse_check(c.system)]
        assert sorted(c.system for c in checks) == sorted(attention.check_system(k, t) for k, t in chosen.items())


def take_session(registry: StudyRegistry, rater: str, attentive: bool) -> str:
    """A whole session answered through the session API; the checks as the instruction says, or 50 points off the
    MUSHRA target, a MOS score of 3 and no preference."""
    runner = registry.runner("spoken")
    session = runner.start_session(rater, seed=len(rater))
    view = runner.next_view(session.session_id)
    while view is not None:
        for condition in view.conditions:
            if condition.must_play:
                runner.fetch_clip(session.session_id, view.trial_id, condition.label)
                runner.record_play(session.session_id, view.trial_id, condition.label)
        trial = registry.store.get_study_trial(session.session_id, view.trial_id)
        spoken = {c.label: attention.parse_check(c.system) for c in trial.conditions if attention.parse_check(c.system)}
        if view.kind == "mushra":
            scores = {c.label: 100 for c in view.conditions if c.rated}  # nothing for the reference rules to flag
            scores.update({label: check[1] if attentive else (check[1] + 50) % 100 for label, check in spoken.items()})
            answer = {"scores": scores}
        elif view.kind == "mos":
            answer = {"score": next(iter(spoken.values()))[1] if spoken and attentive else 3}
        else:
            answer = {"choice": next(iter(spoken.values()))[1] if spoken and attentive else "none"}
        view = runner.submit(session.session_id, view.trial_id, answer)
    return session.session_id


def test_the_server_screens_out_a_rater_who_does_not_follow_the_spoken_instruction(root):
    with ListeningStore(root / "listening.sqlite3") as store:
        registry = StudyRegistry(store, root)
        take_session(registry, "follows", attentive=True)
        take_session(registry, "ignores", attentive=False)
        study = registry.runner("spoken").study
        rows = store.study_ratings("spoken")
    verdicts = [(row.rater, row.kind, attention_failed(row)) for row in rows if attention_failed(row) is not None]
    assert sorted((rater, kind) for rater, kind, _ in verdicts) == sorted(
        (rater, kind) for rater in ("follows", "ignores") for kind in ("mushra", "mos", "ab"))
    assert all(failed is (rater == "ignores") for rater, _, failed in verdicts)
    exclusions = screen(rows, study)
    assert [(e.rater, e.rule) for e in exclusions] == [("ignores", "attention")]
    assert exclusions[0].detail == "failed 3 of 3 attention checks (spoken; at most 0 allowed)"


def test_mushra_items_for_the_reference_rules_leave_the_check_trials_out():
    study = parse_study(SPOKEN_STUDY)
    row = lambda trial, system, score, check: RatingRow(  # noqa: E731
        "spoken", "s1", "r", trial, "mushra", "s001", check, "A", system, None, score, 1, 5.0, "2026-12-04T00:00:00Z")
    # The rater's only real item is fine; the check trial's hidden reference at 20 must not count as an item.
    rows = [row(0, "AR", 100, False), row(0, "SSD beta=0.3 K=4", 70, False),
            row(1, "AR", 20, True), row(1, attention.check_system("mushra", 20), 20, True)]
    assert screen(rows, study) == []
