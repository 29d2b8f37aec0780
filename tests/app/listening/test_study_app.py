"""The study server's logic without a browser: which studies are served, the rater page's operations
(start, plays, answers, resume by signed token, completion), the experimenter's operations behind the
results token, and the page's layout (a rater page with nothing but the player)."""

from __future__ import annotations

from support.paths import REPOSITORY

import base64
import io
import json
import re

import numpy as np
import pytest

from ssd_demo.app.listening.service import EXPERIMENTER_OFF
from ssd_demo.app.listening.study_experimenter import StudyExperimenter
from ssd_demo.app.listening.study_service import StudyService, StudySettings, served_studies
from ssd_demo.listening import study_sessions
from ssd_demo.listening.errors import ListeningError, UnknownSessionError
from ssd_demo.listening.study_results import read_long_csv, read_summary_json, results_from_long, summary
from ssd_demo.listening.study_sessions import load_study_and_stimuli
from ssd_demo.listening.stimuli import tone_renderer
from ssd_demo.listening.study_setup import create_study

REVEALING = re.compile(r"\bAR\b|SSD|beta|exact|speculative|anchor|lowpass|attention", re.IGNORECASE)
STUDY = """
name = "{name}"
systems = ["SSD beta=0.3 K=4", "exact speculative K=4"]
items_per_rater = 1
sentences = ["One sentence.", "Two sentences here."]
[mushra]
[abx]
pairs = [["SSD beta=0.3 K=4", "exact speculative K=4"]]
[ab]
[mos]
systems = ["AR"]
"""


@pytest.fixture()
def root(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)  # tone clips: plays count at once
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    monkeypatch.delenv("SSD_DEMO_RESULTS_TOKEN", raising=False)
    for name in ("first", "second"):
        path = tmp_path / f"{name}.toml"
        path.write_text(STUDY.format(name=name), encoding="utf-8")
        create_study(path, root=tmp_path / "data", render=tone_renderer(seconds=0.2))
    return tmp_path / "data"


@pytest.fixture()
def service(root):
    service = StudyService(StudySettings.from_env(["first", "second"], root))
    yield service
    service.close()


def answer_for(view: dict) -> dict:
    if view["kind"] == "mushra":
        return {"scores": {c["label"]: 100 for c in view["conditions"] if c["rated"]}}
    return {"score": 4} if view["kind"] == "mos" else {"choice": "A"}


def fetch(service: StudyService, view: dict, label: str) -> bytes:
    """The condition's audio as the page gets it (the server records the fetch)."""
    clip = service.clip(view["session"], view["trial"], label)
    assert clip["label"] == label, clip
    return base64.b64decode(clip["wav"])


def finish(service: StudyService, view: dict) -> dict:
    while view["state"] == "trial":
        for condition in view["conditions"]:
            if condition["must_play"]:
                fetch(service, view, condition["label"])
                assert "played" in service.played(view["session"], view["trial"], condition["label"])
        view = service.submit(view["session"], view["trial"], answer_for(view))
    return view


def test_served_studies_from_flags_or_environment():
    assert served_studies(["--study", "a", "--study=b", "--other"], {}) == ("a", "b")
    assert served_studies([], {"SSD_DEMO_STUDY": " a, b ,a"}) == ("a", "b")
    assert served_studies([], {}) == ()
    with pytest.raises(ValueError, match="not a study name"):
        served_studies(["--study", "../etc"], {})


def test_a_rater_takes_a_study_by_name_blind_and_resumes(service):
    assert service.open("", "")["state"] == "closed"  # two studies served: the link must name one
    assert service.open("third", "")["state"] == "closed"
    assert service.open("second", "")["state"] == "start"
    view = service.start("second", "rater-1")
    assert view["state"] == "trial" and view["study"] == "second" and view["number"] == 1
    assert not REVEALING.search(repr(view))
    assert [c["label"] for c in view["conditions"]][0] == "Reference" and view["kind"] == "mushra"

    # Unheard samples are refused with a message, not an exception; so is a missing score.
    refused = service.submit(view["session"], view["trial"], answer_for(view))
    assert "to the end" in refused["refused"]
    for condition in view["conditions"][1:]:
        fetch(service, view, condition["label"])
        service.played(view["session"], view["trial"], condition["label"])
    assert "refused" in service.submit(view["session"], view["trial"], {"scores": {"A": 50}})
    assert "refused" in service.played(view["session"], view["trial"], "Z")

    # A reload: the signed token resumes the same trial with its samples heard; a forged one does not.
    resumed = service.open("second", view["token"])
    assert resumed["trial"] == view["trial"] and set(resumed["played"]) >= {"A", "B"}
    assert service.open("second", view["session"] + ".0000")["state"] == "start"
    assert service.open("first", view["token"])["state"] == "start"  # a session of another study

    done = finish(service, resumed)
    assert done["state"] == "done" and re.fullmatch(r"[0-9A-F]{10}", done["code"])
    assert service.open("second", view["token"]) == done  # a reload shows the code again
    assert service.start("second", "=cmd")["refused"]  # a rater id a spreadsheet would run is refused


def test_a_play_counts_only_for_a_clip_the_page_fetched_from_the_server(service):
    view = service.start("first", "fetching-rater")
    label = next(c["label"] for c in view["conditions"] if c["must_play"])
    refused = service.played(view["session"], view["trial"], label)  # a script that never downloaded it
    assert "never loaded" in refused["refused"], refused
    assert service.store.study_plays(view["session"]) == []
    wav = fetch(service, view, label)
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
    assert [(t, lab) for t, lab, _ in service.store.clip_fetches(view["session"])] == [(view["trial"], label)]
    assert service.played(view["session"], view["trial"], label) == {"played": [label]}
    for bad in ((view["session"], view["trial"], "Z"), (view["session"], "f" * 32, label),
                ("0" * 32, view["trial"], label)):
        assert "refused" in service.clip(*bad)
    assert len(service.store.clip_fetches(view["session"])) == 1  # a refused fetch records nothing


def test_experimenter_view_is_off_without_a_token(service, monkeypatch):
    admin = StudyExperimenter(service.store, service.settings.data_dir)
    with pytest.raises(ListeningError, match=re.escape(EXPERIMENTER_OFF[:40])):
        admin.studies("")
    with pytest.raises(ListeningError, match="off"):
        admin.export("anything", "first")
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "right")
    for call in (lambda: admin.progress("wrong", "first"), lambda: admin.invalidate("", "first", "x", "y")):
        with pytest.raises(ListeningError, match="token"):
            call()


def test_experimenter_sees_progress_results_exports_and_invalidates(service, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "right")
    admin = StudyExperimenter(service.store, service.settings.data_dir)
    assert admin.studies("right") == ["first", "second"]
    finished = finish(service, service.start("first", "rater-1"))
    running = service.start("first", None)
    rows = admin.progress("right", "first")
    anonymous = "session:" + running["session"][:12]  # as the results name a rater without an id
    assert [(r[0], r[3], r[4], r[6]) for r in rows] == [("rater-1", 5, 5, "yes"), (anonymous, 0, 5, "")]

    results, report = admin.results("right", "first")
    assert "MUSHRA" in report.text and "rater-1" in report.text and report.summary["study"] == "first"
    assert report.figure.axes  # the box plot
    csv_path, json_path = admin.export("right", "first")
    assert read_long_csv(csv_path) == list(results.rows) and len(results.rows) > 0
    assert read_summary_json(json_path)["study"] == "first"
    assert oct(csv_path.stat().st_mode & 0o777) == "0o600"

    other = finish(service, service.start("second", "rater-2"))
    with pytest.raises(ListeningError, match="belongs to study 'second'"):  # not a session of the chosen study
        admin.invalidate("right", "first", other["session"], "wrong study")
    assert service.store.invalidations() == {}
    message = admin.invalidate("right", "first", finished["session"], "answered in 20 seconds")
    assert "invalidated" in message
    assert admin.progress("right", "first")[0][7] == "answered in 20 seconds"
    results, _ = admin.results("right", "first")
    assert [(e.rater, e.rule) for e in results.exclusions] == [("rater-1", "invalidated")]
    with pytest.raises(ListeningError, match="No session no-such-ses.*progress table") as refused:
        admin.invalidate("right", "first", "no-such-session", "reason")
    assert not isinstance(refused.value, UnknownSessionError) and "start a new" not in str(refused.value)
    assert "counts again" in admin.restore("right", "first", finished["session"])  # the undo
    assert admin.results("right", "first")[0].exclusions == () and service.store.invalidations() == {}
    with pytest.raises(ListeningError, match="not invalidated"):
        admin.restore("right", "first", finished["session"])
    with pytest.raises(ListeningError, match="No study"):
        admin.results("right", "third")
    assert running["state"] == "trial"


def test_reanalysis_of_the_exported_csv_equals_the_served_summary_with_an_invalidated_rater(service, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "right")
    admin = StudyExperimenter(service.store, service.settings.data_dir)
    sessions = [finish(service, service.start("first", f"rater-{n}"))["session"] for n in range(1, 4)]
    admin.invalidate("right", "first", sessions[1], "answered in 20 seconds")
    csv_path, json_path = admin.export("right", "first")
    served = read_summary_json(json_path)
    assert [(e["rater"], e["rule"]) for e in served["exclusions"]] == [("rater-2", "invalidated")]
    assert served["results"]["raters"] == 2 and served["results_all_raters"]["raters"] == 3

    study, stimuli = load_study_and_stimuli("first", service.settings.data_dir, verify=False)
    again = results_from_long(read_long_csv(csv_path), study, stimuli.manifest_sha256)
    assert json.loads(json.dumps(summary(again))) == served


def test_rater_page_holds_the_player_only_and_admin_is_another_page(root, monkeypatch):
    gr = pytest.importorskip("gradio")
    from ssd_demo.app.listening.service import close_listening_apps
    from ssd_demo.app.listening.study_page import ADMIN_PATH, build_study_demo

    demo = build_study_demo(["first"], root)
    try:
        config = demo.get_config_file()
        on_rater_page = set(config["page"][""]["components"])
        types = {c["type"] for c in config["components"] if c["id"] in on_rater_page}
        assert types == {"navbar", "html", "api"}, types  # no tab, results, file, button or audio player
        assert (ADMIN_PATH, "Experimenter", False) in demo.pages
        names = {d.get("api_name") for d in config["dependencies"]}
        assert {"study_start", "study_clip", "study_played", "study_submit", "study_resume",
                "study_admin_results"} <= names
        # Picking a study in the dropdown refreshes the header, progress and results at once (no stale study).
        ids = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
        on_pick = [d for d in config["dependencies"] if [ids["study-admin-study"], "input"] in
                   [list(t) for t in d["targets"]]]
        assert len(on_pick) == 1
        assert {ids[k] for k in ("study-admin-status", "study-admin-progress", "study-admin-results",
                                 "study-admin-files")} <= set(on_pick[0]["outputs"])
        assert isinstance(demo, gr.Blocks)
    finally:
        close_listening_apps()


def test_no_two_conditions_share_bytes_or_metadata(service):
    import hashlib

    import soundfile

    seen: set[str] = set()
    view = service.start("first", "blind-rater")
    while view["state"] == "trial":
        clips = {c["label"]: c for c in view["conditions"]}
        assert all(set(c) == {"label", "rated", "must_play"} for c in clips.values())  # no URL, no duration
        data = {label: fetch(service, view, label) for label in clips}
        hashes = {hashlib.sha256(d).hexdigest() for d in data.values()}
        assert len(hashes) == len(data) and not seen & hashes  # nor is a copy served again in another trial
        seen |= hashes
        assert len({len(d) for d in data.values()}) == len(data)  # not even the file sizes match
        samples = {label: soundfile.read(io.BytesIO(d), dtype="int16")[0] for label, d in data.items()}
        # Not even the audio data of two copies of one clip match: each carries its own 1-LSB dither.
        assert len({s.tobytes() for s in samples.values()}) == len(samples)
        if view["kind"] == "abx":  # X is a copy of A or B: the same samples to within the dither
            x = samples["X"].astype(int)
            twins = [label for label in "AB" if len(samples[label]) == len(x)
                     and np.abs(samples[label].astype(int) - x).max() <= 2]
            assert len(twins) >= 1 and data["X"] != data[twins[0]]
        if view["kind"] == "mushra":  # the hidden and the labelled reference: likewise
            reference = [label for label in samples if label != "Reference" and len(samples[label]) ==
                         len(samples["Reference"]) and np.abs(samples[label].astype(int)
                                                              - samples["Reference"].astype(int)).max() <= 2]
            assert reference, "the hidden reference is a dithered copy of the labelled one"
        assert service.open("first", view["token"])["conditions"] == view["conditions"]  # stable on a reload
        assert fetch(service, view, "A") == data["A"]  # the same copy when fetched again
        view = finish_one(service, view)


def finish_one(service: StudyService, view: dict) -> dict:
    for condition in view["conditions"]:
        if condition["must_play"]:
            fetch(service, view, condition["label"])
            service.played(view["session"], view["trial"], condition["label"])
    return service.submit(view["session"], view["trial"], answer_for(view))


def test_a_rater_id_takes_a_study_once_and_resumes_its_open_session(service):
    first = service.start("first", "repeat-rater")
    again = service.start("first", " repeat-rater ")  # the same id, as typed again: the same open session
    assert again["session"] == first["session"] and again["trial"] == first["trial"]
    assert finish(service, again)["state"] == "done"
    refused = service.start("first", "repeat-rater")
    assert refused["state"] == "start" and "already taken this study" in refused["refused"]
    assert [s.rater_id for s in service.store.study_sessions("first")] == ["repeat-rater"]
    assert service.start("second", "repeat-rater")["state"] == "trial"  # another study is another matter
    assert service.start("first", "")["session"] != service.start("first", "")["session"]  # no id: a session each


def test_app_help_prints_its_flags_and_starts_nothing():
    import subprocess
    import sys

    app = REPOSITORY / "app.py"
    done = subprocess.run([sys.executable, "-X", "importtime", str(app), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "--study NAME" in done.stdout and "usage: python app.py" in done.stdout
    assert "gradio" not in done.stderr and "ssd_demo" not in done.stderr  # nothing but the standard library loaded


def test_a_served_study_not_created_yet_says_how_to_create_it(root):
    service = StudyService(StudySettings.from_env(["first", "nosuch"], root))
    try:
        page = service.open("nosuch", "")
        assert page["state"] == "closed"
        assert "'nosuch' is not created yet: run python -m ssd_demo study create FILE" in page["message"]
    finally:
        service.close()


def test_old_clip_copies_are_pruned_and_made_again_identical(service, monkeypatch):
    import os

    from ssd_demo.app.listening import study_service

    view = service.start("first", "pruned-rater")
    label = view["conditions"][0]["label"]
    data = fetch(service, view, label)
    first = service._copies / f"{service.clip_key(view['session'], view['trial'], label)}.wav"
    assert first.read_bytes() == data
    os.utime(first, (0, 0))  # made long ago
    monkeypatch.setattr(service, "_pruned_at", -1e9)
    service._prune_copies()
    assert not first.exists() and study_service.COPY_SECONDS >= 600
    again = service.open("first", view["token"])
    assert again["conditions"] == view["conditions"] and fetch(service, again, label) == data
    assert first.read_bytes() == data


def test_a_wrong_results_token_is_one_warning_line_without_a_traceback(root, monkeypatch, caplog):
    gr = pytest.importorskip("gradio")
    from ssd_demo.app.listening.service import close_listening_apps
    from ssd_demo.app.listening.study_page import build_study_demo

    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "right")
    demo = build_study_demo(["first"], root)
    try:
        handlers = [f.fn for f in demo.fns.values() if f.api_name == "study_admin_results"]
        assert len(handlers) == 1
        caplog.clear()
        with caplog.at_level("WARNING"):
            with pytest.raises(gr.Error) as refused:
                handlers[0]("wrong", "first", True)
        assert "token" in refused.value.message and refused.value.print_exception is False  # Gradio prints no traceback
        lines = [r for r in caplog.records if "token" in r.getMessage()]
        assert len(lines) == 1 and lines[0].levelname == "WARNING" and lines[0].exc_info is None
        assert "\n" not in lines[0].getMessage()
    finally:
        close_listening_apps()


def test_one_address_starts_a_bounded_number_of_new_sessions(service, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_SESSIONS_PER_ADDRESS", "2")
    assert service.start("first", "", "10.0.0.1")["state"] == "trial"
    assert service.start("first", "named", "10.0.0.1")["state"] == "trial"
    assert service.start("first", "named", "10.0.0.1")["state"] == "trial"  # resumed, even at the limit
    assert service.start("first", "NAMED", "10.0.0.1")["state"] == "trial"  # the same rater id, in capitals
    refused = service.start("first", "", "10.0.0.1")
    assert refused["state"] == "start" and "Too many new sessions" in refused["refused"]
    assert service.start("second", "", "10.0.0.1")["state"] == "start"  # per address, across studies
    assert service.start("first", "", "10.0.0.2")["state"] == "trial"  # another address is not held back
    assert len(service.store.study_sessions("first")) == 3
    monkeypatch.setenv("SSD_DEMO_SESSIONS_PER_ADDRESS", "0")  # 0: no limit (e.g. raters behind one proxy)
    assert service.start("first", "", "10.0.0.1")["state"] == "trial"


def test_the_clip_copies_stay_under_their_disk_bound(service, monkeypatch):
    from ssd_demo.app.listening import study_service

    monkeypatch.setattr(study_service, "MAX_COPY_BYTES", 40_000)  # a few tone clips' worth
    for _ in range(12):
        view = service.start("first", "")
        while view["state"] == "trial":
            view = finish_one(service, view)
    assert sum(path.stat().st_size for path in service._copies.glob("*.wav")) <= 40_000 + 20_000  # one copy over at most
    folder = service._copies
    service.close()
    assert not folder.exists()  # and gone when the service closes (at exit too)


def test_a_forwarded_header_is_no_new_address_unless_a_trusted_proxy_adds_it(monkeypatch):
    """Sessions are bounded per address: a rater's own X-Forwarded-For must not make each session a new one."""
    from types import SimpleNamespace

    from ssd_demo.app.listening import study_page

    request = SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"), headers={"x-forwarded-for": "203.0.113.9"})
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("SSD_DEMO_TRUSTED_PROXY", raising=False)
    assert study_page._address(request) == "127.0.0.1"
    monkeypatch.setenv("SSD_DEMO_TRUSTED_PROXY", "1")  # behind a proxy that adds the header: its last hop
    assert study_page._address(request) == "203.0.113.9"
    assert study_page._address(None) is None


def test_the_study_server_keeps_uvicorn_from_trusting_forwarded_headers(tmp_path, monkeypatch):
    import os

    from ssd_demo.app.listening.service import close_listening_apps
    from ssd_demo.app.listening.study_page import build_study_demo

    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    try:
        build_study_demo(["none-yet"], tmp_path)
    finally:
        close_listening_apps()
    assert os.environ["FORWARDED_ALLOW_IPS"] == ""  # uvicorn's default trusts 127.0.0.1's header
