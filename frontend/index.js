// Footprint for TensorBoard: the tab's entry point. TensorBoard loads this ES module inside an
// iframe (data/plugin_entry.html?name=footprint) and calls render() once.

import {Model} from './model.js';
import {banner, clear, el} from './views/common.js';
import {CheckView} from './views/check.js';
import {JobsView} from './views/jobs.js';
import {HistoryView, OperationsView} from './views/operations.js';
import {OverviewView} from './views/overview.js';
import {RunView} from './views/run.js';
import {RetireView} from './views/retire.js';
import {followTheme} from './theme.js';

const NAV = [['runs', 'Runs'], ['retire', 'Retire'], ['operations', 'Operations'], ['history', 'History']];

function bannersFor(state) {
  const out = [];
  if (state.actions && !state.actions.enabled && state.status) {
    const codes = state.actions.codes || [];
    out.push(banner('readonly', 'Read-only: reduce, restore and purge are off.',
      state.actions.reasons.concat([(codes.length ? 'Reason code: ' + codes.join(', ') + '. ' : '') +
        'Everything below is still shown.'])));
  }
  const rec = state.status && state.status.recovery;
  if (rec) {
    if (rec.state === 'done' && rec.outcomes.length) {
      out.push(banner('info', 'Crash recovery: ' + rec.detail + '.',
        rec.outcomes.map((o) => (o.run || 'vault') + ' — ' + o.action.replace('_', ' ') + (o.code ? ' [' + o.code + ']' : '') + (o.detail ? ': ' + o.detail : '') + (o.op_id ? ' (' + o.op_id + ')' : ''))));
    } else if (rec.state === 'failed') {
      out.push(banner('error', 'Crash recovery failed: ' + rec.detail, ['Unfinished operations stay journaled; they are retried on the next start.']));
    } else if (rec.state === 'skipped' && rec.outcomes.length) {
      out.push(banner('warn', 'Unfinished operations were not recovered.', [rec.detail]));
    } else if (rec.state === 'running') {
      out.push(banner('info', 'Checking for unfinished operations (crash recovery)…', []));
    }
    const problems = rec.problems || [];
    if (problems.length) {
      // damage is never dropped silently: each finding with its code, and the command that settles it
      out.push(banner('warn', 'The vault needs attention: ' + problems.length + ' problem(s) found.',
        problems.map((p) => '[' + p.code + '] ' + p.detail).concat(
          rec.settle_command ? ['Run `' + rec.settle_command + '` to settle what can be settled.'] : [])));
    }
  }
  if (state.message) out.push(banner(state.message.kind === 'error' ? 'error' : 'info', state.message.text, []));
  return out;
}

export async function render() {
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = './style.css';
  document.head.appendChild(link);
  document.title = 'Footprint';
  followTheme();

  const model = new Model();
  const showError = (text) => model.set({message: {kind: 'error', text}});

  const nav = el('nav', {class: 'nav', 'aria-label': 'Footprint sections'});
  const navButtons = {};
  for (const [view, label] of NAV) {
    const b = el('button', {type: 'button', class: 'nav-item', dataset: {view}, text: label});
    b.addEventListener('click', () => model.go(view));
    navButtons[view] = b;
    nav.appendChild(b);
  }
  const banners = el('div', {class: 'banners'});
  const views = {
    runs: new OverviewView(model, showError),
    run: new RunView(model, showError),
    check: new CheckView(model, showError),
    operations: new OperationsView(model, showError),
    history: new HistoryView(model),
    retire: new RetireView(model, showError),
  };
  const jobs = new JobsView(model, showError);
  const main = el('main', {class: 'main'});
  const logdir = el('span', {class: 'logdir mono muted'});
  const app = el('div', {class: 'footprint'},
    el('header', {class: 'header'}, el('h1', {text: 'Footprint'}), logdir, el('span', {class: 'spacer'}), nav),
    banners, jobs.el, main);
  document.body.appendChild(app);

  let lastBanners = null;
  let current = null;
  const update = (state) => {
    logdir.textContent = state.status ? state.status.logdir : '';
    const active = state.view === 'run' || state.view === 'check' ? null : state.view;
    for (const [v, b] of Object.entries(navButtons)) b.classList.toggle('active', v === active);
    const key = JSON.stringify([state.actions, state.status && state.status.recovery, state.message]);
    if (key !== lastBanners) {
      lastBanners = key;
      clear(banners);
      for (const b of bannersFor(state)) {
        if (state.message && b.textContent.startsWith(state.message.text)) {
          const x = el('button', {type: 'button', class: 'btn btn-icon', title: 'Dismiss', text: '×'});
          x.addEventListener('click', () => model.set({message: null}));
          b.appendChild(x);
        }
        banners.appendChild(b);
      }
    }
    jobs.update(state);
    const view = views[state.view] || views.runs;
    if (current !== view) {
      clear(main);
      main.appendChild(view.el);
      current = view;
      window.scrollTo(0, 0);
    }
    view.update(state);
  };
  model.subscribe(update);
  update(model.state);
  try {
    await model.init();
  } catch (e) {
    showError('Footprint could not start: ' + e.message);
  }
}
