// The visual before/after check of one operation, drawn from the verification stored with it
// (no second read of the run): original and reduced curves overlaid for every scalar tag,
// per-category bars before and after, and the verification table.

import {button, bytes, clear, el, svg, when} from './common.js';
import {restoreFlow} from './reduce.js';
import {categoryBars} from './run.js';

const W = 320;
const H = 160;
const PAD = {l: 48, r: 10, t: 10, b: 24};

function finite(points) {
  return (points || []).filter((p) => Array.isArray(p) && typeof p[1] === 'number' && isFinite(p[1]) && isFinite(p[0]));
}

function fmt(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1);
  return String(Number(v.toPrecision(3)));
}

function sameSeries(a, b) {
  if (!a || !b || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i][0] !== b[i][0] || String(a[i][1]) !== String(b[i][1])) return false;
  }
  return true;
}

export function scalarChart(tag, series) {
  const before = finite(series.before);
  const after = finite(series.after);
  const all = before.concat(after);
  const identical = sameSeries(series.before, series.after);
  const card = el('figure', {class: 'chart' + (identical ? ' identical' : ' differs'), dataset: {tag}});
  card.appendChild(el('figcaption', {},
    el('span', {class: 'mono tag', text: tag}),
    el('span', {class: identical ? 'ok' : 'bad', text: identical ? ' identical ✓' :
      ' ' + (series.before || []).length + ' → ' + (series.after || []).length + ' points'})));
  if (!all.length) {
    card.appendChild(el('div', {class: 'muted', text: 'no finite points'}));
    return card;
  }
  let x0 = Math.min(...all.map((p) => p[0]));
  let x1 = Math.max(...all.map((p) => p[0]));
  let y0 = Math.min(...all.map((p) => p[1]));
  let y1 = Math.max(...all.map((p) => p[1]));
  if (x0 === x1) x1 = x0 + 1;
  if (y0 === y1) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  const sx = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
  const sy = (y) => H - PAD.b - ((y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
  const line = (pts) => pts.map((p) => sx(p[0]).toFixed(1) + ',' + sy(p[1]).toFixed(1)).join(' ');
  const g = svg('svg', {viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, class: 'chart-svg', role: 'img',
    'aria-label': tag + ': original and reduced curves' + (identical ? ' (identical)' : '')});
  const grid = [0, 0.5, 1].map((f) => y0 + f * (y1 - y0));
  for (const gy of grid) {
    g.appendChild(svg('line', {x1: PAD.l, x2: W - PAD.r, y1: sy(gy), y2: sy(gy), class: 'grid'}));
    g.appendChild(svg('text', {x: PAD.l - 4, y: sy(gy) + 3, 'text-anchor': 'end', class: 'axis', text: fmt(gy)}));
  }
  g.appendChild(svg('text', {x: PAD.l, y: H - 6, 'text-anchor': 'start', class: 'axis', text: 'step ' + x0}));
  g.appendChild(svg('text', {x: W - PAD.r, y: H - 6, 'text-anchor': 'end', class: 'axis', text: String(x1)}));
  if (before.length) g.appendChild(svg('polyline', {points: line(before), class: 'before'}));
  if (after.length) g.appendChild(svg('polyline', {points: line(after), class: 'after'}));
  if (after.length === 1) g.appendChild(svg('circle', {cx: sx(after[0][0]), cy: sy(after[0][1]), r: 2.5, class: 'after-dot'}));
  card.appendChild(g);
  return card;
}

export class CheckView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.el = el('section', {class: 'check-page'});
    this._last = {};
  }

  update(state) {
    const key = {c: state.check, e: state.checkError, a: state.actions, j: state.jobs};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    clear(this.el);
    const back = el('a', {href: '#', class: 'back', text: '← Back'});
    back.addEventListener('click', (ev) => {
      ev.preventDefault();
      if (state.check && state.selectedRun === state.check.operation.run) this.model.openRun(state.selectedRun);
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
        ok ? 'Verified ✓ — TensorBoard\'s readers show the reduced run as the policy promised'
          : (op.outcome === 'rolled_back' ? 'Rolled back: ' + (op.reason || '') : 'Not verified' + (op.reason ? ': ' + op.reason : ''))),
      el('div', {class: 'muted', text: 'Operation ' + op.op_id + ' · policy ' + (op.policy || '—') + ' · ' + when(op.finished_at) +
        ' · ' + bytes(op.bytes_before) + ' → ' + bytes(op.bytes_after) + (op.saved_bytes ? ' (' + bytes(op.saved_bytes) + ' freed)' : '') +
        (op.restored_by ? ' · restored by ' + op.restored_by : '')}));
    if (op.restorable) {
      const st = this.model.state;
      const lock = !st.actions.enabled ? 'Actions are off: ' + st.actions.reasons.join(' ')
        : this.model.activeJobFor(op.run) ? 'A job is running on this run' : null;
      const rb = button('Restore…', () => restoreFlow(this.model, op, this.onError), {kind: 'flat', disabled: !!lock, title: lock || 'Put the original bytes back'});
      rb.classList.add('restore-op');
      head.appendChild(rb);
    }
    this.el.appendChild(head);

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

    // per-category bars
    if ((c.category_changes || []).length) {
      this.el.append(el('h3', {text: 'Bytes per category'}), categoryBars(c.category_changes));
    }

    // scalar curves
    const series = v.scalar_series || {};
    const tags = Object.keys(series);
    this.el.appendChild(el('h3', {}, 'Scalars: original and reduced, overlaid ',
      el('span', {class: 'legend-inline'},
        el('span', {class: 'line-key before'}), ' original ', el('span', {class: 'line-key after'}), ' reduced')));
    if (!tags.length) {
      this.el.appendChild(el('p', {class: 'muted', text: 'This run has no scalars.'}));
    } else {
      const same = tags.filter((t) => sameSeries(series[t].before, series[t].after)).length;
      this.el.appendChild(el('p', {class: same === tags.length ? 'ok' : 'muted', text: same + ' of ' + tags.length + ' scalar tags identical' + (same === tags.length ? ' ✓' : '')}));
      this.el.appendChild(el('div', {class: 'charts'}, tags.map((t) => scalarChart(t, series[t]))));
    }
    if ((c.fidelity || []).length) {
      this.el.append(el('h3', {text: 'What the policy promised'}), el('ul', {class: 'fidelity'}, c.fidelity.map((l) => el('li', {text: l}))));
    }
  }
}
