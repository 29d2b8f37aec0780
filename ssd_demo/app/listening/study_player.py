"""The rater's study screen as one custom HTML component: its template, CSS and JavaScript (no Gradio import).

One player serves every trial kind. Each condition is an <audio> element under an opaque label; pressing
a label switches to it at the same playback position (instant comparison) and the clip loops while "Loop"
is on. A clip counts as heard when it reaches its end while selected and at least 90% of it has been
played (`audio.played`), so jumping in just before the end does not count; the page then reports the play
to the server and unlocks that clip's control only once the server has recorded it. The server refuses an
answer for a clip it has no completed play for, whatever the page sends.

Clips come from no file URL: when a trial is shown the page asks the server for each condition's audio
(`study_clip`, base64 WAV), which the server records as fetched by this session, and plays it from a Blob
URL; a condition's button is enabled once its audio is in. The server counts a play only for a clip the
session fetched, at least 90% of its length earlier.

The page talks to the server through the component's server functions (`study_open`, `study_start`,
`study_clip`, `study_played`, `study_submit`, each taking one JSON object); text from the study is set with
`textContent`, never parsed as HTML.
"""

TEMPLATE = "<div class='ssd-study' id='ssd-study'><p>Loading the listening test...</p></div>"

CSS = """
.ssd-study { max-width: 56rem; margin: 0 auto; font-size: 1rem; line-height: 1.45; }
.ssd-study h2 { margin: 0.3rem 0 0.6rem; }
.ssd-study .muted { opacity: 0.75; }
.ssd-study .instructions { white-space: pre-wrap; margin: 0.4rem 0 0.8rem; }
.ssd-study .sentence { font-style: italic; margin: 0.4rem 0 0.8rem; }
.ssd-study .transport { display: flex; gap: 0.6rem; align-items: center; margin: 0.5rem 0; flex-wrap: wrap; }
.ssd-study .position { flex: 1; min-width: 8rem; height: 0.5rem; background: #ddd; border-radius: 0.25rem; }
.ssd-study .position > div { height: 100%; width: 0; background: #4C72B0; border-radius: 0.25rem; }
.ssd-study .condition { display: grid; grid-template-columns: 8rem 7rem 1fr 2.5rem 13rem; gap: 0.6rem;
  align-items: center; padding: 0.35rem 0; border-bottom: 1px solid #eee; }
.ssd-study button { padding: 0.35rem 0.8rem; border: 1px solid #999; border-radius: 0.4rem; background: #f6f6f6;
  cursor: pointer; font: inherit; }
.ssd-study button.active { background: #4C72B0; color: white; border-color: #4C72B0; }
.ssd-study button.primary { background: #DD8452; color: white; border-color: #DD8452; }
.ssd-study button:disabled { opacity: 0.5; cursor: not-allowed; }
.ssd-study input[type=range] { width: 100%; }
.ssd-study .state { font-size: 0.85rem; }
.ssd-study .message { color: #b03a2e; font-size: 0.9rem; min-height: 1.2em; }
.ssd-study .choices { margin: 0.8rem 0; display: flex; gap: 1.2rem; flex-wrap: wrap; align-items: center; }
.ssd-study .code { font-family: monospace; font-size: 1.4rem; font-weight: bold; letter-spacing: 0.1rem; }
.ssd-study .submit-row { display: flex; gap: 1rem; align-items: center; margin-top: 1rem; }
"""

JS = r"""
const box = element.querySelector('#ssd-study');
const query = new URLSearchParams(window.location.search);
const studyName = query.get('study') || '';
const HEARD_SHARE = 0.9;
let page = null, audios = {}, active = null, heard = new Set(), scores = {}, choice = null, busy = false;
let looping = true, ticker = null, ended = new Set(), clipUrls = [];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (value === true) node.setAttribute(key, '');
    else if (value !== false && value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}
const storageKey = 'ssd-demo-study:' + studyName;  // per link, so a reload of the same link resumes
function remember(payload) {
  try { if (payload.token) localStorage.setItem(storageKey, payload.token); } catch (e) {}
}
function stopAudio() {
  for (const audio of Object.values(audios)) { audio.pause(); audio.removeAttribute('src'); audio.load(); }
  for (const url of clipUrls) URL.revokeObjectURL(url);
  audios = {}; active = null; clipUrls = [];
  if (ticker) { clearInterval(ticker); ticker = null; }
}
async function loadClip(label, audio) {
  // Through the server, which records the fetch: a play of a clip never fetched does not count.
  const trial = page.trial;
  let result;
  try { result = await server.study_clip({session: page.session, trial: trial, label: label}); }
  catch (e) { result = {refused: 'Sample ' + label + ' could not be loaded: reload the page.'}; }
  if (!page || page.trial !== trial || audios[label] !== audio) return;  // another trial is shown meanwhile
  if (!result.wav) { say('#study-status', result.refused || 'Sample ' + label + ' could not be loaded.'); return; }
  const bytes = Uint8Array.from(atob(result.wav), ch => ch.charCodeAt(0));
  const url = URL.createObjectURL(new Blob([bytes], {type: 'audio/wav'}));
  clipUrls.push(url);
  audio.src = url;
  const button = box.querySelector('[data-play="' + label + '"]');
  if (button) button.disabled = false;
}
function show(payload) {
  if (payload.refused && payload.state === undefined) { say('#study-status', payload.refused); return; }
  stopAudio();
  page = payload; remember(payload);
  box.replaceChildren();
  if (payload.title) box.append(el('h2', {text: payload.title}));
  if (payload.state === 'closed') box.append(el('p', {id: 'study-closed', text: payload.message}));
  else if (payload.state === 'start') showStart(payload);
  else if (payload.state === 'done') showDone(payload);
  else showTrial(payload);
}
function say(selector, text) { const node = box.querySelector(selector); if (node) node.textContent = text || ''; }

function showStart(payload) {
  const rater = el('input', {id: 'study-rater', type: 'text', maxlength: '64',
    placeholder: 'leave empty to stay anonymous',
    value: query.get('rater') || query.get('PROLIFIC_PID') || ''});
  const start = el('button', {id: 'study-start', class: 'primary', text: 'Start', onclick: async () => {
    start.disabled = true;
    try {
      const next = await server.study_start({study: studyName, rater: rater.value});
      if (next.refused) { say('#study-status', next.refused); start.disabled = false; } else show(next);
    } catch (e) { say('#study-status', 'The server did not answer; please try again.'); start.disabled = false; }
  }});
  box.append(el('p', {class: 'instructions', text: payload.instructions || ''}),
    el('label', {text: 'Your rater id (optional): '}, rater), el('div', {class: 'submit-row'}, start,
    el('span', {id: 'study-status', class: 'message'})));
}

function showDone(payload) {
  const done = el('div', {id: 'study-done'}, el('p', {text: 'Thank you! All ' + payload.total +
    ' trials are done and your answers are saved.'}));
  if (payload.code) done.append(el('p', {text: 'Your completion code (enter it where the study asked you to):'}),
    el('p', {id: 'study-code', class: 'code', text: payload.code}));
  box.append(done);
}

function conditionState(label) {
  return heard.has(label) ? 'heard' : 'play to the end';
}
function refresh() {
  for (const c of page.conditions) {
    const row = box.querySelector('[data-row="' + c.label + '"]');
    if (!row) continue;
    row.querySelector('[data-play]').classList.toggle('active', c.label === active);
    const state = row.querySelector('.state');
    const reference = ended.has(c.label) ? 'reference, played' : 'reference';
    if (state) state.textContent = c.must_play ? conditionState(c.label) : reference;
    const slider = row.querySelector('input[type=range]');
    if (slider) slider.disabled = !heard.has(c.label);
  }
  const unlocked = page.conditions.filter(c => c.must_play).every(c => heard.has(c.label));
  box.querySelectorAll('input[name=study-choice]').forEach(i => { i.disabled = !unlocked; });
  box.querySelectorAll('input[name=study-mos]').forEach(i => { i.disabled = !unlocked; });
  const playing = active && audios[active] && !audios[active].paused;
  say('#study-pause', playing ? 'Pause' : 'Play');
}
function heardShare(audio) {
  let total = 0;
  for (let i = 0; i < audio.played.length; i++) total += audio.played.end(i) - audio.played.start(i);
  return audio.duration > 0 ? total / audio.duration : 0;
}
async function reportPlay(label) {
  const trial = page.trial;
  try {
    const result = await server.study_played({session: page.session, trial: trial, label: label});
    if (!page || page.trial !== trial) return;
    if (result.played) {
      heard = new Set(result.played); say('[data-message="' + label + '"]', ''); say('#study-status', '');
      if (page.conditions.every(c => !c.must_play || heard.has(c.label))) {
        say('[data-message="study-choice"]', ''); say('[data-message="study-mos"]', '');
      }
    }
    else say('#study-status', result.refused);
  } catch (e) { say('#study-status', 'The server did not answer; play the sample again.'); }
  refresh();
}
function select(label) {
  const next = audios[label];
  const previous = active ? audios[active] : null;
  if (previous && previous !== next) {
    const position = previous.currentTime;
    previous.pause();
    if (next.duration > 0) next.currentTime = Math.min(position, Math.max(0, next.duration - 0.02));
  }
  active = label;
  next.play().catch(() => {});
  refresh();
}
function onEnded(label, audio, condition) {
  if (label !== active) return;
  ended.add(label);
  if (condition.must_play && !heard.has(label) && heardShare(audio) >= HEARD_SHARE) reportPlay(label);
  audio.currentTime = 0;
  if (looping) audio.play().catch(() => {}); else refresh();
}
function conditionRow(c) {
  const row = el('div', {class: 'condition', 'data-row': c.label});
  row.append(el('button', {'data-play': c.label, text: c.label === 'Reference' ? 'Reference' : 'Sample ' + c.label,
    disabled: true, onclick: () => select(c.label)}), el('span', {class: 'state muted'}));
  if (page.kind === 'mushra' && c.rated) {
    const value = el('span', {'data-value': c.label, text: '-'});
    const slider = el('input', {type: 'range', min: String(page.scale[0]), max: String(page.scale[1]), step: '1',
      value: String(Math.round((page.scale[0] + page.scale[1]) / 2)), 'data-score': c.label, disabled: true,
      'aria-label': 'Score of sample ' + c.label, oninput: () => {
        scores[c.label] = Number(slider.value); value.textContent = slider.value;
        say('[data-message="' + c.label + '"]', '');
      }});
    row.append(slider, value, el('span', {class: 'message', 'data-message': c.label}));
  } else {
    row.append(el('span'), el('span'), el('span'));
  }
  return row;
}
function choiceGroup(name, options, legend) {
  const group = el('div', {class: 'choices', 'data-group': name}, el('span', {text: legend}));
  for (const [value, text] of options) {
    const input = el('input', {type: 'radio', name: name, value: String(value), disabled: true, onchange: () => {
      choice = value; say('[data-message="' + name + '"]', '');
    }});
    group.append(el('label', {}, input, document.createTextNode(' ' + text)));
  }
  group.append(el('span', {class: 'message', 'data-message': name}));
  return group;
}
function showTrial(payload) {
  heard = new Set(payload.played); ended = new Set(); scores = {}; choice = null; busy = false;
  box.append(el('p', {id: 'study-progress', text: 'Trial ' + payload.number + ' of ' + payload.total}),
    el('p', {class: 'instructions', text: payload.instructions}),
    el('p', {class: 'sentence', text: 'Sentence: ' + payload.text}));
  const bar = el('div');
  const loop = el('input', {id: 'study-loop', type: 'checkbox', checked: looping,
    onchange: () => { looping = loop.checked; }});
  box.append(el('div', {class: 'transport'},
    el('button', {id: 'study-pause', text: 'Play', onclick: () => {
      const label = active || payload.conditions[0].label;
      if (active && !audios[active].paused) { audios[active].pause(); refresh(); } else select(label);
    }}),
    el('button', {id: 'study-stop', text: 'Stop', onclick: () => {
      if (active) { audios[active].pause(); audios[active].currentTime = 0; } refresh();
    }}),
    el('label', {}, loop, document.createTextNode(' Loop')), el('div', {class: 'position'}, bar)));
  for (const c of payload.conditions) {
    const audio = new Audio();
    audio.preload = 'auto';
    audio.dataset.clip = c.label;  // in the page (no controls, so unseen) for scripts that check the player
    audio.addEventListener('ended', () => onEnded(c.label, audio, c));
    audio.addEventListener('error', () => say('#study-status', c.label + ' could not be loaded: reload the page.'));
    audio.addEventListener('play', refresh);
    audio.addEventListener('pause', refresh);
    audios[c.label] = audio;
    box.append(conditionRow(c), audio);
    loadClip(c.label, audio);
  }
  ticker = setInterval(() => {
    const audio = active && audios[active];
    bar.style.width = audio && audio.duration > 0 ? (100 * audio.currentTime / audio.duration) + '%' : '0';
  }, 100);
  if (payload.kind === 'mos') box.append(choiceGroup('study-mos', [[1, '1 bad'], [2, '2 poor'], [3, '3 fair'],
    [4, '4 good'], [5, '5 excellent']], 'Naturalness:'));
  if (payload.kind === 'ab') box.append(choiceGroup('study-choice', [['A', 'A'], ['B', 'B'], ['none', 'No preference']],
    'Which sample sounds more natural?'));
  if (payload.kind === 'abx') box.append(choiceGroup('study-choice', [['A', 'X is A'], ['B', 'X is B']], 'X is:'));
  const submit = el('button', {id: 'study-submit', class: 'primary', text: 'Submit', onclick: () => send(submit)});
  box.append(el('div', {class: 'submit-row'}, submit, el('span', {id: 'study-status', class: 'message'})));
  refresh();
}
function missing() {
  let problems = 0;
  const mark = (key, text) => { say('[data-message="' + key + '"]', text); problems += 1; };
  if (page.kind === 'mushra') {
    for (const c of page.conditions.filter(c => c.rated)) {
      if (!heard.has(c.label)) mark(c.label, 'Play sample ' + c.label + ' to the end first.');
      else if (!(c.label in scores)) mark(c.label, 'Move this slider to rate sample ' + c.label + '.');
    }
  } else if (choice === null) {
    const unheard = page.conditions.filter(c => c.must_play && !heard.has(c.label)).map(c => c.label);
    const group = page.kind === 'mos' ? 'study-mos' : 'study-choice';
    mark(group, unheard.length ? 'Play ' + unheard.join(', ') + ' to the end first.' :
      (page.kind === 'mos' ? 'Choose a score.' : 'Choose an answer.'));
  }
  return problems;
}
function answer() {
  if (page.kind === 'mushra') return {scores: Object.fromEntries(Object.entries(scores))};
  if (page.kind === 'mos') return {score: choice};
  return {choice: choice};
}
async function send(button) {
  if (busy) return;
  if (missing()) { say('#study-status', 'Something is missing: see the message beside it.'); return; }
  busy = true; button.disabled = true; say('#study-status', '');
  try {
    const next = await server.study_submit({session: page.session, trial: page.trial, answer: answer()});
    if (next.refused) { say('#study-status', next.refused); busy = false; button.disabled = false; return; }
    show(next);
  } catch (e) {
    say('#study-status', 'The server did not answer; please submit again.'); busy = false; button.disabled = false;
  }
}
(async () => {
  let token = '';
  try { token = localStorage.getItem(storageKey) || ''; } catch (e) {}
  try { show(await server.study_open({study: studyName, token: token})); }
  catch (e) { box.replaceChildren(el('p', {text: 'The listening test could not be loaded; please reload the page.'})); }
})();
"""
