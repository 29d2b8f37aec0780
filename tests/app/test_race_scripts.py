"""The race page's scripts and what they are fed, without a browser.

Every script the page installs must parse: a syntax error in one blanks the whole page (`node --check`, skipped
where Node.js is absent). The live player (`race_js.PLAYER_JS`) runs under Node.js on a stand-in audio clock:
never two voices at once, the first lane with audio first (the leader in tokens on a near tie), pieces sent twice
played once, Stop silencing both. And `LiveAudio.payload`, what the server sends the player: each lane's pieces
numbered from 0, a lane done only once every piece of it was sent, each payload repeating the one before it.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from ssd_demo.app.compare import Piece, Race, race_js, to_int16
from ssd_demo.app.compare.race_view import LiveAudio
from ssd_demo.speech.streaming import AudioPiece

NODE = shutil.which("node") or shutil.which("nodejs")
needs_node = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (apt-get install -y nodejs)")

#: Each script as the page runs it: the live-audio component's script is the body of a function Gradio calls with
#: `watch` and `props` (among others); the event scripts are function expressions.
INSTALLED = {
    "PLAYER_ON_LOAD_JS": "function f(watch, props) {\n%s\n}\n",
    "RACE_START_JS": "const f = (%s);\n",
    "STOP_JS": "const f = (%s);\n",
    "PLAY_BOTH_JS": "const f = (%s);\n",
    "ENTER_RACES_JS": "const f = (%s);\n",
    "PRESENTER_JS": "const f = (%s);\n",
    "PRESENTER_FROM_URL_JS": "const f = (%s);\n",
}


def test_every_script_of_the_race_module_is_one_the_page_installs():
    scripts = {name for name in vars(race_js) if name.endswith("_JS")}
    assert scripts - {"PLAYER_JS"} == set(INSTALLED)  # PLAYER_JS is inside the player's and the buttons' scripts


@needs_node
@pytest.mark.parametrize("name", sorted(INSTALLED))
def test_every_script_the_page_installs_parses(name, tmp_path):
    path = tmp_path / f"{name}.js"
    path.write_text(INSTALLED[name] % getattr(race_js, name))
    checked = subprocess.run([NODE, "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, f"{name}:\n{checked.stderr}"


# --- the live player, on a stand-in audio clock ------------------------------------------------------

#: What PLAYER_JS touches in a browser, faked: the page (no elements), a clock in milliseconds that the scenario
#: moves, timers on it, and an audio context whose sources only note when they were scheduled. Then the scenario's
#: steps, each at its time (timers and the sources' ends fire in between, in time order); prints what happened.
HARNESS = """
let now = 0;
const timers = [], sources = [], probes = [];
globalThis.window = globalThis;
Object.defineProperty(globalThis, 'performance', {value: {now: () => now}, configurable: true, writable: true});
globalThis.setTimeout = (fn, ms) => { timers.push({at: now + ms, fn, done: false}); };
globalThis.document = {querySelector: () => null, querySelectorAll: () => [], addEventListener: () => {}};
globalThis.MutationObserver = class { observe() {} };
globalThis.AudioContext = class {
  constructor() { this.state = 'running'; this.destination = {}; }
  get currentTime() { return now / 1000; }
  resume() {}
  createBuffer(channels, length, rate) {
    const data = new Float32Array(length);
    return {duration: length / rate, getChannelData: () => data};
  }
  createBufferSource() {
    const source = {connect() {}, start(when) { source.when = when; sources.push(source); },
                    stop() { source.stopped = true; }};
    return source;
  }
};
%(player)s
const advance = (to) => {
  for (;;) {
    const due = [];
    for (const t of timers) { if (!t.done && t.at <= to) { due.push([t.at, () => { t.done = true; t.fn(); }]); } }
    for (const s of sources) {
      const end = (s.when + s.buffer.duration) * 1000;
      if (!s.ended && !s.stopped && end <= to) {
        due.push([end, () => { s.ended = true; if (s.onended) { s.onended(); } }]);
      }
    }
    if (!due.length) { break; }
    due.sort((a, b) => a[0] - b[0]);
    now = Math.max(now, due[0][0]);
    due[0][1]();
  }
  now = to;
};
for (const step of %(steps)s) {
  advance(step.at);
  if (step.do === 'start') { window.ssdClick = now; window.ssdPlayer.start(); }
  if (step.do === 'feed') { window.ssdPlayer.feed(JSON.stringify(step.payload)); }
  if (step.do === 'stop') { window.ssdPlayer.silence(); }
  if (step.do === 'probe') { probes.push(window.ssdPlayer.playing()); }
}
advance(60000);
console.log(JSON.stringify({log: window.ssdAudioLog, heard: window.ssdHeard, probes,
                            sources: sources.map((s) => ({when: s.when, end: s.when + s.buffer.duration,
                                                          stopped: !!s.stopped}))}));
"""

RATE = 16_000


def _pcm(seconds: float) -> str:
    return base64.b64encode(np.zeros(int(RATE * seconds), "<i2").tobytes()).decode("ascii")


def _payload(race: int, lanes: dict, pieces=()) -> dict:
    """`lanes`: {lane: (pieces sent so far, tokens, done[, stopped])}; `pieces`: (lane, index, seconds)."""
    return {"race": race, "rate": RATE,
            "lanes": {name: {"pieces": state[0], "tokens": state[1], "done": state[2],
                             "stopped": state[3] if len(state) > 3 else False} for name, state in lanes.items()},
            "pieces": [{"lane": lane, "index": index, "pcm": _pcm(seconds)} for lane, index, seconds in pieces]}


def _play(steps: list[dict], tmp_path) -> dict:
    """Run the player through `steps` ({at: ms, do: start | feed | stop | probe, payload}): its audio log, what it
    heard, each source it scheduled and what `playing()` said at each probe; `played`: (lane, start, end) in ms since
    the click of each piece it logged sounding."""
    path = tmp_path / "player.js"
    path.write_text(HARNESS % {"player": race_js.PLAYER_JS, "steps": json.dumps(steps)})
    ran = subprocess.run([NODE, str(path)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    log = out["log"]
    starts = [i for i, entry in enumerate(log) if entry["kind"] == "start"]
    assert all(log[i + 1]["kind"] == "end" and log[i + 1]["lane"] == log[i]["lane"] for i in starts), log
    out["played"] = [(log[i]["lane"], log[i]["at"], log[i + 1]["at"]) for i in starts]
    return out


def _never_two_at_once(played) -> None:
    spans = sorted((start, end) for _, start, end in played)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end - 1e-6, played


#: How long the player holds a first voice for the lane ahead in tokens (seconds), as the script says.
HOLD_S = float(re.search(r"HOLD_S = ([0-9.]+)", race_js.PLAYER_JS).group(1))
AR, SPEC = "autoregressive", "speculative"


@needs_node
def test_the_first_lane_with_audio_plays_first_and_the_other_after_it(tmp_path):
    steps = [{"at": 0, "do": "start"},
             {"at": 10, "do": "feed", "payload": _payload(1, {AR: (0, 10, False), SPEC: (1, 30, False)},
                                                          [(SPEC, 0, 0.5)])},
             # AR's first piece comes while the speculative voice speaks; a piece sent twice plays once.
             {"at": 100, "do": "feed", "payload": _payload(1, {AR: (1, 20, False), SPEC: (2, 50, False)},
                                                           [(SPEC, 0, 0.5), (AR, 0, 0.5), (SPEC, 1, 0.5)])},
             {"at": 200, "do": "feed", "payload": _payload(1, {AR: (2, 30, False), SPEC: (2, 60, True)},
                                                           [(AR, 1, 0.5)])},
             {"at": 300, "do": "feed", "payload": _payload(1, {AR: (2, 40, True), SPEC: (2, 60, True)})},
             {"at": 400, "do": "probe"}, {"at": 5000, "do": "probe"}]
    out = _play(steps, tmp_path)
    assert out["probes"] == [True, False]  # playing while a voice is still to end
    assert [lane for lane, _, _ in out["played"]] == [SPEC, SPEC, AR, AR]  # each voice to its end, then the next
    assert len(out["sources"]) == 4
    _never_two_at_once(out["played"])
    ready = [entry["lane"] for entry in out["log"] if entry["kind"] == "ready"]
    assert ready == [SPEC, AR] and all(entry["race"] == 1 for entry in out["log"])
    assert out["heard"][SPEC] * 1000 == pytest.approx(out["played"][0][1])  # first audible sample, since the click
    assert out["heard"][AR] * 1000 == pytest.approx(out["played"][2][1])


@needs_node
def test_on_a_near_tie_the_voice_of_the_lane_ahead_in_tokens_plays_first(tmp_path):
    # AR has audio first, but the speculative lane is ahead in tokens: the player holds AR's voice for a moment,
    # the speculative lane's audio comes meanwhile and is heard first.
    steps = [{"at": 0, "do": "start"},
             {"at": 10, "do": "feed", "payload": _payload(1, {AR: (1, 20, False), SPEC: (0, 25, False)},
                                                          [(AR, 0, 0.5)])},
             {"at": 10 + HOLD_S * 500, "do": "feed", "payload": _payload(1, {AR: (1, 22, False), SPEC: (1, 40, False)},
                                                                        [(SPEC, 0, 0.5)])},
             {"at": 3000, "do": "feed", "payload": _payload(1, {AR: (1, 30, True), SPEC: (1, 60, True)})}]
    out = _play(steps, tmp_path)
    assert [entry["lane"] for entry in out["log"] if entry["kind"] == "ready"] == [AR, SPEC]
    assert [lane for lane, _, _ in out["played"]] == [SPEC, AR]
    _never_two_at_once(out["played"])


@needs_node
def test_a_held_voice_plays_when_the_leader_has_no_audio_in_time(tmp_path):
    late = 10 + HOLD_S * 1000 + 1000
    steps = [{"at": 0, "do": "start"},
             {"at": 10, "do": "feed", "payload": _payload(1, {AR: (1, 20, False), SPEC: (0, 25, False)},
                                                          [(AR, 0, 0.5)])},
             {"at": late, "do": "feed", "payload": _payload(1, {AR: (1, 30, True), SPEC: (1, 60, True)},
                                                            [(SPEC, 0, 0.5)])}]
    out = _play(steps, tmp_path)
    assert [lane for lane, _, _ in out["played"]] == [AR, SPEC]
    assert out["played"][0][1] < late  # it did not wait for the other lane's audio
    _never_two_at_once(out["played"])


@needs_node
def test_stop_silences_both_voices_and_a_new_race_starts_over(tmp_path):
    both = {AR: (1, 10, False), SPEC: (2, 30, False)}
    steps = [{"at": 0, "do": "start"},
             {"at": 10, "do": "feed", "payload": _payload(1, both, [(SPEC, 0, 1.0), (SPEC, 1, 1.0), (AR, 0, 1.0)])},
             {"at": 400, "do": "probe"},
             {"at": 500, "do": "stop"},
             {"at": 510, "do": "probe"},
             {"at": 600, "do": "feed", "payload": _payload(1, {AR: (2, 20, False), SPEC: (3, 40, False)},
                                                           [(SPEC, 2, 1.0), (AR, 1, 1.0)])},
             # The next race: started by its click; a late word of the race before is ignored.
             {"at": 1000, "do": "start"},
             {"at": 1010, "do": "feed", "payload": _payload(2, {AR: (0, 5, False), SPEC: (1, 9, False)},
                                                            [(SPEC, 0, 0.5)])},
             {"at": 1020, "do": "feed", "payload": _payload(1, {AR: (3, 30, True), SPEC: (3, 40, True)},
                                                            [(AR, 2, 1.0)])}]
    out = _play(steps, tmp_path)
    stops = [entry for entry in out["log"] if entry["kind"] == "stop"]
    assert len(stops) == 1 and stops[0]["race"] == 1 and stops[0]["at"] == pytest.approx(500)
    # Race 1: the piece sounding and the one scheduled after it, both silenced; nothing of it after Stop.
    assert [source["stopped"] for source in out["sources"]] == [True, True, False]
    assert [(entry["race"], entry["lane"]) for entry in out["log"] if entry["kind"] == "start"] == \
        [(1, SPEC), (2, SPEC)]  # a silenced piece never sounded: not logged
    assert out["played"][-1][1] == pytest.approx(60)  # race 2's voice as soon as its audio came (and the lead-in)
    assert out["probes"] == [True, False]  # silenced: nothing is still to end


# --- what the server sends the player ----------------------------------------------------------------

def _audio_piece(index: int, samples: int, tokens: int) -> AudioPiece:
    return AudioPiece(index=index, chunk_index=0, text="", audio=np.full(samples, 0.25, dtype=np.float32),
                      sample_rate=RATE, start_sample=0, ready_seconds=0.1 * (index + 1), processing_seconds=0.1,
                      tokens_so_far=tokens, target_calls_so_far=tokens)


def _result(tokens: int):
    return SimpleNamespace(generation=SimpleNamespace(stats=SimpleNamespace(target_calls=tokens), tokens=[1] * tokens))


def _sent(payload: dict) -> list[tuple[str, int]]:
    return [(piece["lane"], piece["index"]) for piece in payload["pieces"]]


def test_live_audio_payloads_number_each_lanes_pieces_and_say_a_lane_done_once_all_are_sent():
    race, audio = Race(), LiveAudio()
    race.sample_rate = RATE
    first = json.loads(audio.payload(race))
    assert first["race"] == audio.race and first["rate"] == RATE and first["pieces"] == []
    assert first["lanes"] == {name: {"pieces": 0, "stopped": False, "tokens": 0, "done": False}
                              for name in ("autoregressive", "speculative")}
    race.started("autoregressive")
    race.started("speculative")
    # The race records a lane's pieces (and its end) before the page takes them from its events.
    spoken, silent, more = _audio_piece(0, 800, 5), _audio_piece(1, 0, 6), _audio_piece(2, 400, 8)
    for piece in (spoken, silent, more):
        race.piece("autoregressive", piece)
    race.finished("autoregressive", _result(9), 1.0)
    audio.piece(Piece("autoregressive", spoken))
    payload = json.loads(audio.payload(race))
    assert _sent(payload) == [("autoregressive", 0)]
    assert not payload["lanes"]["autoregressive"]["done"]  # its run ended, but two of its pieces are still to come
    pcm = np.frombuffer(base64.b64decode(payload["pieces"][0]["pcm"]), "<i2")
    assert np.array_equal(pcm, to_int16(spoken.audio))  # 16-bit PCM at the clip's one gain
    audio.piece(Piece("autoregressive", silent))  # silent: not sent, not numbered
    audio.piece(Piece("autoregressive", more))
    race.piece("speculative", _audio_piece(0, 400, 7))
    audio.piece(Piece("speculative", race.lanes["speculative"].pieces[0]))
    payload = json.loads(audio.payload(race))
    # The payload before's piece once more, then the new ones: each lane numbered from 0, the silent one skipped.
    assert _sent(payload) == [("autoregressive", 0), ("autoregressive", 1), ("speculative", 0)]
    assert payload["lanes"]["autoregressive"] == {"pieces": 2, "stopped": False, "tokens": 9, "done": True}
    assert payload["lanes"]["speculative"] == {"pieces": 1, "stopped": False, "tokens": 7, "done": False}
    again = json.loads(audio.payload(race))  # nothing new: the last payload's pieces once more, then none
    assert _sent(again) == [("autoregressive", 1), ("speculative", 0)]
    assert json.loads(audio.payload(race))["pieces"] == []
    race.stop()  # the speculative lane was still running
    stopped = json.loads(audio.payload(race))
    assert stopped["lanes"]["speculative"]["stopped"] and not stopped["lanes"]["speculative"]["done"]
    assert stopped["lanes"]["autoregressive"]["done"] and not stopped["lanes"]["autoregressive"]["stopped"]
    assert LiveAudio().race >= audio.race  # a later race's number is never lower (the player ignores a lower one)
