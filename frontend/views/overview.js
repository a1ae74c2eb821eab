// Overview: logdir total, reclaimable under the policy, the disk in use now (logdir + vault) with
// what is freed now and after a purge, the category legend (which doubles as totals), the logdir
// map, and one page of runs as stacked bars. Everything here is the server's: totals and the map
// are its aggregates, the table one page it sorted and filtered (runs?offset&limit&sort&order&q),
// so the page stays the same size for 100 runs or 100,000.

import {GREY_CATEGORIES, ago, button, bytes, clear, el, plural, share, stackedBar, swatch} from './common.js';
import {reduceFlow, reduceMatchingFlow} from './reduce.js';
import {LogdirMap} from './treemap.js';

// sortable columns: the header's text and the server's sort key
const SORTABLE = {'c-name': ['Run', 'name'], 'c-size': ['Size', 'size'], 'c-free': ['Reclaimable', 'reclaimable']};

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
    this.count = el('span', {class: 'muted count', 'aria-live': 'polite'});
    this.reduceAll = el('span');
    this.table = el('div', {class: 'runs', role: 'table', 'aria-label': 'Runs by size'});
    this.pager = el('div', {class: 'pager'});
    this.map = new LogdirMap((run) => model.openRun(run), (folder) => {
      this.filter.value = folder;
      model.setFilter(folder);
    });
    this.el.append(this.cards, this.legend, this.map.el,
      el('div', {class: 'toolbar'}, this.filter, this.count, el('span', {class: 'spacer'}), this.reduceAll),
      this.table, this.pager);
    this._last = {};
  }

  update(state) {
    const key = {ov: state.overview, f: state.filter, jobs: state.jobs, a: state.actions, p: state.policies,
      pol: state.policy, err: state.overviewError};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    if (this.filter.value !== state.filter && document.activeElement !== this.filter) this.filter.value = state.filter;
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
      this.diskCard(ov),
      el('div', {class: 'card'},
        el('div', {class: 'card-label', text: 'Scan'}),
        el('div', {class: 'card-value small scan-time', title: scan && scan.scanned_at ? new Date(scan.scanned_at * 1000).toString() : '',
          text: scanLine}),
        el('div', {class: 'card-sub'}, scan && scan.error ? el('span', {class: 'warn-text', text: scan.error}) : null,
          scan && scan.stale && scan.scanned_at ? el('span', {class: 'warn-text', text: 'out of date — actions locked '}) : null,
          rescan)));
  }

  /** Disk in use now (logdir + vault, as `du` counts it), what a vault in a bucket keeps there,
   * freed now and after a purge: the library's numbers (api.disk_numbers, measured after each scan), never computed here. */
  diskCard(ov) {
    const d = ov && ov.disk;
    const ready = d && !d.error && d.disk_in_use_bytes !== null && d.disk_in_use_bytes !== undefined;
    const freedNow = ready && d.freed_now_bytes !== null && d.freed_now_bytes !== undefined ? bytes(d.freed_now_bytes) : '—';
    // a vault in a bucket keeps the backups off this disk: the disk number alone would hide them
    const remote = ready && d.remote_vault_bytes ? d.remote_vault_bytes : 0;
    return el('div', {class: 'card disk-card', title: d && d.measured_at ? 'measured ' + ago(d.measured_at) : ''},
      el('div', {class: 'card-label', text: 'Disk in use now'}),
      el('div', {class: 'card-value disk-value'},
        el('span', {class: 'disk-in-use', text: ready ? bytes(d.disk_in_use_bytes) : (d && d.error ? '—' : '…')}),
        remote ? el('span', {class: 'remote-vault', title: 'backups kept in the vault in a bucket, not on this disk'},
          ' + ', el('strong', {class: 'remote-vault-bytes', text: bytes(remote)}), ' in bucket') : null),
      el('div', {class: 'card-sub'}, 'logdir + vault · backups ', el('span', {class: 'vault-bytes', text: ov ? bytes(ov.vault_bytes) : '…'})),
      el('div', {class: 'card-sub disk-freed'},
        'freed now ', el('strong', {class: 'freed-now', text: ready ? freedNow : '…'}),
        ' · after purge ', el('strong', {class: 'freed-after-purge', text: ready ? bytes(d.freed_after_purge_bytes) : '…'}),
        ' more'),
      d && d.error ? el('div', {class: 'card-sub warn-text', text: 'not measured: ' + d.error}) : null);
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
    this.map.render(ov ? ov.map : null, ov ? ov.total_bytes : 0, labels);
  }

  header(page) {
    const head = el('div', {class: 'row head', role: 'row'});
    for (const [cls, text] of [['c-name', 'Run'], ['c-bar', 'Bytes by category'], ['c-size', 'Size'],
      ['c-share', 'Share'], ['c-free', 'Reclaimable'], ['c-act', '']]) {
      const sortable = SORTABLE[cls];
      if (!sortable) {
        head.appendChild(el('span', {class: cls, role: 'columnheader', text}));
        continue;
      }
      const key = sortable[1];
      const active = page.sort === key;
      const arrow = active ? (page.order === 'desc' ? ' ▼' : ' ▲') : '';
      const b = el('button', {type: 'button', class: 'sort' + (active ? ' sorted' : ''), dataset: {sort: key},
        title: 'Sort by ' + text.toLowerCase(), text: text + arrow});
      b.addEventListener('click', () => this.model.setSort(key));
      head.appendChild(el('span', {class: cls, role: 'columnheader',
        'aria-sort': active ? (page.order === 'desc' ? 'descending' : 'ascending') : 'none'}, b));
    }
    return head;
  }

  renderRuns(state) {
    clear(this.table);
    clear(this.reduceAll);
    clear(this.pager);
    const ov = state.overview;
    if (!ov) {
      this.table.appendChild(el('div', {class: 'empty', text: state.overviewError || 'Scanning the logdir…'}));
      this.count.textContent = '';
      return;
    }
    // one page, as the server sorted and filtered it; while the server's answer to a new filter
    // is on its way, the page's own rows are narrowed to it at once (never widened)
    const want = state.filter.trim().toLowerCase();
    const pending = (ov.q || '') !== want;
    const runs = pending ? ov.runs.filter((r) => r.name.toLowerCase().includes(want)) : ov.runs;
    const total = ov.total;
    const matched = ov.matched || {};
    this.count.textContent = pending ? 'filtering…' : ov.q ? total + ' of ' + plural(ov.run_count, 'run') + ' match' : plural(ov.run_count, 'run');
    // "all matching" means the filter the server answered: locked while another is typed
    const allLock = lockReason(this.model, null) || (pending ? 'Waiting for the filter\'s runs' : null);
    const n = matched.reducible_runs || 0;
    const allBtn = button((ov.q ? 'Reduce all matching' : 'Reduce all') + (n ? ' (' + plural(n, 'run') + ', ' + bytes(matched.reclaimable_bytes) + ')' : ''),
      () => reduceMatchingFlow(this.model, ov.q, this.onError),
      {kind: 'primary', disabled: !!allLock || !n, title: allLock || (n ? 'Dry run of every matching run, then confirm' : 'Nothing to reduce among the matching runs')});
    allBtn.classList.add('reduce-all');
    this.reduceAll.appendChild(allBtn);

    const labels = {};
    for (const c of ov.categories) labels[c.name] = c.label;
    const maxBytes = ov.max_run_bytes || 0;
    this.table.appendChild(this.header(ov));
    if (!runs.length) {
      this.table.appendChild(el('div', {class: 'empty', text: pending ? 'Filtering…' : ov.run_count
        ? (total ? 'No run on this page.' : 'No run matches the filter.') : 'No runs in this logdir.'}));
    }
    for (const r of runs) {
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
    if (!pending) this.renderPager(ov);
  }

  /** Previous / next page and where this page lies among the matching runs. */
  renderPager(ov) {
    if (ov.total <= ov.limit && ov.offset === 0) return;
    const first = ov.total ? ov.offset + 1 : 0;
    const last = Math.min(ov.total, ov.offset + ov.runs.length);
    // the new page starts at the table's top: bring it into view once it is drawn
    const go = (offset) => this.model.setOffset(offset).then(() => this.table.scrollIntoView({block: 'start'}));
    const prev = button('‹ Previous', () => go(ov.offset - ov.limit),
      {kind: 'flat', disabled: ov.offset <= 0, title: 'The previous ' + ov.limit + ' runs'});
    prev.classList.add('page-prev');
    const next = button('Next ›', () => go(ov.offset + ov.limit),
      {kind: 'flat', disabled: last >= ov.total, title: 'The next ' + ov.limit + ' runs'});
    next.classList.add('page-next');
    this.pager.append(prev,
      el('span', {class: 'muted page-range', text: first + '–' + last + ' of ' + ov.total}),
      next);
  }
}
