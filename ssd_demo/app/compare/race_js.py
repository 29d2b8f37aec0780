"""The race's scripts and presenter-mode CSS, run in the browser: the live player of both lanes' voices
(`PLAYER_JS`, Web Audio), what a race's start, Stop and "Replay both" do to it, Enter in the text box, and
presenter mode. Plain strings; `race_view` and the tab install them on the page.
"""

#: Presenter mode's layout on a 1280x720 projector: added to the page's own CSS (`app.page.CSS`) by
#: `build_race_view`, so that every state of the race (idle, racing, done, refused, stopped) fits.
STAGE_CSS = """
body.ssd-presenter .ssd-example { white-space: normal; font-size: 0.85rem; line-height: 1.15; padding: 0.2rem 0.5rem; }
body.ssd-presenter #ssd-headline h1 { font-size: 2.4rem; margin: 0; }
body.ssd-presenter .ssd-lane h3 { margin: 0 0 0.2rem 0; }
body.ssd-presenter #ssd-replay-note p { margin: 0; }
/* A long status or headline basis line (a median's range) keeps two lines on the projector; the whole text stays
   in the page (selectable, read by screen readers) and in the API's outputs. The replay line is never cut: its
   numbers are the point (it wraps, smaller). */
body.ssd-presenter #ssd-status p, body.ssd-presenter #ssd-headline p {
  display: -webkit-box; -webkit-line-clamp: 2; -webkit-box-orient: vertical; overflow: hidden; }
body.ssd-presenter #ssd-replay-note p { font-size: 0.95rem; }
body.ssd-presenter #ssd-replay [data-testid="block-label"] { font-size: 0.8rem; }
#ssd-stage-css { display: none; }
"""
#: The race's live voices, played by the browser's Web Audio API from the pieces the server sends as they are
#: decoded (`race_view.LiveAudio.payload`: 16-bit PCM in base64, each lane's pieces numbered from 0, and each
#: lane's state and tokens so far). The rule: the first lane with audio plays first, each piece scheduled right
#: after the one before it (a piece that comes late leaves a gap: a stall the room hears); the other lane waits,
#: and starts `GAP_S` after the first lane's last piece ends, once that lane is done; never both at once. Except
#: for a near tie: when the lane with audio has fewer tokens than the other (which is ahead, and about to have
#: audio too), the player holds the first voice up to `HOLD_S` for the leader's first piece, so that the voice
#: the room hears first is the one that will finish first. Stop silences both at once. `window.ssdHeard` keeps,
#: per lane, the seconds from the click to its first audible sample (written after the lane's "First audio
#: after"), and `window.ssdAudioLog` every piece's start and end (on the audio clock), each stop and each lane's
#: first piece's arrival, in milliseconds since the click (the browser benchmark reads both). The replays
#: (`ssd-replay-ar`, `ssd-replay-spec`) are ordinary players: one starting pauses the other and silences the live
#: voices. Installed once per page.
PLAYER_JS = """
if (!window.ssdPlayer) {
  const GAP_S = 0.12, LEAD_S = 0.05, HOLD_S = 0.6;
  const laneIds = {autoregressive: 'ssd-ar-live', speculative: 'ssd-spec-live'};
  const replays = ['ssd-replay-ar', 'ssd-replay-spec'];
  let ctx = null, race = null, order = [], lanes = {}, sources = [], silenced = false, firstAt = null;
  let replayed = false;  // the lanes decoded one after the other and are replayed: the label says so
  window.ssdHeard = window.ssdHeard || {};
  window.ssdAudioLog = window.ssdAudioLog || [];
  const sinceClick = () => performance.now() - (window.ssdClick || 0);
  const log = (lane, kind, atMs) => window.ssdAudioLog.push({race, lane, kind, at: atMs});
  const context = () => {
    if (!ctx) { ctx = new (window.AudioContext || window.webkitAudioContext)(); }
    if (ctx.state === 'suspended') { ctx.resume(); }
    return ctx;
  };
  const toMs = (when) => sinceClick() + (when - ctx.currentTime) * 1000;  // a context time, on the click's clock
  const showHeard = (lane) => {
    const el = document.querySelector('#' + laneIds[lane]);
    if (!el || !(lane in window.ssdHeard) || el.querySelector('.ssd-heard')) { return; }
    const target = [...el.querySelectorAll('p')].pop() || el;
    const span = document.createElement('span');
    span.className = 'ssd-heard';
    span.textContent = ' · heard ' + window.ssdHeard[lane].toFixed(2) + ' s after the click'
      + (replayed ? ' (replayed)' : '');
    target.appendChild(span);
  };
  // Each lane's counters are redrawn by the server on every update: the "heard" label is written again each time.
  // Watched from the first race (the player may be installed before the lanes are on the page).
  const watched = new Set();
  const watchLanes = () => {
    for (const lane of Object.keys(laneIds)) {
      const el = document.querySelector('#' + laneIds[lane]);
      if (el && !watched.has(el)) {
        watched.add(el);
        new MutationObserver(() => showHeard(lane)).observe(el, {childList: true, subtree: true, characterData: true});
      }
    }
  };
  const decode = (piece, rate) => {
    const bytes = Uint8Array.from(atob(piece.pcm), (c) => c.charCodeAt(0));
    const samples = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
    const buffer = context().createBuffer(1, Math.max(samples.length, 1), rate);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < samples.length; i++) { channel[i] = samples[i] / 32768; }
    return buffer;
  };
  // Whether the first voice waits for the other lane: it is ahead in tokens and has no audio yet (`HOLD_S` at most).
  const holding = () => {
    if (order.length !== 1 || firstAt === null) { return false; }
    const first = lanes[order[0]];
    const other = Object.keys(lanes).find((name) => name !== order[0]);
    if (!other || lanes[other].done || (lanes[other].tokens || 0) <= (first.tokens || 0)) { return false; }
    const left = HOLD_S * 1000 - (performance.now() - firstAt);
    if (left <= 0) { return false; }
    setTimeout(pump, left + 5);
    return true;
  };
  // Schedule what can play now: the playing lane's next pieces, then, once it is done and all its pieces are
  // out, the next lane's.
  const pump = () => {
    if (silenced || holding()) { return; }
    for (const name of order) {
      const lane = lanes[name];
      while (lane.buffers.has(lane.next)) {
        const buffer = lane.buffers.get(lane.next);
        lane.buffers.delete(lane.next);
        const now = ctx.currentTime + LEAD_S;
        const when = Math.max(now, lane.end ?? now);
        const source = ctx.createBufferSource();
        source.buffer = buffer;
        source.connect(ctx.destination);
        source.start(when);
        sources.push(source);
        // Logged when it starts sounding, with its end on the same audio clock: a time far ahead on the audio
        // clock, extrapolated now, would drift, and an 'ended' event comes late when the page is busy.
        const first = lane.next === 0, scheduledIn = race, until = when + buffer.duration;
        setTimeout(() => {
          if (race !== scheduledIn || !sources.includes(source)) { return; }  // silenced meanwhile
          log(name, 'start', toMs(when));
          log(name, 'end', toMs(until));
          if (first) { window.ssdHeard[name] = toMs(when) / 1000; showHeard(name); }
        }, Math.max(0, (when - ctx.currentTime) * 1000 - 20));
        lane.end = when + buffer.duration;
        lane.next += 1;
      }
      const finished = lane.done && lane.next >= lane.total;
      if (!finished) { return; }  // the next lane waits for this one's end
      const following = order[order.indexOf(name) + 1];
      if (following && lanes[following].end === undefined) {
        lanes[following].end = (lane.end ?? ctx.currentTime) + GAP_S;
      }
    }
  };
  const lane = (name) => lanes[name] || (lanes[name] = {buffers: new Map(), next: 0, total: 0, done: false, tokens: 0});
  window.ssdPlayer = {
    // A race starts (in the click's own handler, so that the audio context may start): nothing of the last plays.
    start: () => { window.ssdPlayer.silence(false); silenced = false; race = null; order = []; lanes = {};
                   firstAt = null; watchLanes(); context(); },
    feed: (text) => {
      if (!text) { return; }
      let data;
      try { data = JSON.parse(text); } catch (error) { return; }
      if (data.race !== race) {
        if (race !== null && data.race < race) { return; }  // a late word from an earlier race
        window.ssdPlayer.silence(); silenced = false; race = data.race; order = []; lanes = {}; firstAt = null;
        replayed = false;
      }
      replayed = replayed || Boolean(data.replayed);
      if (silenced) { return; }
      for (const [name, state] of Object.entries(data.lanes || {})) {
        const l = lane(name);
        l.total = Math.max(l.total, state.pieces); l.done = l.done || state.done;
        l.tokens = Math.max(l.tokens, state.tokens || 0);
        if (state.stopped) { l.done = true; l.total = Math.min(l.total, l.next + l.buffers.size); }
      }
      for (const piece of data.pieces || []) {
        const l = lane(piece.lane);
        if (piece.index < l.next || l.buffers.has(piece.index)) { continue; }  // sent again: already here
        l.buffers.set(piece.index, decode(piece, data.rate));
        if (!order.includes(piece.lane)) {  // first with audio plays first (but see `holding`)
          order.push(piece.lane);
          log(piece.lane, 'ready', sinceClick());
          if (firstAt === null) { firstAt = performance.now(); }
          if (order.length === 2 && lanes[order[0]].next === 0 && lanes[order[1]].tokens > lanes[order[0]].tokens) {
            order.reverse();  // the leader's audio came while the first voice was held: it plays first
          }
        }
      }
      for (const name of Object.keys(lanes)) { if (!order.includes(name) && lanes[name].done) { order.push(name); } }
      pump();
    },
    silence: (logged = true) => {  // a new race's start silences the last one unlogged
      silenced = true;
      for (const source of sources) { try { source.stop(); } catch (error) { /* not started yet */ } }
      if (sources.length && logged) { log(null, 'stop', sinceClick()); }
      sources = [];
    },
    // Whether a voice is still to end (not once silenced: the stopped voices' scheduled ends mean nothing).
    playing: () => !silenced && !!ctx &&
      Object.values(lanes).some((l) => l.end !== undefined && l.end > ctx.currentTime),
  };
  // A replay starting silences the live voices and the other replay.
  document.addEventListener('play', (e) => {
    const id = replays.find((r) => e.target.closest && e.target.closest('#' + r));
    if (!id) { return; }
    window.ssdPlayer.silence();
    for (const other of replays) {
      const audio = document.querySelector('#' + other + ' audio');
      if (other !== id && audio && !audio.paused) { audio.pause(); }
    }
  }, true);
}
"""
#: The live-audio component's own script (`race_view`): installs the player and feeds it every value the server
#: sends (`watch` runs after each update of the component's value).
PLAYER_ON_LOAD_JS = PLAYER_JS + """
watch('value', () => window.ssdPlayer.feed(props.value));
"""
#: A race starts: its buttons are disabled at once in the browser (a double click must not reach the server
#: twice before the server disables them), the click clock starts, the live player is ready (its audio context
#: started by the click itself) and silent, the replays pause and the toasts of earlier races are gone.
RACE_START_JS = "() => {" + PLAYER_JS + """
  for (const button of document.querySelectorAll('#ssd-run, .ssd-example, #ssd-speak')) { button.disabled = true; }
  window.ssdClick = performance.now();  // the click-to-sound clock starts here
  window.ssdHeard = {};
  for (const span of document.querySelectorAll('.ssd-heard')) { span.remove(); }
  window.ssdPlayer.start();
  for (const id of ['ssd-replay-ar', 'ssd-replay-spec']) {
    const audio = document.querySelector('#' + id + ' audio');
    if (audio && !audio.paused) { audio.pause(); }
  }
  for (const button of document.querySelectorAll('.toast-close')) { button.click(); }
  return [];
}"""
#: Stop: both live voices fall silent at once, in the browser (the server stops the decoding within a round).
STOP_JS = "() => {" + PLAYER_JS + """
  window.ssdPlayer.silence();
  return [];
}"""
#: "Replay both": the live voices stop, then the autoregressive replay plays and, when it ends, the
#: speculative one (an audience follows one voice at a time). Clicking again starts over.
PLAY_BOTH_JS = "() => {" + PLAYER_JS + """
  window.ssdPlayer.silence();
  const audio = (id) => document.querySelector('#' + id + ' audio');
  const first = audio('ssd-replay-ar'), second = audio('ssd-replay-spec');
  if (!first) { return; }
  if (second && !second.paused) { second.pause(); }
  const turn = (window.ssdReplayTurn = (window.ssdReplayTurn || 0) + 1);
  first.addEventListener('ended', () => {
    if (window.ssdReplayTurn === turn && second) { second.currentTime = 0; second.play(); }
  }, {once: true});
  first.currentTime = 0;
  first.play();
}"""
#: Enter in the text box races (Shift+Enter starts a new line), as a chat box does.
ENTER_RACES_JS = """() => {
  if (window.ssdEnterRaces) { return; }
  window.ssdEnterRaces = true;
  document.addEventListener('keydown', (e) => {
    const box = e.target.closest && e.target.closest('#ssd-text textarea');
    if (!box || e.key !== 'Enter' || e.shiftKey || e.isComposing) { return; }
    e.preventDefault();
    const run = document.querySelector('#ssd-run');
    if (run && !run.disabled) { run.click(); }
  }, true);
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
