// The logdir map: a squarified treemap of runs × categories (like WinDirStat's): each run a
// rectangle whose area is its bytes, split into its categories in the colours of the legend.
// Clicking a run opens its page. Plain positioned <div>s: text stays text, no canvas, CSP-safe.

import {bytes, clear, color, el, share} from './common.js';

const HEIGHT = 260;          // px
const MAX_RUNS = 150;        // beyond: one grey "N more runs" cell
const LABEL_H = 15;          // px of a run's name strip, when the run is big enough to show it

function worst(sum, rmin, rmax, side) {
  const s2 = side * side;
  const sum2 = sum * sum;
  return Math.max((s2 * rmax) / sum2, sum2 / (s2 * rmin));
}

/**
 * Squarified treemap layout (Bruls, Huizing, van Wijk 2000). `values` positive, sorted largest
 * first; returns one {x, y, w, h} per value, in order, filling the rectangle exactly.
 */
export function squarify(values, x, y, w, h) {
  const out = new Array(values.length);
  const total = values.reduce((a, b) => a + b, 0);
  if (!total || w <= 0 || h <= 0) return values.map(() => ({x, y, w: 0, h: 0}));
  const scale = (w * h) / total;
  let i = 0;
  while (i < values.length) {
    const side = Math.min(w, h);
    let sum = values[i] * scale;
    let rmin = sum;
    let rmax = sum;
    let ratio = worst(sum, rmin, rmax, side);
    let j = i + 1;
    for (; j < values.length; j++) {
      const a = values[j] * scale;
      const next = worst(sum + a, Math.min(rmin, a), Math.max(rmax, a), side);
      if (next > ratio) break;
      sum += a;
      rmin = Math.min(rmin, a);
      rmax = Math.max(rmax, a);
      ratio = next;
    }
    const thick = sum / side;
    let off = 0;
    for (let k = i; k < j; k++) {
      const len = (values[k] * scale) / thick;
      out[k] = w >= h ? {x, y: y + off, w: thick, h: len} : {x: x + off, y, w: len, h: thick};
      off += len;
    }
    if (w >= h) {
      x += thick;
      w -= thick;
    } else {
      y += thick;
      h -= thick;
    }
    i = j;
  }
  return out;
}

function px(r) {
  return {left: r.x + 'px', top: r.y + 'px', width: Math.max(0, r.w) + 'px', height: Math.max(0, r.h) + 'px'};
}

/** The map of `runs` ({name, total_bytes, categories}); `labels` names categories; `onOpen(run)`. */
export function treemap(runs, total, labels, onOpen, width) {
  const W = Math.max(200, width || 900);
  const box = el('div', {class: 'treemap', role: 'list', 'aria-label': 'Logdir map: runs by size, split by category',
    style: {height: HEIGHT + 'px'}});
  const sorted = runs.filter((r) => r.total_bytes > 0).sort((a, b) => b.total_bytes - a.total_bytes);
  const shown = sorted.slice(0, MAX_RUNS);
  const rest = sorted.slice(MAX_RUNS);
  const items = shown.map((r) => ({run: r, value: r.total_bytes}));
  if (rest.length) items.push({rest, value: rest.reduce((s, r) => s + r.total_bytes, 0)});
  const rects = squarify(items.map((i) => i.value), 0, 0, W, HEIGHT);
  items.forEach((item, n) => {
    const r = rects[n];
    if (item.rest) {
      box.appendChild(el('div', {class: 'tm-run tm-rest', role: 'listitem', style: px(r),
        title: item.rest.length + ' more runs: ' + bytes(item.value)}));
      return;
    }
    const run = item.run;
    const title = run.name + ': ' + bytes(run.total_bytes) + ' (' + share(run.total_bytes, total) + ' of the logdir)';
    const node = el('div', {class: 'tm-run', role: 'listitem', tabindex: '0', title, style: px(r),
      dataset: {run: run.name}, 'aria-label': title});
    const showLabel = r.h >= LABEL_H + 12 && r.w >= 48;
    if (showLabel) node.appendChild(el('div', {class: 'tm-label mono', text: run.name + ' · ' + bytes(run.total_bytes)}));
    const cats = Object.entries(run.categories || {}).filter(([, b]) => b > 0).sort((a, b) => b[1] - a[1]);
    const top = showLabel ? LABEL_H : 0;
    const cells = squarify(cats.map(([, b]) => b), 0, top, r.w - 2, r.h - top - 2);  // inside the 1px border
    cats.forEach(([name, b], k) => {
      node.appendChild(el('div', {class: 'tm-cell', style: Object.assign(px(cells[k]), {background: color(name)}),
        title: run.name + ' · ' + ((labels && labels[name]) || name) + ': ' + bytes(b) + ' (' + share(b, run.total_bytes) + ' of the run)'}));
    });
    const open = () => onOpen(run.name);
    node.addEventListener('click', open);
    node.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        open();
      }
    });
    box.appendChild(node);
  });
  return box;
}

/** A treemap section that lays itself out again when its width changes. */
export class LogdirMap {
  constructor(onOpen) {
    this.onOpen = onOpen;
    this.el = el('div', {class: 'logdir-map'});
    this._args = null;
    this._width = 0;
    if (window.ResizeObserver) {
      new ResizeObserver(() => {
        const w = this.el.clientWidth;
        if (this._args && Math.abs(w - this._width) > 4) this._draw();
      }).observe(this.el);
    }
  }

  render(runs, total, labels) {
    this._args = [runs, total, labels];
    this._draw();
  }

  _draw() {
    clear(this.el);
    this._width = this.el.clientWidth;
    const [runs, total, labels] = this._args;
    if (!runs.length) return;
    this.el.appendChild(treemap(runs, total, labels, this.onOpen, this._width || 900));
  }
}
