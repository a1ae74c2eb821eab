// The logdir map: a squarified treemap of runs × categories (like WinDirStat's): each run a
// rectangle whose area is its bytes, split into its categories in the colours of the legend.
// Clicking a run opens its page. Built from the server's aggregates: on a logdir of many runs the
// rectangles are folders of runs (a click filters the table to one), at most the server's 60 + "other".
// Plain positioned <div>s: text stays text, no canvas, CSP-safe.

import {bytes, clear, color, el, share} from './common.js';

const HEIGHT = 260;          // px
const MAX_RUNS = 150;        // tiles drawn at most (the server sends 60); beyond: one grey "other" cell
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

/**
 * The map of `map` (the server's aggregates: `tiles`, each a run or a folder of runs with its
 * bytes per category, biggest first and bounded, and `other`, the rest in one cell); `labels`
 * names categories; `onOpen(run)` opens a run, `onGroup(folder)` filters the runs to a folder.
 */
export function treemap(map, total, labels, onOpen, width, onGroup) {
  const W = Math.max(200, width || 900);
  const box = el('div', {class: 'treemap', role: 'list', 'aria-label': 'Logdir map: runs by size, split by category',
    style: {height: HEIGHT + 'px'}});
  const items = (map.tiles || []).filter((t) => t.total_bytes > 0).slice(0, MAX_RUNS).map((t) => ({tile: t, value: t.total_bytes}));
  const rest = map.other;
  if (rest && rest.total_bytes > 0) items.push({rest, value: rest.total_bytes});
  const rects = squarify(items.map((i) => i.value), 0, 0, W, HEIGHT);
  items.forEach((item, n) => {
    const r = rects[n];
    if (item.rest) {
      const what = item.rest.groups ? item.rest.groups + ' more folders (' + item.rest.runs + ' runs)' : item.rest.runs + ' more runs';
      const cell = el('div', {class: 'tm-run tm-rest', role: 'listitem', style: px(r),
        title: what + ': ' + bytes(item.value) + ' — filter the runs to see them'});
      if (r.h >= LABEL_H + 12 && r.w >= 48) cell.appendChild(el('div', {class: 'tm-label muted', text: what + ' · ' + bytes(item.value)}));
      box.appendChild(cell);
      return;
    }
    const t = item.tile;
    const group = t.kind === 'group';
    const name = group ? t.name + '/' : t.name;
    const title = name + (group ? ' (' + t.runs + ' runs)' : '') + ': ' + bytes(t.total_bytes) + ' (' +
      share(t.total_bytes, total) + ' of the logdir)' + (group ? ' — click to list its runs' : '');
    const node = el('div', {class: 'tm-run' + (group ? ' tm-group' : ''), role: 'listitem', tabindex: '0', title,
      style: px(r), dataset: group ? {group: t.name} : {run: t.name}, 'aria-label': title});
    const showLabel = r.h >= LABEL_H + 12 && r.w >= 48;
    if (showLabel) node.appendChild(el('div', {class: 'tm-label mono', text: name + ' · ' + bytes(t.total_bytes)}));
    const cats = Object.entries(t.categories || {}).filter(([, b]) => b > 0).sort((a, b) => b[1] - a[1]);
    const top = showLabel ? LABEL_H : 0;
    const cells = squarify(cats.map(([, b]) => b), 0, top, r.w - 2, r.h - top - 2);  // inside the 1px border
    cats.forEach(([cat, b], k) => {
      node.appendChild(el('div', {class: 'tm-cell', style: Object.assign(px(cells[k]), {background: color(cat)}),
        title: name + ' · ' + ((labels && labels[cat]) || cat) + ': ' + bytes(b) + ' (' + share(b, t.total_bytes) + ' of ' +
          (group ? 'the folder' : 'the run') + ')'}));
    });
    const open = () => (group ? onGroup && onGroup(t.name + '/') : onOpen(t.name));
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
  constructor(onOpen, onGroup) {
    this.onOpen = onOpen;
    this.onGroup = onGroup;
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

  /** `map`: the server's bounded aggregates (tiles + other), never the list of runs. */
  render(map, total, labels) {
    this._args = [map, total, labels];
    this._draw();
  }

  _draw() {
    clear(this.el);
    this._width = this.el.clientWidth;
    const [map, total, labels] = this._args;
    if (!map || !(map.tiles || []).length) return;
    this.el.appendChild(treemap(map, total, labels, this.onOpen, this._width || 900, this.onGroup));
  }
}
