"""The race's scripts and presenter-mode CSS, run in the browser: the rule that never plays two voices at once
and plays each live voice to its end (`VOICES_JS`), what a race's start, "Replay both" and a race's end do
to the players, and presenter mode. Plain strings; `race_view` installs them on the page.
"""

from .race import DONE_LIVE

#: Presenter mode's layout on a 1280x720 projector: added to the page's own CSS (`app.page.CSS`) by
#: `build_race_view`, so that every state of the race (idle, racing, done, refused, stopped) fits.
STAGE_CSS = """
body.ssd-presenter .ssd-example { white-space: normal; font-size: 0.85rem; line-height: 1.15; padding: 0.2rem 0.5rem; }
body.ssd-presenter #ssd-headline h1 { font-size: 2.4rem; margin: 0; }
body.ssd-presenter .ssd-lane h3 { margin: 0 0 0.2rem 0; }
body.ssd-presenter #ssd-replay-note p { margin: 0; }
/* A long status, replay or headline basis line (a paragraph's race, a median's range) keeps two lines on the projector;
   the whole text stays in the page (selectable, read by screen readers) and in the API's outputs. */
body.ssd-presenter #ssd-replay-note p, body.ssd-presenter #ssd-status p, body.ssd-presenter #ssd-headline p {
  display: -webkit-box; -webkit-line-clamp: 2; -webkit-box-orient: vertical; overflow: hidden; }
body.ssd-presenter #ssd-replay [data-testid="block-label"] { font-size: 0.8rem; }
#ssd-stage-css { display: none; }
"""
#: Never two voices at once, and each live voice to its end: a voice that would start while another is sounding waits
#: for its turn. A live player that runs out of audio ('waiting') keeps its turn while its lane still owes speech:
#: still decoding, or done with more seconds of speech than the player has played (plus the AAC encoder's priming,
#: `PRIMING_S`), a finished lane for at most four seconds (`STALL_LIMIT_MS`). A finished lane that has played its
#: speech is held once it gives up its turn: the server pads each finished lane with silence
#: (`race_view.TAIL_PADDING`), so what its stream still holds is silence, and the encoder's last frames, handed out
#: when the race ends, never take a turn after the next voice. Every live stream begins with `LEAD_IN_S` of silence
#: (`race_view.LEAD_IN`, sent once the voice's models are ready so that the players listen before the first piece):
#: the rule and the clock below count from its end. The click-to-sound wall clock of each live player (the click to
#: its first audible sample) is kept in `window.ssdHeard` and written after its lane's "First audio after" figure.
#: Installed once per page (by the first race or replay). A streamed player is "playing" from the race's start while
#: it waits for audio, so the rule looks at sound ('playing'), not at the play button: when one of the race's players
#: starts sounding while another one is, it is paused and queued, and it plays when the other stops sounding (its
#: audio ran out, it ended or was paused); the speculative voice also waits until the autoregressive one has had its
#: whole turn, whichever player starts first. Because the lanes decode one after the other, the speculative lane's
#: live audio, often ready while the autoregressive lane's is still playing, is heard in full right after it. A
#: player clicked by hand plays at once and pauses the others; `hold` pauses a player and keeps it quiet (no turn, no
#: restart when its stream sends more audio) until it is clicked or the next race starts. Once the last voice has
#: had its turn, the status line's "the speculative voice plays next" (`race.DONE_LIVE`) says both voices played.
VOICES_JS = """
if (!window.ssdVoices) {
  const ids = ['ssd-ar-stream', 'ssd-spec-stream', 'ssd-replay-ar', 'ssd-replay-spec'];
  const lanes = {'ssd-ar-stream': 'ssd-ar-live', 'ssd-spec-stream': 'ssd-spec-live'};
  const STALL_LIMIT_MS = 4000, PRIMING_S = 0.07, LEAD_IN_S = 0.2, PLAYS_NEXT = '""" + DONE_LIVE.split(": ", 1)[1] + """';
  const audio = (id) => document.querySelector('#' + id + ' audio');
  const idOf = (e) => ids.find((i) => e.target.closest && e.target.closest('#' + i));
  const held = new Set(), sounding = new Set(), played = new Set(), stalled = {};
  let queue = [], touched = {id: null, at: 0};
  window.ssdHeard = window.ssdHeard || {};
  const laneText = (id) => { const el = lanes[id] && document.querySelector('#' + lanes[id]); return el ? el.innerText : ''; };
  const owes = (id) => {
    if (!lanes[id]) { return false; }
    const text = laneText(id);
    if (/\\bstopped\\b/.test(text)) { return false; }
    if (!/\\bdone\\b/.test(text)) { return /\\brunning\\b/.test(text); }
    const speech = text.match(/([0-9.]+) s of speech/), a = audio(id);
    return !!(speech && a && a.currentTime < parseFloat(speech[1]) + LEAD_IN_S + PRIMING_S);
  };
  const finished = (id) => !!lanes[id] && /\\b(done|stopped)\\b/.test(laneText(id));
  // The lanes' order: a live voice waits for every voice before it to have had its whole turn (`played`), even
  // when its own player happens to start sounding first (both players can pick up their streams at once).
  const ORDER = ['ssd-ar-stream', 'ssd-spec-stream'];
  const waitsFor = (id) => {
    const at = ORDER.indexOf(id);
    const pending = (before) => !played.has(before) && !/\\bstopped\\b/.test(laneText(before));
    return at > 0 && ORDER.slice(0, at).some(pending);
  };
  const showHeard = (id) => {
    const el = lanes[id] && document.querySelector('#' + lanes[id]);
    if (!el || !(id in window.ssdHeard) || el.querySelector('.ssd-heard')) { return; }
    const target = [...el.querySelectorAll('p')].pop() || el;
    const span = document.createElement('span');
    span.className = 'ssd-heard';
    span.textContent = ' · heard ' + window.ssdHeard[id].toFixed(2) + ' s after the click';
    target.appendChild(span);
  };
  for (const id of Object.keys(lanes)) {
    const el = document.querySelector('#' + lanes[id]);
    if (el) { new MutationObserver(() => showHeard(id)).observe(el, {childList: true, subtree: true}); }
  }
  document.addEventListener('timeupdate', (e) => {
    const id = idOf(e);
    const t = e.target.currentTime - LEAD_IN_S;  // every live stream begins with the lead-in's silence
    if (!lanes[id] || id in window.ssdHeard || window.ssdClick === undefined || t < 0.02) { return; }
    window.ssdHeard[id] = (performance.now() - window.ssdClick) / 1000 - t;
    showHeard(id);
  }, true);
  const byHand = (id) => touched.id === id && performance.now() - touched.at < 2000;
  const quiet = (id) => { const a = audio(id); if (a && !a.paused) { a.pause(); } };
  const hold = (id) => { held.add(id); sounding.delete(id); queue = queue.filter((q) => q !== id); quiet(id); };
  document.addEventListener('pointerdown', (e) => { const id = idOf(e); if (id) { touched = {id, at: performance.now()}; } },
                            true);
  document.addEventListener('play', (e) => {
    const id = idOf(e);
    if (id && held.has(id)) { if (byHand(id)) { held.delete(id); } else { e.target.pause(); } }
    // A voice whose turn is not due is paused before it can sound at all ('playing' comes only after the
    // first tens of milliseconds are out): it is queued and started when the voice before it is done.
    else if (id && !byHand(id) && waitsFor(id)) {
      e.target.pause();
      if (!queue.includes(id)) { queue.push(id); }
    }
  }, true);
  document.addEventListener('playing', (e) => {
    const id = idOf(e);
    if (!id) { return; }
    if (byHand(id)) {
      held.delete(id);
      queue = queue.filter((q) => q !== id);
      for (const other of [...sounding]) { if (other !== id) { hold(other); } }
    } else if (held.has(id) || waitsFor(id) || [...sounding].some((other) => other !== id)) {
      e.target.pause();
      if (!held.has(id) && !queue.includes(id)) { queue.push(id); }
      return;
    }
    sounding.add(id);
  }, true);
  const release = (id) => {
    if (!sounding.delete(id) || sounding.size) { return; }
    const next = queue.shift();
    if (next) { const a = audio(next); if (a) { a.play(); } }
  };
  // A voice has had its whole turn. Once the last one has, the status line stops saying it plays next.
  const settle = (id) => {
    played.add(id);
    const status = document.querySelector('#ssd-status');
    if (id !== ORDER[ORDER.length - 1] || !status) { return; }
    const walker = document.createTreeWalker(status, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      node.nodeValue = node.nodeValue.replace(PLAYS_NEXT, 'both voices played');
    }
  };
  for (const name of ['pause', 'ended', 'waiting', 'emptied']) {
    document.addEventListener(name, (e) => {
      const id = idOf(e);
      // At its end a player fires 'pause' (already `ended`), then 'ended': either way its voice has had its turn.
      const atEnd = name === 'ended' || (name === 'pause' && e.target.ended);
      if (id && atEnd && finished(id)) { settle(id); }
      if (!id || !sounding.has(id)) { return; }
      if (name === 'waiting' && owes(id)) {  // out of audio, but its lane owes more: it keeps its turn
        const mark = stalled[id] = performance.now();
        // A finished lane's tail that never comes is given up: the player is held (its remainder never plays
        // after the next voice). A lane still decoding keeps its turn: no other live voice exists yet.
        const giveUp = () => {
          if (stalled[id] !== mark || e.target.readyState >= 3) { return; }
          if (!finished(id)) { setTimeout(giveUp, STALL_LIMIT_MS); return; }
          settle(id); release(id); hold(id);
        };
        setTimeout(giveUp, STALL_LIMIT_MS);
        return;
      }
      if (name === 'waiting' && finished(id)) { settle(id); }
      release(id);
      // A finished live voice that has played its speech is held: what its stream still holds is the
      // encoder's silent tail, handed out when the race ends, and must not take a turn after the next voice.
      if ((name === 'waiting' || atEnd) && finished(id)) { hold(id); }
    }, true);
  }
  document.addEventListener('playing', (e) => { const id = idOf(e); if (id) { delete stalled[id]; } }, true);
  window.ssdVoices = {
    owes, hold: (...which) => which.forEach(hold),
    play: (id) => { held.delete(id); queue = queue.filter((q) => q !== id); const a = audio(id);
                    if (a) { a.currentTime = 0; return a.play(); } },
    // A race starts from a clean slate: no turn, queue or stall timer of the last race carries over.
    audio, reset: () => { held.clear(); sounding.clear(); played.clear(); queue = [];
                          for (const id in stalled) { delete stalled[id]; } },
  };
}
"""
#: A race starts: its buttons are disabled at once in the browser (a double click must not reach the server
#: twice before the server disables them), the voice rule is in place, nothing is held, the replays and the
#: last race's live players are silent and the toasts of earlier races are gone.
RACE_START_JS = "() => {" + VOICES_JS + """
  for (const button of document.querySelectorAll('#ssd-run, .ssd-example')) { button.disabled = true; }
  window.ssdVoices.reset();
  window.ssdClick = performance.now();  // the click-to-sound clock starts here
  window.ssdHeard = {};
  for (const span of document.querySelectorAll('.ssd-heard')) { span.remove(); }
  window.ssdVoices.hold('ssd-replay-ar', 'ssd-replay-spec');
  for (const id of ['ssd-ar-stream', 'ssd-spec-stream']) {  // the last race's voices; the lead-ins replace them
    const audio = window.ssdVoices.audio(id);
    if (audio && !audio.paused) { audio.pause(); }
  }
  for (const button of document.querySelectorAll('.toast-close')) { button.click(); }
  return [];
}"""
#: "Replay both": the live players stop, then the autoregressive replay plays and, when it ends, the
#: speculative one (an audience follows one voice at a time). Clicking again starts over.
PLAY_BOTH_JS = "() => {" + VOICES_JS + """
  const voices = window.ssdVoices;
  voices.hold('ssd-ar-stream', 'ssd-spec-stream', 'ssd-replay-spec');
  const first = voices.audio('ssd-replay-ar');
  if (!first) { return; }
  const turn = (window.ssdReplayTurn = (window.ssdReplayTurn || 0) + 1);
  first.addEventListener('ended', () => { if (window.ssdReplayTurn === turn) { voices.play('ssd-replay-spec'); } },
                         {once: true});
  voices.play('ssd-replay-ar');
}"""
#: After a race: a stopped or refused race leaves its live players paused (Gradio's streamed player keeps
#: "playing" an ended stream at 0:00 otherwise); a finished one lets them play to the end.
#: The player may only pick up its emptied stream a moment later and start again, so the pause is repeated
#: for a second and a half while the page still says the race stopped or was not run, and no new race has started
#: (a race started within that time, before its first frame replaced the status, would otherwise be held silent).
IDLE_PLAYERS_JS = """(...inputs) => {
  const race = window.ssdClick;  // set by each race's start (RACE_START_JS)
  const pause = () => {
    if (window.ssdClick !== race) { return; }
    const status = document.querySelector('#ssd-status');
    const text = status ? status.innerText.trim() : '';
    if (!(text.startsWith('Stopped') || text.startsWith('Not run'))) { return; }
    if (window.ssdVoices) { window.ssdVoices.hold('ssd-ar-stream', 'ssd-spec-stream'); }
    for (const id of ['ssd-ar-stream', 'ssd-spec-stream']) {
      const audio = document.querySelector('#' + id + ' audio');
      if (audio) { audio.pause(); }
    }
  };
  pause();
  for (const ms of [100, 300, 700, 1500]) { setTimeout(pause, ms); }
  return inputs;
}"""
#: Presenter mode is a class on the page: CSS (app.page.CSS) enlarges the race and hides developer detail.
PRESENTER_JS = """(on) => {
  document.body.classList.toggle('ssd-presenter', !!on);
  const url = new URL(window.location.href);  // a reload keeps what the toggle says
  if (on) { url.searchParams.set('presenter', '1'); } else { url.searchParams.delete('presenter'); }
  window.history.replaceState(null, '', url);
}"""
#: The page's load: `?presenter=1` in the address turns presenter mode on.
PRESENTER_FROM_URL_JS = """() => {
  const on = new URLSearchParams(window.location.search).get('presenter') === '1';
  document.body.classList.toggle('ssd-presenter', on);
  return on;
}"""
