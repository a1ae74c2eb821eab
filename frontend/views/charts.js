// Charts of the before/after check, drawn with uPlot (vendor/uPlot.esm.js, MIT, a self-contained
// ES module: no eval, no network, fits TensorBoard's CSP and the iframe). Original and reduced
// are overlaid: the original wide and faint, the reduced thin and dashed on top, so a perfect
// match reads as one line.

import uPlot from '../vendor/uPlot.esm.js';
import {el} from './common.js';

let cssLoaded = false;

function loadCss() {
  if (cssLoaded) return;
  cssLoaded = true;
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = './vendor/uPlot.min.css';
  document.head.appendChild(link);
}

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

function num(v) {
  if (typeof v === 'number') return v;
  if (v === 'NaN') return NaN;
  if (v === 'Infinity') return Infinity;
  if (v === '-Infinity') return -Infinity;
  return null;
}

/** Align two [[x, y], ...] series on the union of their x values (null where a side lacks one). */
export function align(before, after) {
  const xs = [...new Set((before || []).map((p) => p[0]).concat((after || []).map((p) => p[0])))].sort((a, b) => a - b);
  const mb = new Map((before || []).map((p) => [p[0], num(p[1])]));
  const ma = new Map((after || []).map((p) => [p[0], num(p[1])]));
  const fin = (v) => (v === undefined || v === null || !isFinite(v) ? null : v);
  return [xs, xs.map((x) => fin(mb.get(x))), xs.map((x) => fin(ma.get(x)))];
}

function opts(title, width, height, xLabel, stepped) {
  const muted = cssVar('--muted', '#616161');
  const grid = cssVar('--border', '#e0e0e0');
  const axis = {stroke: muted, grid: {stroke: grid, width: 1}, ticks: {stroke: grid, width: 1}, font: '10px Roboto, sans-serif'};
  const path = stepped ? uPlot.paths.stepped({align: 1}) : undefined;
  return {
    title: undefined,
    width,
    height,
    scales: {x: {time: false}},
    legend: {show: true, live: false},
    cursor: {drag: {x: true, y: false}},
    axes: [Object.assign({label: xLabel, labelSize: 14, labelFont: '10px Roboto, sans-serif'}, axis), Object.assign({size: 52}, axis)],
    series: [
      {label: xLabel},
      {label: 'original', stroke: cssVar('--before', '#9e9e9e'), width: 4, alpha: 0.55, paths: path, points: {show: false}},
      {label: 'reduced', stroke: cssVar('--after', '#f57c00'), width: 1.5, dash: [5, 3], paths: path,
        points: {show: (u, si) => u.data[si].filter((v) => v !== null).length === 1}},
    ],
  };
}

/** An overlaid line chart of two [[x, y], ...] series in `target` (a fresh element is returned). */
export function overlayChart(before, after, {width = 460, height = 180, xLabel = 'step', stepped = false} = {}) {
  loadCss();
  const box = el('div', {class: 'uplot-box'});
  const data = align(before, after);
  // uPlot measures the box: draw once it is in the document
  requestAnimationFrame(() => {
    const w = Math.max(260, Math.min(width, box.clientWidth || width));
    box.chart = new uPlot(opts(null, w, height, xLabel, stepped), data, box);
  });
  return box;
}

/** A histogram's distribution [[left, right, count], ...] as [[centre, count], ...]. */
export function distributionPoints(buckets) {
  return (buckets || []).map(([l, r, c]) => {
    const lo = num(l);
    const hi = num(r);
    return [isFinite(lo) && isFinite(hi) ? (lo + hi) / 2 : (isFinite(lo) ? lo : hi), num(c)];
  }).filter((p) => isFinite(p[0]));
}
