// Overview: logdir total, reclaimable under the policy, vault size, the category legend (which
// doubles as totals) and every run as a stacked bar, largest first, with a filter.

import {GREY_CATEGORIES, ago, button, bytes, clear, el, plural, share, stackedBar, swatch} from './common.js';
import {reduceFlow} from './reduce.js';
import {LogdirMap} from './treemap.js';

const DOMINANT_SHARE = 0.2;

export function lockReason(model, runName) {
  const st = model.state;
  if (!st.actions.enabled) return 'Actions are off: ' + st.actions.reasons.join(' ');
  const ov = st.overview;
  if (!ov || !ov.scan) return 'Waiting for the first scan';
  if (ov.scan.stale) return 'The scan is out of date; actions are locked until it is refreshed';
  if (runName && model.activeJobFor(runName)) return 'A job is running on this run';
  return null;
}

export class OverviewView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.el = el('section', {class: 'overview'});
    this.cards = el('div', {class: 'cards'});
    this.legend = el('div', {class: 'legend', role: 'list', 'aria-label': 'Categories (totals)'});
    this.filter = el('input', {type: 'search', class: 'filter', placeholder: 'Filter runs by name',
      'aria-label': 'Filter runs by name'});
    this.filter.addEventListener('input', () => model.setFilter(this.filter.value));
    this.count = el('span', {class: 'muted count'});
    this.reduceAll = el('span');
    this.table = el('div', {class: 'runs', role: 'table', 'aria-label': 'Runs by size'});
    this.map = new LogdirMap((run) => model.openRun(run));
    this.el.append(this.cards, this.legend, this.map.el,
      el('div', {class: 'toolbar'}, this.filter, this.count, el('span', {class: 'spacer'}), this.reduceAll),
      this.table);
    this._last = {};
  }

  update(state) {
    const key = {ov: state.overview, f: state.filter, jobs: state.jobs, a: state.actions, p: state.policies,
      pol: state.policy, err: state.overviewError};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    if (this.filter.value !== state.filter) this.filter.value = state.filter;
    this.renderCards(state);
    this.renderLegend(state);
    this.renderMap(state);
    this.renderRuns(state);
  }

  renderCards(state) {
    clear(this.cards);
    const ov = state.overview;
    const scan = ov && ov.scan;
    const select = el('select', {class: 'policy', 'aria-label': 'Policy'});
    for (const p of state.policies) {
      const o = el('option', {value: p.name, text: p.name, title: p.description});
      if (p.name === state.policy) o.selected = true;
      select.appendChild(o);
    }
    select.addEventListener('change', () => this.model.setPolicy(select.value));
    const pol = state.policies.find((p) => p.name === state.policy);
    let scanLine = 'scanning…';
    if (scan && scan.scanned_at) {
      scanLine = 'scanned ' + ago(scan.scanned_at) + (scan.refreshing ? ' · refreshing…' : '');
    } else if (scan && scan.refreshing && scan.progress) {
      scanLine = 'scanning… ' + scan.progress.files_done + '/' + scan.progress.files_total + ' event files';
    }
    const rescan = button('Rescan', () => this.model.rescan().catch((e) => this.onError(e.message)),
      {kind: 'flat', title: 'Scan the logdir again now', disabled: scan && scan.refreshing});
    rescan.classList.add('rescan');
    this.cards.append(
      el('div', {class: 'card'},
        el('div', {class: 'card-label', text: 'Logdir'}),
        el('div', {class: 'card-value total-bytes', text: ov ? bytes(ov.total_bytes) : '…'}),
        el('div', {class: 'card-sub', text: ov ? plural(ov.run_count, 'run') : ''})),
      el('div', {class: 'card'},
        el('div', {class: 'card-label'}, 'Reclaimable under ', select),
        el('div', {class: 'card-value reclaimable', text: ov ? bytes(ov.reclaimable_bytes) : '…'}),
        el('div', {class: 'card-sub', title: pol ? pol.description : '', text: ov
          ? share(ov.reclaimable_bytes, ov.total_bytes) + ' of the logdir' +
            (ov.active_runs ? ' · ' + plural(ov.active_runs, 'run') + ' still being written, left alone' : '')
          : ''})),
      el('div', {class: 'card'},
        el('div', {class: 'card-label', text: 'Backups (vault)'}),
        el('div', {class: 'card-value vault-bytes', text: ov ? bytes(ov.vault_bytes) : '…'}),
        el('div', {class: 'card-sub', text: 'kept until purged'})),
      el('div', {class: 'card'},
        el('div', {class: 'card-label', text: 'Scan'}),
        el('div', {class: 'card-value small scan-time', title: scan && scan.scanned_at ? new Date(scan.scanned_at * 1000).toString() : '',
          text: scanLine}),
        el('div', {class: 'card-sub'}, scan && scan.error ? el('span', {class: 'warn-text', text: scan.error}) : null,
          scan && scan.stale && scan.scanned_at ? el('span', {class: 'warn-text', text: 'out of date — actions locked '}) : null,
          rescan)));
  }

  renderLegend(state) {
    clear(this.legend);
    const ov = state.overview;
    if (!ov) return;
    const present = ov.categories.filter((c) => c.bytes);
    const greys = present.filter((c) => GREY_CATEGORIES.includes(c.name));
    const grouped = greys.length > 1 ? greys : [];
    for (const c of present) {
      if (grouped.includes(c)) continue;
      this.legend.appendChild(el('div', {class: 'legend-item', role: 'listitem', title: c.name + ': ' + plural(c.files, 'file'),
        dataset: {category: c.name}},
        swatch(c.name),
        el('span', {class: 'legend-label', text: c.label}),
        el('span', {class: 'legend-bytes', text: bytes(c.bytes)}),
        el('span', {class: 'legend-share muted', text: share(c.bytes, ov.total_bytes)})));
    }
    if (grouped.length) this.legend.appendChild(this.otherEntry(grouped, ov.total_bytes));
    this.legend.appendChild(el('div', {class: 'legend-item legend-dominant', role: 'listitem'},
      el('span', {class: 'legend-stripe', 'aria-hidden': 'true'}),
      el('span', {class: 'muted', text: 'stripe: a run holding ≥ ' + Math.round(100 * DOMINANT_SHARE) + '% of the logdir'})));
  }

  /** The rare grey categories as one "other" entry; its disclosure (and tooltip) lists each. */
  otherEntry(greys, total) {
    const sum = greys.reduce((n, c) => n + c.bytes, 0);
    const entry = el('details', {class: 'legend-item legend-other', role: 'listitem',
      title: greys.map((c) => c.label + ': ' + bytes(c.bytes)).join('\n')},
    el('summary', {'aria-label': 'other: ' + greys.length + ' small categories'},
      el('span', {class: 'swatch swatch-other', 'aria-hidden': 'true'}),
      el('span', {class: 'legend-label', text: 'other (' + greys.length + ')'}),
      el('span', {class: 'legend-bytes', text: bytes(sum)}),
      el('span', {class: 'legend-share muted', text: share(sum, total)})),
    el('div', {class: 'legend-other-list'}, greys.map((c) => [
      swatch(c.name),
      el('span', {class: 'legend-sub-label', dataset: {category: c.name}, text: c.label}),
      el('span', {class: 'legend-bytes', text: bytes(c.bytes)}),
      el('span', {class: 'muted', text: share(c.bytes, total)})])));
    entry.open = !!this.otherOpen;
    entry.addEventListener('toggle', () => {
      this.otherOpen = entry.open;
    });
    return entry;
  }

  renderMap(state) {
    const ov = state.overview;
    const labels = {};
    for (const c of (ov && ov.categories) || []) labels[c.name] = c.label;
    this.map.render(ov ? this.model.filteredRuns() : [], ov ? ov.total_bytes : 0, labels);
  }

  renderRuns(state) {
    clear(this.table);
    clear(this.reduceAll);
    const ov = state.overview;
    if (!ov) {
      this.table.appendChild(el('div', {class: 'empty', text: state.overviewError || 'Scanning the logdir…'}));
      this.count.textContent = '';
      return;
    }
    const runs = this.model.filteredRuns();
    this.count.textContent = runs.length === ov.runs.length ? plural(ov.runs.length, 'run')
      : runs.length + ' of ' + plural(ov.runs.length, 'run');
    const reducible = runs.filter((r) => r.removable_bytes > 0 && !this.model.activeJobFor(r.name));
    const allLock = lockReason(this.model, null);
    const allBtn = button('Reduce all shown' + (reducible.length ? ' (' + bytes(reducible.reduce((s, r) => s + r.removable_bytes, 0)) + ')' : ''),
      () => reduceFlow(this.model, reducible.map((r) => r.name), this.onError),
      {kind: 'primary', disabled: !!allLock || !reducible.length, title: allLock || (reducible.length ? '' : 'Nothing to reduce among the shown runs')});
    allBtn.classList.add('reduce-all');
    this.reduceAll.appendChild(allBtn);

    const labels = {};
    for (const c of ov.categories) labels[c.name] = c.label;
    const maxBytes = ov.runs.length ? ov.runs[0].total_bytes : 0;
    this.table.appendChild(el('div', {class: 'row head', role: 'row'},
      el('span', {class: 'c-name', role: 'columnheader', text: 'Run'}),
      el('span', {class: 'c-bar', role: 'columnheader', text: 'Bytes by category'}),
      el('span', {class: 'c-size', role: 'columnheader', text: 'Size'}),
      el('span', {class: 'c-share', role: 'columnheader', text: 'Share'}),
      el('span', {class: 'c-free', role: 'columnheader', text: 'Reclaimable'}),
      el('span', {class: 'c-act', role: 'columnheader', text: ''})));
    if (!runs.length) {
      this.table.appendChild(el('div', {class: 'empty', text: ov.runs.length ? 'No run matches the filter.' : 'No runs in this logdir.'}));
    }
    const limit = 2000;
    for (const r of runs.slice(0, limit)) {
      const dominant = ov.total_bytes && r.total_bytes / ov.total_bytes >= DOMINANT_SHARE;
      const job = this.model.activeJobFor(r.name);
      const lock = lockReason(this.model, r.name);
      const name = el('a', {class: 'run-link mono', href: '#', title: 'Details of ' + r.name, text: r.name});
      name.addEventListener('click', (ev) => {
        ev.preventDefault();
        this.model.openRun(r.name);
      });
      let free;
      if (job) free = el('span', {class: 'pill pill-busy', text: 'job running'});
      else if (r.removable_bytes > 0) free = el('span', {text: bytes(r.removable_bytes)});
      else free = el('span', {class: 'muted', title: r.skipped || '', text: r.code === 'active' ? 'active' : '—'});
      const act = button('Reduce…', () => reduceFlow(this.model, [r.name], this.onError),
        {kind: 'flat', disabled: !!lock || !(r.removable_bytes > 0), title: lock || (r.removable_bytes > 0 ? 'Dry run, then confirm' : (r.skipped || 'Nothing to reduce'))});
      act.classList.add('reduce-run');
      this.table.appendChild(el('div', {class: 'row' + (dominant ? ' dominant' : ''), role: 'row', dataset: {run: r.name}},
        el('span', {class: 'c-name', role: 'cell'}, name,
          r.warnings ? el('span', {class: 'pill pill-warn', title: plural(r.warnings, 'warning'), text: '!'}) : null),
        el('span', {class: 'c-bar', role: 'cell'}, stackedBar(r.categories, r.total_bytes, maxBytes, labels)),
        el('span', {class: 'c-size', role: 'cell', text: bytes(r.total_bytes)}),
        el('span', {class: 'c-share', role: 'cell', text: share(r.total_bytes, ov.total_bytes)}),
        el('span', {class: 'c-free', role: 'cell'}, free),
        el('span', {class: 'c-act', role: 'cell'}, act)));
    }
    if (runs.length > limit) {
      this.table.appendChild(el('div', {class: 'empty', text: (runs.length - limit) + ' more runs: use the filter'}));
    }
  }
}

