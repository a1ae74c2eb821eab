// Retire: take whole runs out of the logdir into the vault (moved, unchanged), with a dry run
// first, and bring them back from the "Retired" list. The selection rules (keep-best by a metric,
// keep marks, nested runs, runs being written) are the library's: the page asks /retire_plan.

import {fetchJSON, query} from '../model.js';
import {ago, button, bytes, clear, el, plural, when} from './common.js';
import {confirmDialog} from './dialog.js';

const UNATTRIBUTED = '(unattributed)';
const LIST_LIMIT = 500;          // runs listed at once (the server filters; a rule selects beyond)
const FILTER_DEBOUNCE_MS = 250;

function metricText(m) {
  if (!m) return '';
  const v = Number(m.value);
  return m.tag + ' ' + (Number.isFinite(v) ? String(Number(v.toPrecision(4))) : String(m.value)) + ' (#' + m.rank + ' of ' + m.of + ')';
}

export class RetireView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.selected = new Set();
    this.lastIndex = null;       // shift-click anchor, an index into the shown runs
    this.filterText = '';
    this.plan = null;            // the last dry run
    this.retired = null;         // the Retired list
    this.retiredQuery = '';
    this.withNested = false;
    this._jobStates = {};
    this._last = {};
    this.listing = null;         // one page of runs, filtered by the server (runs?q&limit)
    this._listSeq = 0;
    this.sizes = new Map();      // run -> bytes, for the selection's total

    this.el = el('section', {class: 'retire-page'});
    this.intro = el('p', {class: 'muted retire-intro', text: 'Retiring moves a whole run — every file, scalars ' +
      'included, unchanged — out of the logdir into the vault. TensorBoard drops it from its run list on its next ' +
      'reload. Restore brings it back byte for byte; purging (Operations) frees the space. Runs being written and ' +
      'runs with a .keep file are never retired.'});
    this.filter = el('input', {type: 'search', class: 'filter retire-filter', placeholder: 'Filter runs by name',
      'aria-label': 'Filter runs to retire by name'});
    this.filter.addEventListener('input', () => {
      this.filterText = this.filter.value;
      this.lastIndex = null;
      clearTimeout(this._filterTimer);
      this._filterTimer = setTimeout(() => this.loadListing(), FILTER_DEBOUNCE_MS);
    });
    this.summary = el('span', {class: 'retire-selection'});
    this.toolbar = el('div', {class: 'toolbar'});
    this.ruleBox = this.buildRuleBox();
    this.table = el('div', {class: 'runs retire-runs', role: 'table', 'aria-label': 'Runs to retire'});
    this.planBox = el('div', {class: 'retire-plan'});
    this.retiredBox = el('div', {class: 'retired-box'});
    this._retiredSeq = 0;
    this.retiredError = null;    // why the last read of the Retired list failed, while none was read
    // built once: a re-render (a job finishing) must not swap the box a user is typing in, or
    // what they typed lands in a detached input and the list stays filtered by the old text
    this.retiredSearch = el('input', {type: 'search', class: 'filter retired-search', placeholder: 'Search retired runs',
      'aria-label': 'Search retired runs'});
    this.retiredSearch.addEventListener('input', () => {
      this.retiredQuery = this.retiredSearch.value;
      this.renderRetiredRows();
    });
    this.retiredTitle = el('h3', {text: 'Retired'});
    this.retiredRows = el('div', {class: 'retired-rows'});
    this.retiredBox.append(el('div', {class: 'plan-head'}, this.retiredTitle, el('span', {class: 'spacer'}), this.retiredSearch),
      this.retiredRows);
    this.el.append(this.intro, this.ruleBox, this.toolbar, this.table, this.planBox, this.retiredBox);
  }

  buildRuleBox() {
    const f = (cls, attrs) => el('input', Object.assign({class: cls}, attrs));
    this.ruleGroup = f('rule-group', {type: 'text', placeholder: 'group, e.g. sweep/*', 'aria-label': 'Group (glob)'});
    this.ruleKeep = f('rule-keep', {type: 'number', min: '0', placeholder: 'N', 'aria-label': 'Keep best N', style: {width: '64px'}});
    this.ruleMetric = f('rule-metric', {type: 'text', placeholder: 'scalar tag, e.g. val/loss', 'aria-label': 'Metric'});
    this.ruleMode = el('select', {class: 'rule-mode', 'aria-label': 'Which is best'},
      el('option', {value: 'min', text: 'lowest is best'}), el('option', {value: 'max', text: 'highest is best'}));
    this.ruleValue = el('select', {class: 'rule-value', 'aria-label': 'Which value ranks a run'},
      el('option', {value: 'last', text: 'last value'}), el('option', {value: 'min', text: 'minimum'}),
      el('option', {value: 'max', text: 'maximum'}));
    this.ruleAge = el('select', {class: 'rule-age', 'aria-label': 'Unchanged for'},
      [['', 'any age'], ['86400', 'unchanged ≥ 1 day'], ['604800', 'unchanged ≥ 7 days'], ['2592000', 'unchanged ≥ 30 days']]
        .map(([v, t]) => el('option', {value: v, text: t})));
    const apply = button('Select by rule', () => this.applyRule(), {kind: 'flat', title: 'Ask the library which runs the rule retires (nothing moves)'});
    apply.classList.add('apply-rule');
    return el('div', {class: 'plan-box rule-box'},
      el('div', {class: 'rule-line'},
        el('strong', {text: 'Rule: '}), 'in group ', this.ruleGroup, ' keep the best ', this.ruleKeep, ' by ', this.ruleMetric,
        ' ', this.ruleValue, ', ', this.ruleMode, ' · ', this.ruleAge, ' ', apply));
  }

  ruleParams() {
    const p = {};
    if (this.ruleGroup.value.trim()) p.group = this.ruleGroup.value.trim();
    if (this.ruleKeep.value !== '') {
      p.keep_best = this.ruleKeep.value;
      p.metric = this.ruleMetric.value.trim();
      p.mode = this.ruleMode.value;
      p.value = this.ruleValue.value;
    }
    if (this.ruleAge.value) p.older_than_s = this.ruleAge.value;
    if (this.withNested) p.with_nested = '1';
    return p;
  }

  async applyRule() {
    const params = this.ruleParams();
    if (!params.group && !params.keep_best && !params.older_than_s) {
      this.onError('Give a group, a keep-best rule or an age.');
      return;
    }
    try {
      const plan = await fetchJSON('retire_plan' + query(params));
      this.selected = new Set(plan.items.filter((i) => i.selected).map((i) => i.run));
      for (const i of plan.items) this.sizes.set(i.run, i.bytes);
      this.plan = plan;
      this.render();
    } catch (e) {
      this.onError(e.message);
    }
  }

  /** The runs the server listed for the filter (at most LIST_LIMIT), those a retire can take. */
  shownRuns() {
    if (!this.listing) return [];
    return this.listing.runs.filter((r) => r.name !== UNATTRIBUTED && r.name !== '.' && r.has_event_files);
  }

  async loadListing() {
    const seq = ++this._listSeq;
    try {
      const res = await fetchJSON('runs' + query({q: this.filterText.trim() || undefined, limit: LIST_LIMIT,
        policy: this.model.state.policy}));
      if (seq !== this._listSeq) return;  // a newer filter's answer follows
      this.listing = res;
      for (const r of res.runs) this.sizes.set(r.name, r.total_bytes);
    } catch (e) {
      if (seq === this._listSeq) this.onError(e.message);
    }
    this.render();
  }

  update(state) {
    // a retire or restore that finished since we last looked (maybe while another page was
    // shown, e.g. a restore from Operations) changes the Retired list
    let reload = this.retired === null;
    for (const id of state.jobOrder) {
      const j = state.jobs[id];
      if (!j || (j.kind !== 'retire' && j.kind !== 'restore')) continue;
      const finished = !(j.state === 'queued' || j.state === 'running');
      if (finished && this._jobStates[id] !== 'finished') {
        reload = true;
        if (j.kind === 'retire' && this._jobStates[id]) {
          this.selected.clear();
          this.plan = null;
        }
      }
      this._jobStates[id] = finished ? 'finished' : 'active';
    }
    if (reload) this.loadRetired();
    const key = {ov: state.overview, a: state.actions, j: state.jobs};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    const fresh = key.ov !== this._last.ov;
    this._last = key;
    if (fresh && state.overview) this.loadListing();  // a new scan or job: list again
    else this.render();
  }

  async loadRetired() {
    const seq = ++this._retiredSeq;
    try {
      const res = await fetchJSON('retired');
      if (seq !== this._retiredSeq) return;  // a later read (a later job's end) answers instead
      this.retired = res.retired;
      this.retiredError = null;
    } catch (e) {
      if (seq !== this._retiredSeq) return;
      // keep the list last read: an empty one would say nothing is retired, which is not known
      if (this.retired === null) this.retiredError = e.message;
      this.onError(e.message);
    }
    this.renderRetired();
  }

  lockReason() {
    const st = this.model.state;
    if (!st.actions.enabled) return 'Actions are off: ' + st.actions.reasons.join(' ');
    const ov = st.overview;
    if (!ov || !ov.scan) return 'Waiting for the first scan';
    if (ov.scan.stale) return 'The scan is out of date; actions are locked until it is refreshed';
    return null;
  }

  render() {
    this.renderToolbar();
    this.renderRuns();
    this.renderPlan();
    this.renderRetired();
  }

  selectionBytes() {
    let n = 0;
    for (const name of this.selected) n += this.sizes.get(name) || 0;
    return n;
  }

  renderToolbar() {
    clear(this.toolbar);
    const shown = this.shownRuns();
    const all = button('Select all shown (' + shown.length + ')', () => {
      for (const r of shown) this.selected.add(r.name);
      this.plan = null;
      this.render();
    }, {kind: 'flat', disabled: !shown.length});
    all.classList.add('select-all');
    const none = button('Clear', () => {
      this.selected.clear();
      this.plan = null;
      this.render();
    }, {kind: 'flat', disabled: !this.selected.size});
    none.classList.add('select-none');
    const nested = el('input', {type: 'checkbox', class: 'with-nested', checked: this.withNested});
    nested.addEventListener('change', () => {
      this.withNested = nested.checked;
      this.plan = null;
      this.render();
    });
    this.summary.textContent = this.selected.size
      ? plural(this.selected.size, 'run') + ' selected · ' + bytes(this.selectionBytes())
      : 'No run selected';
    const lock = this.lockReason();
    const dry = button('Dry run…', () => this.dryRun(), {kind: 'primary', disabled: !this.selected.size,
      title: 'See what retiring the selection does (nothing moves)'});
    dry.classList.add('retire-dry-run');
    this.toolbar.append(this.filter, all, none, el('span', {class: 'spacer'}),
      el('label', {class: 'muted nested-label', title: 'A run whose folder holds other runs takes them along'}, nested, ' take nested runs along'),
      this.summary, dry);
    if (lock) this.toolbar.appendChild(el('span', {class: 'muted small retire-lock', text: lock}));
  }

  renderRuns() {
    clear(this.table);
    if (!this.listing) {
      this.table.appendChild(el('div', {class: 'empty', text: 'Scanning the logdir…'}));
      return;
    }
    const runs = this.shownRuns();
    this.table.appendChild(el('div', {class: 'row head', role: 'row'},
      el('span', {class: 'c-check', role: 'columnheader', text: ''}),
      el('span', {class: 'c-name', role: 'columnheader', text: 'Run'}),
      el('span', {class: 'c-size', role: 'columnheader', text: 'Size'}),
      el('span', {class: 'c-age', role: 'columnheader', text: 'Last written'}),
      el('span', {class: 'c-note', role: 'columnheader', text: ''})));
    if (!runs.length) {
      this.table.appendChild(el('div', {class: 'empty', text: this.filterText ? 'No run matches the filter.' : 'No runs in this logdir.'}));
      return;
    }
    const planned = {};
    for (const i of (this.plan ? this.plan.items : [])) planned[i.run] = i;
    runs.forEach((r, index) => {
      const box = el('input', {type: 'checkbox', class: 'retire-check', 'aria-label': 'Select ' + r.name,
        checked: this.selected.has(r.name)});
      box.addEventListener('click', (ev) => {
        ev.stopPropagation();
        this.toggle(runs, index, box.checked, ev.shiftKey);
      });
      const job = this.model.activeJobFor(r.name);
      const p = planned[r.name];
      let note = null;
      if (job) note = el('span', {class: 'pill pill-busy', text: 'job running'});
      else if (r.code === 'active') note = el('span', {class: 'muted', text: 'being written'});
      if (p && p.metric) note = el('span', {class: 'muted mono small', text: metricText(p.metric)});
      const row = el('div', {class: 'row retire-row' + (this.selected.has(r.name) ? ' selected' : ''),
        role: 'row', dataset: {run: r.name}},
        el('span', {class: 'c-check', role: 'cell'}, box),
        el('span', {class: 'c-name mono', role: 'cell', text: r.name}),
        el('span', {class: 'c-size', role: 'cell', text: bytes(r.total_bytes)}),
        el('span', {class: 'c-age muted', role: 'cell', title: when(r.newest_mtime), text: ago(r.newest_mtime)}),
        el('span', {class: 'c-note', role: 'cell'}, note));
      // the whole row toggles (shift: the range from the last click), like a file manager
      row.addEventListener('click', (ev) => this.toggle(runs, index, !this.selected.has(r.name), ev.shiftKey));
      this.table.appendChild(row);
    });
    if (this.listing.total > this.listing.runs.length) {
      this.table.appendChild(el('div', {class: 'empty list-more', text: 'The ' + this.listing.runs.length + ' largest of ' +
        plural(this.listing.total, 'matching run') + ' are listed: narrow the filter, or select by rule.'}));
    }
  }

  toggle(runs, index, checked, shift) {
    if (shift && this.lastIndex !== null && this.lastIndex < runs.length) {
      const [a, b] = this.lastIndex < index ? [this.lastIndex, index] : [index, this.lastIndex];
      for (let i = a; i <= b; i++) {
        if (checked) this.selected.add(runs[i].name);
        else this.selected.delete(runs[i].name);
      }
    } else if (checked) {
      this.selected.add(runs[index].name);
    } else {
      this.selected.delete(runs[index].name);
    }
    this.lastIndex = index;
    this.plan = null;
    this.render();
  }

  async dryRun() {
    const runs = [...this.selected];
    try {
      const params = {run: runs};
      if (this.withNested) params.with_nested = '1';
      this.plan = await fetchJSON('retire_plan' + query(params));
      this.render();
      const go = this.planBox.querySelector('.retire-confirm');
      if (go) go.scrollIntoView({block: 'nearest'});
    } catch (e) {
      this.onError(e.message);
    }
  }

  renderPlan() {
    clear(this.planBox);
    const plan = this.plan;
    if (!plan) return;
    const chosen = plan.items.filter((i) => i.selected);
    const lock = this.lockReason();
    const go = button(chosen.length ? 'Retire ' + plural(chosen.length, 'run') + ' (' + bytes(plan.bytes) + ')…' : 'Nothing to retire',
      () => this.confirm(chosen, plan), {kind: 'danger', disabled: !!lock || !chosen.length, title: lock || ''});
    go.classList.add('retire-confirm');
    this.planBox.appendChild(el('div', {class: 'plan-box retire-dry'},
      el('div', {class: 'plan-head'},
        el('h3', {text: 'Dry run: ' + (chosen.length ? plural(chosen.length, 'run') + ', ' + bytes(plan.bytes) + ' leave the logdir' : 'nothing would move')}),
        el('span', {class: 'spacer'}), go),
      el('table', {class: 'table retire-plan-table'},
        el('thead', {}, el('tr', {}, ['', 'Run', 'Size', 'Files', 'Metric', 'Why'].map((h) => el('th', {text: h})))),
        el('tbody', {}, plan.items.map((i) => el('tr', {class: i.selected ? 'will-retire' : 'stays', dataset: {run: i.run}},
          el('td', {class: i.selected ? 'bad' : 'muted', text: i.selected ? 'retire' : 'stays'}),
          el('td', {class: 'mono'}, i.run, i.takes_along.length ? el('div', {class: 'muted small', text: 'takes along: ' + i.takes_along.join(', ')}) : null),
          el('td', {class: 'num', text: bytes(i.bytes)}),
          el('td', {class: 'num', text: String(i.files)}),
          el('td', {class: 'mono small', text: metricText(i.metric) || '—'}),
          el('td', {class: 'small', text: i.reason || ''}))))),
      el('p', {class: 'muted', text: 'Nothing has moved. ' + (plan.reload_note || '')})));
  }

  async confirm(chosen, plan) {
    const body = [
      el('p', {class: 'dialog-lead'}, 'Moves ', el('strong', {text: plural(chosen.length, 'run')}), ' (' + bytes(plan.bytes) +
        ') out of the logdir into the vault, every file unchanged.'),
      el('ul', {class: 'mono small'}, chosen.slice(0, 12).map((i) => el('li', {text: i.run + (i.takes_along.length ? ' (+ ' + i.takes_along.length + ' nested)' : '')})),
        chosen.length > 12 ? el('li', {text: '… ' + (chosen.length - 12) + ' more'}) : null),
      el('p', {text: 'They disappear from TensorBoard on its next reload. Each can be restored byte for byte from the Retired list ' +
        'or Operations until its files are purged.'}),
    ];
    const ok = await confirmDialog({title: 'Retire ' + plural(chosen.length, 'run') + '?', body, confirm: 'Retire', danger: true});
    if (!ok) return;
    try {
      const res = await this.model.post('retire', {runs: chosen.map((i) => i.run), with_nested: this.withNested});
      this.model._track(res.job);
      this.model._pollJob(res.job.id);
    } catch (e) {
      this.onError(e.message);
    }
  }

  renderRetired() {
    const total = this.retired ? this.retired.reduce((s, r) => s + r.bytes, 0) : 0;
    this.retiredTitle.textContent = 'Retired' + (this.retired ? ': ' + plural(this.retired.length, 'run') + ', ' + bytes(total) + ' in the vault' : '');
    this.renderRetiredRows();
  }

  renderRetiredRows() {
    const box = this.retiredRows;
    clear(box);
    if (this.retired === null) {
      box.appendChild(el('div', {class: 'empty', text: this.retiredError ? 'Could not read the retired runs: ' + this.retiredError : 'Loading…'}));
      return;
    }
    const q = this.retiredQuery.trim().toLowerCase();
    const list = this.retired.filter((r) => !q || r.run.toLowerCase().includes(q));
    if (!list.length) {
      box.appendChild(el('div', {class: 'empty', text: this.retired.length ? 'No retired run matches.' : 'No run has been retired.'}));
      return;
    }
    const lock = this.lockReason();
    box.appendChild(el('table', {class: 'table retired-table'},
      el('thead', {}, el('tr', {}, ['Run', 'Size', 'Files', 'Retired', 'Operation', ''].map((h) => el('th', {text: h})))),
      el('tbody', {}, list.map((r) => {
        const busy = this.model.activeJobFor(r.run);
        const link = el('a', {href: '#', class: 'restore-link' + (lock || busy ? ' disabled' : ''), text: 'restore…',
          title: lock || (busy ? 'A job is running on this run' : 'Bring the run back byte for byte')});
        link.addEventListener('click', (ev) => {
          ev.preventDefault();
          if (!lock && !busy) this.restore(r);
        });
        return el('tr', {dataset: {run: r.run, op: r.op_id}},
          el('td', {class: 'mono'}, r.run, r.takes_along.length ? el('div', {class: 'muted small', text: '+ ' + r.takes_along.join(', ')}) : null),
          el('td', {class: 'num', text: bytes(r.bytes)}),
          el('td', {class: 'num', text: String(r.files)}),
          el('td', {title: when(r.retired_at), text: when(r.retired_at)}),
          el('td', {class: 'mono small', text: r.op_id}),
          el('td', {}, link));
      }))));
  }

  restore(r) {
    return restoreRetiredFlow(this.model, r, this.onError);
  }
}

/** Confirm, then bring a retired run back (``r``: a Retired row, or an Operations summary). */
export async function restoreRetiredFlow(model, r, onError) {
  const size = r.bytes !== undefined ? r.bytes : r.backup_bytes;
  const body = [
    el('p', {class: 'dialog-lead'}, 'Puts run ', el('strong', {class: 'mono', text: r.run}), ' back into the logdir: ' +
      plural(r.files, 'file') + ', ' + bytes(size) + ', byte for byte (every file re-hashed against the tree sha256).'),
    (r.takes_along || []).length ? el('p', {text: 'With its nested runs: ' + r.takes_along.join(', ') + '.'}) : null,
    el('p', {class: 'muted', text: 'Nothing that stands at that path now is overwritten; the restore refuses instead.'}),
  ];
  const ok = await confirmDialog({title: 'Restore ' + r.run + '?', body, confirm: 'Restore', danger: false});
  if (!ok) return null;
  try {
    const res = await model.post('unretire', {op: r.op_id});
    model._track(res.job);
    model._pollJob(res.job.id);
    return res.job;
  } catch (e) {
    onError(e.message);
    return null;
  }
}
