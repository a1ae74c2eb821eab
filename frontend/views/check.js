// The visual before/after check of one operation, drawn from the verification stored with it
// (no second read of the run): what the policy touched per tag (the samples the dashboard shows
// on each side, histogram distributions overlaid, graphs, profile sessions and traces removed or
// kept), scalars as one compact row per tag with a chart on demand, per-category bars before and
// after, and the verification table.

import {button, bytes, clear, el, fidelityList, plural, when} from './common.js';
import {fetchJSON, query} from '../model.js';
import {distributionPoints, overlayChart} from './charts.js';
import {restoreFlow} from './reduce.js';
import {categoryBars} from './run.js';

function sameSeries(a, b) {
  if (!a || !b || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i][0] !== b[i][0] || String(a[i][1]) !== String(b[i][1])) return false;
  }
  return true;
}

const PLUGIN_TITLES = {
  images: 'Images', audio: 'Audio', histograms: 'Histograms and distributions', pr_curves: 'PR curves',
  text: 'Text', hparams: 'HParams', mesh: 'Meshes', custom_scalars: 'Custom scalars',
  graph_keras_model: 'Keras model graph', graph_run_metadata: 'Run metadata', graph_run_metadata_graph: 'Traced graphs',
  graph_tagged_run_metadata: 'Tagged run metadata', graphs: 'Run graph (as the Graphs dashboard reads it)',
};

function stepsText(shown) {
  return shown.length ? (shown.length <= 6 ? 'steps ' + shown.join(', ') : shown.length + ' steps, ' + shown[0] + '–' + shown[shown.length - 1]) : 'none';
}

const MAX_THUMB_STEPS = 12;
// every thumbnail is one read of the run's event files on the server: the first tags get
// pictures, the rest the same/different strips
const MAX_THUMB_TAGS = 8;

function sampleUrl(opId, side, plugin, tag, step, index) {
  return './sample?' + new URLSearchParams({op: opId, side, plugin, tag, step: String(step), index: String(index || 0)});
}

// Thumbnails load at once when the check opens (never lazily: a lazy image below the fold stayed an
// empty box under "same ✓"), a few at a time (each is a read of the run on the server), each box
// showing a spinner until its picture is decoded, or why it cannot be shown. Loaded pictures are
// kept per operation, so a re-render (a job's progress redraws the page) shows them at once.
const MAX_PARALLEL_SAMPLES = 4;
const samples = {op: null, done: new Map(), pending: new Map(), gone: {}, queue: [], running: 0};

function resetSamples(opId) {
  if (samples.op === opId) return;
  for (const r of samples.done.values()) if (r.src) URL.revokeObjectURL(r.src);
  Object.assign(samples, {op: opId, done: new Map(), pending: new Map(), gone: {}, queue: []});
}

function pump() {
  while (samples.running < MAX_PARALLEL_SAMPLES && samples.queue.length) {
    const job = samples.queue.shift();
    samples.running++;
    job().finally(() => {
      samples.running--;
      pump();
    });
  }
}

async function fetchSample(opId, side, url) {
  if (samples.gone[side]) return {error: samples.gone[side]};
  let response;
  try {
    response = await fetch(url, {credentials: 'same-origin'});
  } catch (e) {
    return {error: 'TensorBoard is not reachable (' + e.message + ')'};
  }
  if (!response.ok) {
    let msg = response.status + ' ' + response.statusText;
    try {
      msg = (await response.json()).error || msg;
    } catch (e) {
      // not JSON: the status says it
    }
    // 410: this side is gone for the whole operation (restored, or its backup purged)
    if (response.status === 410 && samples.op === opId) samples.gone[side] = msg;
    return {error: msg};
  }
  return {src: URL.createObjectURL(await response.blob())};
}

/** The picture at `url` as {src} or {error}; each URL fetched once per operation. */
function loadSample(opId, side, url) {
  resetSamples(opId);
  if (samples.done.has(url)) return Promise.resolve(samples.done.get(url));
  if (!samples.pending.has(url)) {
    samples.pending.set(url, new Promise((resolve) => {
      samples.queue.push(() => fetchSample(opId, side, url).then((r) => {
        if (samples.op === opId) samples.done.set(url, r);
        resolve(r);
      }));
      pump();
    }));
  }
  return samples.pending.get(url);
}

/** Why a side of an operation's samples cannot be shown at all, or null. */
function sideGone(op, side) {
  if (side === 'after' && op.restored_by) {
    return 'The run was restored (' + op.restored_by + '): the reduced files exist no more.';
  }
  if (side === 'before' && op.backup_purged && !op.restored_by) {
    return 'The backup was purged: the original files exist no more.';
  }
  return null;
}

function thumbCell(ctx, tag, s, side, note) {
  const step = s.step;
  const label = tag + ' step ' + step + ' (' + side + ')';
  if (!s[side]) return el('span', {class: 'thumb absent', title: 'step ' + step + ': not shown', text: '—', dataset: {step, side}});
  const gone = sideGone(ctx.op, side);
  if (gone) return el('span', {class: 'thumb absent unavailable', title: gone, text: '×', dataset: {step, side}});
  const title = 'step ' + step + ' · ' + plural(s[side], 'sample') + (s.same ? ' · the same bytes on both sides' : '');
  const picture = (src) => el('img', {class: 'thumb loaded' + (s.same ? ' same' : ''), alt: label, title, src, dataset: {step, side}});
  const failed = (msg) => {
    note(msg);
    return el('span', {class: 'thumb absent failed', title: msg, text: '!', dataset: {step, side}});
  };
  const url = sampleUrl(ctx.op.op_id, side, 'images', tag, step, 0);
  resetSamples(ctx.op.op_id);
  const known = samples.done.get(url);
  if (known) return known.src ? picture(known.src) : failed(known.error);
  const box = el('span', {class: 'thumb loading', title: 'loading ' + label + '…', role: 'img', 'aria-label': 'loading',
    dataset: {step, side}}, el('span', {class: 'spinner', 'aria-hidden': 'true'}));
  loadSample(ctx.op.op_id, side, url).then((r) => {
    if (!r.src) {
      box.replaceWith(failed(r.error));
      return;
    }
    const img = picture(r.src);
    // swapped in once decoded, so no empty box shows between the spinner and the picture
    (img.decode ? img.decode() : Promise.resolve()).catch(() => null).then(() => box.replaceWith(img));
  });
  return box;
}

/** Images: per shown step the first sample, original above reduced, served from the vault and the run. */
function thumbnails(ctx, tag, e) {
  const shown = (e.samples || []).slice(-MAX_THUMB_STEPS);
  const notes = el('div', {class: 'thumb-notes muted small'});
  const said = new Set();
  const note = (msg) => {
    if (said.has(msg)) return;
    said.add(msg);
    notes.appendChild(el('div', {class: 'thumb-note', text: msg}));
  };
  for (const side of ['before', 'after']) {
    const gone = sideGone(ctx.op, side);
    if (gone && shown.some((s) => s[side])) note((side === 'before' ? 'Original: ' : 'Reduced: ') + gone);
  }
  if (ctx.op.restored_by && !sideGone(ctx.op, 'before')) note('Original: as the restored run holds it again.');
  const row = (side) => el('div', {class: 'thumb-row'},
    el('span', {class: 'strip-label muted', text: side === 'before' ? 'original' : 'reduced'}),
    shown.map((s) => thumbCell(ctx, tag, s, side, note)));
  return el('div', {class: 'thumbs'}, row('before'), row('after'),
    el('div', {class: 'thumb-row steps muted'}, el('span', {class: 'strip-label', text: 'step'}),
      shown.map((s) => el('span', {class: 'thumb-step', text: String(s.step)}))), notes);
}

/** Audio: the last shown step's first clip on each side, playable. */
function audioPair(ctx, tag, e) {
  const last = (e.samples || []).filter((s) => s.before || s.after).slice(-1)[0];
  if (!last) return null;
  const player = (side) => {
    const gone = sideGone(ctx.op, side);
    if (!last[side]) return el('span', {class: 'muted', text: 'not shown'});
    if (gone) return el('span', {class: 'muted unavailable', text: gone});
    return el('audio', {controls: true, preload: 'none', src: sampleUrl(ctx.op.op_id, side, 'audio', tag, last.step, 0), dataset: {side}});
  };
  return el('div', {class: 'audio-pair'},
    el('span', {class: 'strip-label muted', text: 'original'}), player('before'),
    el('span', {class: 'strip-label muted', text: 'reduced'}), player('after'),
    el('span', {class: 'muted small', text: 'step ' + last.step}));
}

/** Per shown step, the samples on each side: a strip of boxes, original above reduced. */
function sampleStrips(e) {
  const samples = e.samples || [];
  const row = (side) => el('div', {class: 'strip-row'},
    el('span', {class: 'strip-label muted', text: side === 'before' ? 'original' : 'reduced'}),
    samples.map((s) => {
      const n = s[side];
      const cls = 'sample' + (n ? '' : ' absent') + (n && s.same ? ' same' : '') + (n && !s.same && s.before && s.after ? ' differs' : '');
      return el('span', {class: cls, dataset: {step: s.step, side},
        title: 'step ' + s.step + ': ' + (n ? plural(n, 'sample') : 'not shown') + (n && s.same ? ' (the same bytes on both sides)' : '')},
      n ? String(n) : '·');
    }));
  return el('div', {class: 'strips'}, row('before'), row('after'),
    el('div', {class: 'strip-row steps muted'}, el('span', {class: 'strip-label', text: 'step'}),
      samples.map((s) => el('span', {class: 'sample-step', text: String(s.step)}))));
}

function tagCard(plugin, tag, e, ctx) {
  const same = e.same_shown;
  const [pb, pa] = e.points;
  const [sb, sa] = e.shown;
  const card = el('div', {class: 'tag-card' + (same ? ' identical' : ' differs'), dataset: {plugin, tag}},
    el('div', {class: 'tag-head'},
      el('span', {class: 'mono tag', text: tag}),
      el('span', {class: same ? 'ok' : 'warn-text', text: same ? 'dashboard shows the same ✓' : 'dashboard shows ' + sa.length + ' of ' + sb.length + ' steps'})),
    el('div', {class: 'muted small', text: 'stored ' + pb + ' → ' + pa + ' points · shown: ' + stepsText(sb) +
      (same ? '' : ' → ' + stepsText(sa))}));
  if (e.samples && plugin === 'images' && ctx) card.appendChild(thumbnails(ctx, tag, e));
  else if (e.samples) card.appendChild(sampleStrips(e));
  if (e.samples && plugin === 'audio' && ctx) card.appendChild(audioPair(ctx, tag, e));
  if (e.distribution && (e.distribution.before || e.distribution.after)) {
    card.appendChild(el('div', {class: 'muted small', text: 'distribution at step ' + e.distribution.step + ', original and reduced overlaid'}));
    card.appendChild(overlayChart(distributionPoints(e.distribution.before), distributionPoints(e.distribution.after),
      {width: 420, height: 150, xLabel: 'value', stepped: true}));
  }
  return card;
}

function touchedSections(v, op) {
  const out = [];
  const summaries = v.tag_summaries || {};
  const order = Object.keys(summaries).sort((a, b) => (a === 'images' ? -3 : a === 'audio' ? -2 : a === 'histograms' ? -1 : 0) -
    (b === 'images' ? -3 : b === 'audio' ? -2 : b === 'histograms' ? -1 : 0));
  for (const plugin of order) {
    const p = summaries[plugin];
    const tags = Object.entries(p.tags || {});
    if (!tags.length) continue;
    const same = tags.filter(([, e]) => e.same_shown).length;
    const section = el('section', {class: 'touched', dataset: {plugin}},
      el('h3', {}, (PLUGIN_TITLES[plugin] || plugin) + ' ',
        el('span', {class: 'legend-inline ' + (same === tags.length ? 'ok' : ''),
          text: same + ' of ' + plural(tags.length, 'tag') + ' shown the same' + (p.tag_count > tags.length ? ' (first ' + tags.length + ' of ' + p.tag_count + ' listed)' : '')})),
      el('div', {class: 'tag-cards'}, tags.map(([tag, e], i) => tagCard(plugin, tag, e, i < MAX_THUMB_TAGS ? {op} : null))));
    out.push(section);
  }
  return out;
}

// A run whose event files the reduce neither rewrote nor removed (profile data only) is verified
// by identity: each event file's sha256 before the backup, at the verification and after the swap;
// no reader is started, so no tag summaries are stored. The check says so first, then shows the
// samples as TensorBoard's own image and audio routes serve them from those unchanged files.
function identitySection(v, op) {
  const files = v.unchanged || [];
  const changed = v.ok === false;
  const head = files.length ? plural(files.length, 'event file') + (changed ? ' — changed since hashed' : ' unchanged (sha256)')
    : 'No event file before or after: profile data only';
  return el('section', {class: 'identity-proof' + (changed ? ' bad' : ''), dataset: {files: files.length}},
    el('h3', {class: 'identity-title', text: (changed ? '✗ ' : '✓ ') + head}),
    el('p', {text: files.length ? 'Neither rewritten nor removed by this reduction: each was hashed under the run\'s lock ' +
      'before the backup, again at the verification and once more after the swap. TensorBoard\'s readers read the very ' +
      'same bytes before and after, so every scalar, image, audio clip, histogram and text is what it was; no reader was ' +
      'started (reading a file against itself proves nothing more).' : 'Only profile data changed; the plan says what stays of it.'}),
    files.length ? el('ul', {class: 'identity-files'}, files.slice(0, 20).map((f) => el('li', {class: 'mono small',
      text: f.path.split('/').pop() + ' · sha256 ' + f.sha256.slice(0, 16) + '…', title: f.path + '\nsha256 ' + f.sha256}))) : null,
    files.length > 20 ? el('p', {class: 'muted small', text: '… and ' + plural(files.length - 20, 'more file')}) : null,
    op.restored_by ? el('p', {class: 'muted small', text: 'Restored since (' + op.restored_by + '): these files were ' +
      'never changed, so the run shows the same pictures as before and after.'}) : null);
}

// what TensorBoard's own routes serve for the unchanged run: per operation, fetched once
const unchangedShown = {op: null, promise: null};

async function tbSeries(plugin, run, tag) {
  // TensorBoard's own dashboard route (…/data/plugin/<plugin>/<plugin>), beside this tab's
  const rows = await fetchJSON('../' + plugin + '/' + plugin + query({run, tag, sample: 0}));
  return Array.isArray(rows) ? rows : [];
}

function loadUnchangedShown(op) {
  if (unchangedShown.op === op.op_id) return unchangedShown.promise;
  unchangedShown.op = op.op_id;
  unchangedShown.promise = (async () => {
    const d = await fetchJSON('run' + query({run: op.run}));
    const tagsOf = (name) => ((d.run.categories || []).find((c) => c.name === name) || {}).tags || [];
    const out = {};
    for (const plugin of ['images', 'audio']) {
      const tags = tagsOf(plugin);
      out[plugin] = {tag_count: tags.length, tags: []};
      for (const tag of tags.slice(0, MAX_THUMB_TAGS)) {
        try {
          out[plugin].tags.push({tag, rows: (await tbSeries(plugin, op.run, tag)).slice(-MAX_THUMB_STEPS)});
        } catch (e) {
          out[plugin].tags.push({tag, rows: [], error: e.message});
        }
      }
    }
    return out;
  })();
  unchangedShown.promise.catch(() => {
    if (unchangedShown.op === op.op_id) unchangedShown.op = null;  // try again on the next render
  });
  return unchangedShown.promise;
}

function unchangedThumb(op, tag, row) {
  const step = row.step;
  const label = tag + ' step ' + step;
  const url = '../images/individualImage?' + row.query;
  const picture = (src) => el('img', {class: 'thumb loaded same', alt: label, src, dataset: {step, side: 'unchanged'},
    title: 'step ' + step + ' · the same bytes before and after (the event file is unchanged)'});
  const failed = (msg) => el('span', {class: 'thumb absent failed', title: msg, text: '!', dataset: {step, side: 'unchanged'}});
  resetSamples(op.op_id);
  const known = samples.done.get(url);
  if (known) return known.src ? picture(known.src) : failed(known.error);
  const box = el('span', {class: 'thumb loading', title: 'loading ' + label + '…', role: 'img', 'aria-label': 'loading',
    dataset: {step, side: 'unchanged'}}, el('span', {class: 'spinner', 'aria-hidden': 'true'}));
  loadSample(op.op_id, 'unchanged', url).then((r) => {
    if (!r.src) {
      box.replaceWith(failed(r.error));
      return;
    }
    const img = picture(r.src);
    (img.decode ? img.decode() : Promise.resolve()).catch(() => null).then(() => box.replaceWith(img));
  });
  return box;
}

function unchangedCard(op, plugin, t) {
  const steps = t.rows.map((r) => r.step);
  const card = el('div', {class: 'tag-card identical', dataset: {plugin, tag: t.tag}},
    el('div', {class: 'tag-head'}, el('span', {class: 'mono tag', text: t.tag}),
      el('span', {class: 'ok', text: 'the same before and after ✓'})),
    el('div', {class: 'muted small', text: 'shown by TensorBoard: ' + stepsText(steps) + ' (the event file is unchanged)'}));
  if (t.error || !t.rows.length) {
    card.appendChild(el('div', {class: 'muted small thumb-note', text: 'No ' + (plugin === 'images' ? 'picture' : 'clip') +
      ' to show: TensorBoard\'s ' + plugin + ' dashboard has ' + (t.error ? 'none for this tag yet (' + t.error + ')' : 'no step of this tag') +
      '. The bytes are unchanged all the same.'}));
    return card;
  }
  if (plugin === 'images') {
    card.appendChild(el('div', {class: 'thumbs'},
      el('div', {class: 'thumb-row'}, el('span', {class: 'strip-label muted', text: 'unchanged'}), t.rows.map((r) => unchangedThumb(op, t.tag, r))),
      el('div', {class: 'thumb-row steps muted'}, el('span', {class: 'strip-label', text: 'step'}),
        steps.map((st) => el('span', {class: 'thumb-step', text: String(st)})))));
  } else {
    const last = t.rows[t.rows.length - 1];
    card.appendChild(el('div', {class: 'audio-pair'},
      el('span', {class: 'strip-label muted', text: 'unchanged'}),
      el('audio', {controls: true, preload: 'none', src: '../audio/individualAudio?' + last.query, dataset: {side: 'unchanged'}}),
      el('span', {class: 'muted small', text: 'step ' + last.step})));
  }
  return card;
}

/** The image and audio sections of an unchanged run, filled in from TensorBoard's own routes. */
function unchangedSections(op) {
  const out = [];
  for (const plugin of ['images', 'audio']) {
    const cards = el('div', {class: 'tag-cards'});
    const title = el('span', {class: 'legend-inline ok', text: 'looking at what TensorBoard shows…'});
    const section = el('section', {class: 'touched unchanged-samples', dataset: {plugin}},
      el('h3', {}, PLUGIN_TITLES[plugin] + ' ', title), cards);
    loadUnchangedShown(op).then((d) => {
      const p = d[plugin];
      if (!p.tag_count) {
        section.remove();
        return;
      }
      title.textContent = plural(p.tag_count, 'tag') + ', the same before and after' +
        (p.tag_count > p.tags.length ? ' (first ' + p.tags.length + ' shown)' : '');
      cards.append(...p.tags.map((t) => unchangedCard(op, plugin, t)));
    }, (e) => {
      title.textContent = '';
      cards.appendChild(el('p', {class: 'muted', text: 'What TensorBoard shows of this run cannot be listed (' + e.message +
        '); its event files are unchanged all the same.'}));
    });
    out.push(section);
  }
  return out;
}

function graphSection(v) {
  const g = v.graph || {};
  if (!g.before && !g.after) return null;
  const n = g.nodes || [];
  const nodes = (k) => (typeof n[k] === 'number' ? plural(n[k], 'node') : 'no graph');
  const text = g.before === g.after ? 'run graph identical ✓ (' + nodes(0) + ')'
    : g.after ? 'run graph changed: ' + nodes(0) + ' → ' + nodes(1) : 'run graph removed (it had ' + nodes(0) + ')';
  return el('section', {class: 'touched', dataset: {plugin: 'graphs'}}, el('h3', {text: 'Graphs'}),
    el('p', {class: g.before === g.after ? 'ok' : 'warn-text', text: text}));
}

function isProfile(path) {
  return /(^|\/)plugins\/profile\//.test(path) || /\.pt\.trace\.json(\.gz)?$/.test(path);
}

function profileSection(c) {
  const files = (c.files || []).filter((f) => isProfile(f.path || ''));
  if (!files.length) return null;
  const removed = files.filter((f) => f.action !== 'compress');
  const compressed = files.filter((f) => f.action === 'compress');
  const created = (c.created || []).filter((f) => isProfile(f.path || ''));
  const list = (title, items, cls) => items.length ? el('div', {class: 'profile-list ' + cls},
    el('strong', {text: title + ' (' + items.length + ')'}),
    el('ul', {}, items.map((f) => el('li', {class: 'mono small', text: f.path + (f.size !== undefined ? ' · ' + bytes(f.size) : '')})))) : null;
  return el('section', {class: 'touched', dataset: {plugin: 'profile'}}, el('h3', {text: 'Profile sessions and traces'}),
    list('Removed', removed, 'removed'), list('Compressed (originals)', compressed, 'compressed'), list('Kept as new files', created, 'kept'));
}

function scalarRows(series) {
  const tags = Object.keys(series);
  const table = el('table', {class: 'table scalars-table'},
    el('tbody', {}, tags.map((t) => {
      const s = series[t];
      const identical = sameSeries(s.before, s.after);
      const cell = el('td', {class: 'chart-cell'});
      const toggle = button('Chart', () => {
        if (cell.firstChild) {
          clear(cell);
          toggle.textContent = 'Chart';
        } else {
          cell.appendChild(overlayChart(s.before, s.after, {width: 640, height: 200}));
          toggle.textContent = 'Hide';
        }
      }, {kind: 'flat', title: 'Original and reduced curves, overlaid'});
      toggle.classList.add('show-chart');
      return [el('tr', {class: 'scalar-row' + (identical ? ' identical' : ' differs'), dataset: {tag: t}},
        el('td', {class: 'mono', text: t}),
        el('td', {class: identical ? 'ok' : 'bad', text: identical ? 'identical, ' + plural((s.before || []).length, 'point')
          : (s.before || []).length + ' → ' + (s.after || []).length + ' points, differs'}),
        el('td', {class: 'num'}, toggle)),
      el('tr', {class: 'chart-row'}, el('td', {colspan: 3}, cell))];
    })));
  return table;
}

export class CheckView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.el = el('section', {class: 'check-page'});
    this._last = {};
    this._restoreButton = null;
  }

  /** The restore button follows the actions and the jobs without drawing the page again. */
  _syncRestore() {
    if (!this._restoreButton) return;
    const st = this.model.state;
    const lock = !st.actions.enabled ? 'Actions are off: ' + st.actions.reasons.join(' ')
      : this.model.activeJobFor(this._restoreButton.run) ? 'A job is running on this run' : null;
    const b = this._restoreButton.button;
    b.disabled = !!lock;
    b.title = lock || 'Put the original bytes back';
  }

  update(state) {
    this._syncRestore();
    // The page is drawn again only when its check changes: jobs and actions change every poll
    // while a job runs, and drawing it again then reloaded every picture and lost the scroll.
    const key = {c: state.check, e: state.checkError};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    this._restoreButton = null;
    clear(this.el);
    const back = el('a', {href: '#', class: 'back', text: '← Back'});
    back.addEventListener('click', (ev) => {
      ev.preventDefault();
      const st = this.model.state;
      if (st.check && st.selectedRun === st.check.operation.run) this.model.openRun(st.selectedRun);
      else this.model.go('runs');
    });
    this.el.appendChild(back);
    if (state.checkError) {
      this.el.appendChild(el('div', {class: 'banner banner-error', text: state.checkError}));
      return;
    }
    const c = state.check;
    if (!c) {
      this.el.appendChild(el('div', {class: 'empty', text: 'Loading the check of ' + state.checkOp + '…'}));
      return;
    }
    const op = c.operation;
    const v = c.verification || {};
    const ok = v.ok === true && op.outcome === 'verified';
    const head = el('div', {class: 'check-head'},
      el('h2', {}, 'Before/after check — ', el('span', {class: 'mono', text: op.run})),
      el('div', {class: 'check-verdict ' + (ok ? 'ok' : 'bad')},
        ok ? (v.mode === 'unchanged' ? 'Verified ✓ — its event files are unchanged (sha256): TensorBoard reads the very same bytes'
          : v.mode === 'listing' ? 'Verified ✓ — every removed file backed up (the store\'s checksum), no event file rewritten'
          : 'Verified ✓ — TensorBoard\'s readers show the reduced run as the policy promised')
          : (op.outcome === 'rolled_back' ? 'Rolled back: ' + (op.reason || '') : 'Not verified' + (op.reason ? ': ' + op.reason : ''))),
      el('div', {class: 'muted', text: 'Operation ' + op.op_id + ' · policy ' + (op.policy || '—') + ' · ' + when(op.finished_at) +
        ' · ' + bytes(op.bytes_before) + ' → ' + bytes(op.bytes_after) + (op.saved_bytes ? ' (' + bytes(op.saved_bytes) + ' removed from the logdir)' : '') +
        (op.restored_by ? ' · restored by ' + op.restored_by : '')}),
      op.restored_by ? el('div', {class: 'restored-note', text: 'Restored since: the run holds its original bytes again. ' +
        'Below is what this reduction\'s verification saw; the original pictures are read from the restored run.'}) : null);
    if (op.restorable) {
      const rb = button('Restore…', () => restoreFlow(this.model, op, this.onError), {kind: 'flat'});
      rb.classList.add('restore-op');
      this._restoreButton = {button: rb, run: op.run};
      this._syncRestore();
      head.appendChild(rb);
    }
    this.el.appendChild(head);
    const unchanged = v.mode === 'unchanged';
    if (unchanged) this.el.appendChild(identitySection(v, op));  // the proof, right under the verdict

    // per-category bars
    if ((c.category_changes || []).length) {
      this.el.append(el('h3', {text: 'Bytes per category'}), categoryBars(c.category_changes));
    }

    if (unchanged) {
      // proven by identity: the samples as TensorBoard's own routes serve them from those files
      const shown = unchangedSections(op).concat([profileSection(c)].filter(Boolean));
      this.el.appendChild(el('h3', {class: 'touched-title'}, 'What the dashboards show ',
        el('span', {class: 'legend-inline', text: 'the same before and after: the event files are unchanged'})));
      this.el.append(...shown);
    } else {
      // what the policy touched, from the verification's own reads
      const touched = touchedSections(v, op).concat([graphSection(v), profileSection(c)].filter(Boolean));
      if (touched.length) {
        this.el.appendChild(el('h3', {class: 'touched-title'}, 'What the dashboards show, before and after ',
          el('span', {class: 'legend-inline'},
            el('span', {class: 'line-key before'}), ' original ', el('span', {class: 'line-key after'}), ' reduced')));
        this.el.append(...touched);
      }
    }

    // scalars: never changed by any policy; one compact row per tag, a chart on demand
    const series = v.scalar_series || {};
    const tags = Object.keys(series);
    this.el.appendChild(el('h3', {text: 'Scalars'}));
    if (unchanged) {
      this.el.appendChild(el('p', {class: 'ok scalars-unchanged', text: 'Unchanged ✓ — the event files are the same ' +
        'bytes (sha256), so every curve is the one TensorBoard showed before.'}));
    } else if (v.mode === 'listing') {
      // a bucket's reduction that rewrote no event file (files removed, profile files gzipped): no
      // reader started (the store and the hashes checked it)
      this.el.appendChild(el('p', {class: 'muted scalars-not-read', text: 'Not read: this reduction rewrote no event file, ' +
        'so TensorBoard reads the event files it read before.'}));
    } else if (!tags.length) {
      this.el.appendChild(el('p', {class: 'muted', text: 'This run has no scalars.'}));
    } else {
      const same = tags.filter((t) => sameSeries(series[t].before, series[t].after)).length;
      this.el.appendChild(el('p', {class: same === tags.length ? 'ok' : 'bad', text: same + ' of ' + plural(tags.length, 'scalar tag') + ' identical' + (same === tags.length ? ' ✓' : '')}));
      this.el.appendChild(scalarRows(series));
    }
    // verification table
    const checks = v.checks || [];
    this.el.append(el('h3', {text: 'Verification'}),
      checks.length ? el('table', {class: 'table verification'},
        el('tbody', {}, checks.map((ch) => el('tr', {class: ch.ok ? 'ok-row' : 'bad-row'},
          el('td', {class: ch.ok ? 'ok mark' : 'bad mark', text: ch.ok ? '✓' : '✗'}),
          el('td', {text: ch.name}),
          el('td', {text: ch.detail}))))) : el('p', {class: 'muted', text: 'No verification stored with this operation.'}));
    if ((v.failed || []).length) {
      this.el.appendChild(el('div', {class: 'banner banner-error'}, el('strong', {text: 'Failed checks'}), v.failed.map((f) => el('div', {text: f}))));
    }

    if ((c.fidelity || []).length) {
      this.el.append(el('h3', {text: 'What the policy promised'}), fidelityList(c.fidelity, c.fidelity_details));
    }
  }
}
