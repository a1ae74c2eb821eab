// Small DOM helpers shared by the views. Text always goes in through textContent (run names
// and paths come from the disk); no HTML strings built from data, no inline event attributes (CSP).

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k === 'style' && typeof v === 'object') Object.assign(node.style, v);
    else if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else node.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === 'text') node.textContent = v;
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) if (c) node.appendChild(c);
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];

/** 1536 -> "1.5 KB" (decimal units, like the CLI). */
export function bytes(n) {
  if (n === null || n === undefined || isNaN(n)) return '—';
  let v = Number(n);
  const neg = v < 0;
  v = Math.abs(v);
  let i = 0;
  while (v >= 1000 && i < UNITS.length - 1) {
    v /= 1000;
    i++;
  }
  const s = i === 0 ? String(Math.round(v)) + ' B' : v.toFixed(v < 10 ? 2 : 1) + ' ' + UNITS[i];
  return neg ? '−' + s : s;
}

/** The one rule for shares, the same as the CLI's (tb_footprint_plugin.fmt.share, compared in
 * tests/test_browser_tab.py): one decimal, "<0.1%" for a small non-zero part, "—" for an empty whole. */
export function share(part, whole) {
  if (!whole) return '—';
  const p = (100 * part) / whole;
  return (p < 0.05 && p > 0 ? '<0.1' : p.toFixed(1)) + '%';
}

export function ago(ts) {
  if (!ts) return 'never';
  const s = Math.max(0, Date.now() / 1000 - ts);
  if (s < 5) return 'just now';
  if (s < 90) return Math.round(s) + ' s ago';
  if (s < 5400) return Math.round(s / 60) + ' min ago';
  if (s < 129600) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' days ago';
}

export function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts * 1000);
  return d.toLocaleString(undefined, {year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit'});
}

// One stable colour per category (the legend, the bars, the treemap and the run detail agree).
// The one colour map of the tab. Colour-blind-safe: Okabe-Ito for the big categories people
// compare, Paul Tol's muted scheme for the rest; families (graphs, profile, bookkeeping) share a
// hue family only where telling them apart matters less than seeing them as one kind.
const COLORS = {
  scalars: '#0072B2',            // Okabe-Ito blue
  hparams: '#56B4E9',            // Okabe-Ito sky blue
  text: '#332288',               // Tol indigo
  histograms: '#009E73',         // Okabe-Ito bluish green
  images: '#CC79A7',             // Okabe-Ito reddish purple
  audio: '#882255',              // Tol wine
  pr_curves: '#DDCC77',          // Tol sand
  graph_def: '#999933',          // Tol olive: the graph family
  meta_graph_def: '#7A7A2E',
  graph_keras_model: '#BDBD6B',
  graph_run_metadata: '#A6A6A6', // greys: run metadata and bookkeeping records
  graph_run_metadata_graph: '#8C8C8C',
  tagged_run_metadata: '#BFBFBF',
  session_log: '#D9D9D9',
  file_version: '#E5E5E5',
  events_other: '#6E6E6E',
  events_corrupt: '#CC3311',     // Tol vibrant red: something is wrong
  events_incomplete: '#EE3377',  // Tol vibrant magenta
  profile_xplane: '#E69F00',     // Okabe-Ito orange: the profile family
  profile_cache: '#F0E442',      // Okabe-Ito yellow
  profile_secondary: '#AA4499',  // Tol purple
  profile_other: '#C8A26B',
  profile_empty: '#EAD9B8',
  profile_tool_outputs: '#8C5A00', // dark ochre: old-format tool outputs beside a session (the profile family)
  torch_trace: '#D55E00',        // Okabe-Ito vermillion
  plugin_assets: '#44AA99',      // Tol teal
  checkpoints: '#117733',        // Tol green
  symlink: '#CCDDEE',
  other: '#505050',
  _unchanged: '#b0bec5',
};

export function color(name) {
  if (COLORS[name]) return COLORS[name];
  let h = 0;
  for (const ch of String(name)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return 'hsl(' + (h % 360) + ', 45%, 55%)';
}

// The greys: run metadata and bookkeeping records, rare and small. The legend lists them as one
// "other" entry (a disclosure names each), so the eye is not spent on six shades of grey.
export const GREY_CATEGORIES = ['graph_run_metadata', 'graph_run_metadata_graph', 'tagged_run_metadata', 'session_log',
  'file_version', 'events_other', 'other', 'symlink'];

/** The page and card colours of each mode (style.css) that every colour dot must stand out from. */
export const DARK_BACKGROUNDS = ['#303030', '#3a3a3a'];
export const LIGHT_BACKGROUNDS = ['#f5f5f5', '#ffffff'];

function channels(css) {
  const m = /^#([0-9a-f]{6})$/i.exec(css);
  if (m) return [0, 2, 4].map((i) => parseInt(m[1].slice(i, i + 2), 16));
  const h = /^hsl\((\d+), (\d+)%, (\d+)%\)$/.exec(css);
  if (!h) return null;
  const [hue, sat, light] = [Number(h[1]), Number(h[2]) / 100, Number(h[3]) / 100];
  const a = sat * Math.min(light, 1 - light);
  const f = (n) => {
    const k = (n + hue / 30) % 12;
    return Math.round(255 * (light - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

/** WCAG contrast ratio of two colours (#rrggbb or the hsl() colour() makes), 1 to 21. */
export function contrast(a, b) {
  const lum = (c) => {
    const [r, g, bl] = channels(c).map((v) => {
      const x = v / 255;
      return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

// a non-text graphic needs 3:1 against what it sits on (WCAG 1.4.11)
const MIN_GRAPHIC_CONTRAST = 3;

/** True when `name`'s colour would fade into a background of `mode` ('dark' or 'light'): it gets a ring there. */
export function needsRing(name, mode) {
  return (mode === 'light' ? LIGHT_BACKGROUNDS : DARK_BACKGROUNDS).some((bg) => contrast(color(name), bg) < MIN_GRAPHIC_CONTRAST);
}

/** A category's colour dot; a ring (light in dark mode, dark in light mode) where the colour alone would fade. */
export function swatch(name) {
  const cls = 'swatch' + (needsRing(name, 'dark') ? ' ring-dark' : '') + (needsRing(name, 'light') ? ' ring-light' : '');
  return el('span', {class: cls, style: {background: color(name)}, 'aria-hidden': 'true', dataset: {category: name}});
}

/** A plan's fidelity lines, each with its details (a string or lines of text) behind a disclosure. */
export function fidelityList(lines, details) {
  return el('ul', {class: 'fidelity'}, (lines || []).map((line, i) => {
    const d = (details || [])[i];
    const extra = (Array.isArray(d) ? d : [d]).filter((x) => typeof x === 'string' && x.trim());
    if (!extra.length) return el('li', {text: line});
    return el('li', {class: 'has-details'},
      el('details', {class: 'fidelity-details'},
        el('summary', {text: line}),
        el('div', {class: 'fidelity-detail small'}, extra.map((x) => el('div', {text: x})))));
  }));
}

/** A horizontal stacked bar: one segment per category, width proportional to bytes. */
export function stackedBar(categories, total, scaleTotal, labels) {
  const outer = el('div', {class: 'stack', role: 'img'});
  const width = scaleTotal ? Math.max(0.5, (100 * total) / scaleTotal) : 0;
  const inner = el('div', {class: 'stack-inner', style: {width: width + '%'}});
  const entries = Object.entries(categories).filter(([, b]) => b > 0).sort((a, b) => b[1] - a[1]);
  const desc = [];
  for (const [name, b] of entries) {
    const label = (labels && labels[name]) || name;
    const seg = el('span', {class: 'seg', style: {width: (100 * b) / (total || 1) + '%', background: color(name)},
      title: label + ': ' + bytes(b) + ' (' + share(b, total) + ')'});
    inner.appendChild(seg);
    desc.push(label + ' ' + bytes(b));
  }
  outer.setAttribute('aria-label', desc.join(', '));
  outer.appendChild(inner);
  return outer;
}

export function button(label, onClick, opts) {
  const o = opts || {};
  const b = el('button', {class: 'btn' + (o.kind ? ' btn-' + o.kind : ''), type: 'button', title: o.title,
    disabled: o.disabled ? true : null, dataset: o.dataset});
  b.textContent = label;
  b.addEventListener('click', (ev) => {
    ev.preventDefault();
    if (!b.disabled) onClick(ev);
  });
  return b;
}

export function banner(kind, title, lines) {
  return el('div', {class: 'banner banner-' + kind, role: kind === 'error' ? 'alert' : 'status'},
    el('strong', {text: title}),
    (lines || []).map((l) => el('div', {text: l})));
}

/** "3 files" / "1 file" */
export function plural(n, one, many) {
  return n + ' ' + (n === 1 ? one : many || one + 's');
}
