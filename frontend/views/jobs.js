// Activity: one card per job started or seen in this tab, with a progress bar while it runs and
// the outcome (verified / rolled back with the reason) when it is done, plus what TensorBoard's
// other dashboards show until they reload the run.

import {button, bytes, clear, el, plural} from './common.js';

const STEP_WORDS = {
  queued: 'queued', waiting: 'waiting for crash recovery to finish', starting: 'planning',
  backup: 'backing up the originals', stage: 'writing the reduced files', verify: 'checking with TensorBoard\'s readers',
  done: 'committed', restore: 'restoring', verified: 'verified', rolled_back: 'rolled back', skipped: 'skipped',
  failed: 'failed', restored: 'restored',
  hash: 'hashing every file', move: 'moving into the vault', record: 'recording',
  check: 'checking the backups',
  purge: 'deleting the backups (its intent is recorded: it finishes)',
};

function stepWords(job) {
  // a reduce starts by planning; a restore or retire by taking its run's lock and journaling
  if (job.step === 'starting' && job.kind !== 'reduce') return 'starting';
  return STEP_WORDS[job.step] || job.step;
}

function title(job) {
  // a job carries its run count and a bounded sample of names (never 100,000 names per poll)
  const n = job.run_count === undefined ? job.runs.length : job.run_count;
  const what = n === 1 ? job.runs[0] : plural(n, 'run');
  if (job.kind === 'reduce') return 'Reduce ' + what + (job.params.policy ? ' (' + job.params.policy + ')' : '');
  if (job.kind === 'restore') return 'Restore ' + what;
  if (job.kind === 'purge') return 'Purge backups';
  if (job.kind === 'retire') return 'Retire ' + what;
  return job.kind;
}

function outcomeLine(model, o) {
  // a run the user's Cancel stopped (the job marks it ``cancelled``) did not fail: it is as it
  // was, and says so without the red of a failure
  const stopped = o.cancelled === true;
  const cls = stopped ? 'muted' : {verified: 'ok', restored: 'ok', rolled_back: 'bad', failed: 'bad', skipped: 'muted'}[o.status] || 'muted';
  const line = el('div', {class: 'outcome-line ' + cls, dataset: {run: o.run, status: stopped ? 'cancelled' : o.status}});
  line.appendChild(el('span', {class: 'mono', text: o.run}));
  if (stopped) {
    line.appendChild(el('span', {text: ' — cancelled' + (o.reason ? ': ' + o.reason : '')}));
  } else if (o.status === 'verified' && o.kind === 'retire') {
    line.appendChild(el('span', {text: ' — retired ✓, ' + bytes(o.bytes_before) + ' moved into the vault (restore it from Retire or Operations)'}));
  } else if (o.status === 'verified') {
    line.appendChild(el('span', {text: ' — verified ✓, removed ' + bytes(o.saved_bytes) + ' from the logdir (' + bytes(o.bytes_before) + ' → ' + bytes(o.bytes_after) + ')'}));
    if (o.op_id) {
      const b = button('Show before/after check', () => model.openCheck(o.op_id), {kind: 'flat'});
      b.classList.add('show-check');
      line.appendChild(b);
    }
  } else if (o.status === 'restored') {
    line.appendChild(el('span', {text: ' — restored ✓, ' + (o.reason || 'original bytes back')}));
  } else if (o.status === 'rolled_back') {
    line.appendChild(el('span', {text: ' — rolled back, the run is exactly as before: ' + (o.reason || '')}));
  } else {
    line.appendChild(el('span', {text: ' — ' + (STEP_WORDS[o.status] || o.status) + (o.reason ? ': ' + o.reason : '')}));
  }
  return line;
}

// A finished job's card folds to one line: at once when it is not the newest finished job, when
// the user moves to another page, or FOLD_AFTER_MS after it finished. Its line keeps the outcome
// and a disclosure that opens the card again (and keeps it open).
const FOLD_AFTER_MS = 15000;
const MAX_OUTCOME_LINES = 200;

function summaryText(job) {
  const res = job.result || {};
  if (job.state === 'failed') return 'failed: ' + (job.error || 'unknown error');
  if (job.state === 'cancelled') {
    return job.kind === 'purge' ? 'cancelled before its intent: no backup was deleted'
      : 'cancelled before the commit point: nothing was changed';
  }
  if (job.kind === 'purge') return 'Purged ' + plural((res.ops || []).length, 'backup') + ', freed ' + bytes(res.freed_bytes);
  const outcomes = res.outcomes || [];
  const count = (st) => outcomes.filter((o) => o.status === st).length;
  const parts = [];
  const done = count('verified');
  if (done) {
    parts.push((job.kind === 'retire' ? 'retired ✓ ' : 'verified ✓ ') + plural(done, 'run') +
      (job.kind === 'reduce' ? ', removed ' + bytes(outcomes.reduce((n, o) => n + (o.status === 'verified' ? o.saved_bytes || 0 : 0), 0)) : ''));
  }
  if (count('restored')) parts.push('restored ✓ ' + plural(count('restored'), 'run'));
  if (count('rolled_back')) parts.push('rolled back ' + plural(count('rolled_back'), 'run'));
  if (count('failed')) parts.push('failed ' + plural(count('failed'), 'run'));
  if (count('skipped')) parts.push('skipped ' + plural(count('skipped'), 'run'));
  return parts.join(' · ') || 'done';
}

function hasTrouble(job) {
  const outcomes = (job.result || {}).outcomes || [];
  // a run the user's Cancel stopped is as it was: no trouble
  return job.state === 'failed' || outcomes.some((o) => (o.status === 'rolled_back' || o.status === 'failed') && o.cancelled !== true);
}

export class JobsView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.el = el('section', {class: 'jobs', 'aria-live': 'polite'});
    this._last = {};
    this.finished = {};   // job id -> {at, view}: when and on which page this tab saw it finish
    this.unfolded = new Set();
    this.timer = null;
  }

  update(state) {
    const key = {j: state.jobs, o: state.jobOrder, d: state.dismissed, v: state.view};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    this.render(state);
  }

  folded(job, state, newest) {
    if (this.unfolded.has(job.id)) return false;
    if (!newest) return true;
    const seen = this.finished[job.id];
    if (seen.view !== state.view) return true;
    return !hasTrouble(job) && Date.now() - seen.at >= FOLD_AFTER_MS;
  }

  render(state) {
    clear(this.el);
    let finishedShown = 0;
    let nextFold = Infinity;
    for (const id of state.jobOrder) {
      const job = state.jobs[id];
      if (!job || state.dismissed[id]) continue;
      const active = job.state === 'queued' || job.state === 'running';
      if (active) {
        this.el.appendChild(this.card(job));
        continue;
      }
      finishedShown++;
      if (finishedShown > 3) continue;  // older outcomes stay in Operations / History
      if (!this.finished[id]) this.finished[id] = {at: Date.now(), view: state.view};
      const fold = this.folded(job, state, finishedShown === 1);
      if (!fold && !this.unfolded.has(id) && !hasTrouble(job)) nextFold = Math.min(nextFold, this.finished[id].at + FOLD_AFTER_MS);
      this.el.appendChild(fold ? this.foldedCard(job) : this.card(job));
    }
    clearTimeout(this.timer);
    if (nextFold < Infinity) this.timer = setTimeout(() => this.render(this.model.state), Math.max(50, nextFold - Date.now()));
  }

  /** One line: what the job was and how it ended, a disclosure to open it, dismiss. */
  foldedCard(job) {
    const trouble = hasTrouble(job);
    const card = el('div', {class: 'job-card folded job-' + job.state, dataset: {job: job.id, kind: job.kind, state: job.state}});
    const open = button('▸', () => {
      this.unfolded.add(job.id);
      this.render(this.model.state);
    }, {kind: 'icon', title: 'Show the outcome in full'});
    open.classList.add('unfold');
    open.setAttribute('aria-expanded', 'false');
    const head = el('div', {class: 'job-head'}, open, el('strong', {text: title(job)}),
      el('span', {class: 'job-summary ' + (trouble ? 'bad' : job.state === 'cancelled' ? 'muted' : 'ok'), text: summaryText(job)}));
    const outcomes = (job.result || {}).outcomes || [];
    const one = outcomes.length === 1 && outcomes[0].status === 'verified' && job.kind === 'reduce' && outcomes[0].op_id ? outcomes[0] : null;
    if (one) {
      const b = button('before/after check', () => this.model.openCheck(one.op_id), {kind: 'flat'});
      b.classList.add('show-check');
      head.appendChild(b);
    }
    head.append(el('span', {class: 'spacer'}), button('×', () => this.model.dismissJob(job.id), {kind: 'icon', title: 'Dismiss'}));
    card.appendChild(head);
    return card;
  }

  card(job) {
    const active = job.state === 'queued' || job.state === 'running';
    const card = el('div', {class: 'job-card job-' + job.state,
      dataset: {job: job.id, kind: job.kind, state: job.state}});
    const head = el('div', {class: 'job-head'}, el('strong', {text: title(job)}), el('span', {class: 'spacer'}));
    if (active && job.cancellable) {
      // a purge is cancellable until it records its intent (the job then says cancellable: false)
      const c = button('Cancel', () => this.model.cancel(job.id).catch((e) => this.onError(e.message)),
        {kind: 'flat', title: job.kind === 'purge' ? 'Stop before the purge records its intent; no backup is deleted'
          : 'Stop before the commit point; the run is rolled back to its exact bytes'});
      c.classList.add('cancel-job');
      head.appendChild(c);
    }
    if (!active) {
      if (this.unfolded.has(job.id)) {
        const f = button('▾', () => {
          this.unfolded.delete(job.id);
          this.finished[job.id] = {at: 0, view: null};
          this.render(this.model.state);
        }, {kind: 'icon', title: 'Fold to one line'});
        f.classList.add('fold');
        f.setAttribute('aria-expanded', 'true');
        head.insertBefore(f, head.firstChild);
      }
      const x = button('×', () => this.model.dismissJob(job.id), {kind: 'icon', title: 'Dismiss'});
      head.appendChild(x);
    }
    card.appendChild(head);
    if (active) {
      const pct = Math.round(100 * (job.fraction || 0));
      card.appendChild(el('div', {class: 'progress', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(pct)},
        el('div', {class: 'progress-fill', style: {width: Math.max(2, pct) + '%'}})));
      const n = job.run_count === undefined ? job.runs.length : job.run_count;
      const now = Object.entries(job.per_run || {}).find(([, p]) => p.step !== 'queued' && p.fraction < 1);
      card.appendChild(el('div', {class: 'muted job-step', text: stepWords(job) + ' · ' + pct + '%' +
        (n > 1 && job.runs_done !== undefined ? ' · ' + job.runs_done + ' of ' + plural(n, 'run') + ' done' : '') +
        (n > 1 && now ? ' · now ' + now[0] : '') + (job.cancel_requested ? ' · cancelling…' : '')}));
      return card;
    }
    if (job.state === 'failed') {
      card.appendChild(el('div', {class: 'bad', text: 'The job failed: ' + (job.error || 'unknown error') +
        '. Any run it touched was rolled back or will be on the next start.'}));
      return card;
    }
    const res = job.result || {};
    if (job.kind === 'purge' && job.state === 'cancelled') {
      card.appendChild(el('div', {class: 'muted', text: 'Cancelled before the purge recorded its intent: no backup was deleted.'}));
      return card;
    }
    if (job.kind === 'purge') {
      card.appendChild(el('div', {class: 'ok', text: 'Purged ' + plural((res.ops || []).length, 'backup') + ', freed ' + bytes(res.freed_bytes) + '.'}));
      return card;
    }
    if (job.state === 'cancelled') {
      card.appendChild(el('div', {class: 'muted', text: 'Cancelled before the commit point: nothing was changed.'}));
    }
    const outcomes = res.outcomes || [];
    // a line per run up to a bound (a job over 100,000 runs must not build 100,000 lines): the
    // runs that did not verify first, so a rolled-back one is never hidden behind the rest
    const good = (o) => o.status === 'verified' || o.status === 'restored';
    const shownLines = outcomes.length > MAX_OUTCOME_LINES
      ? outcomes.filter((o) => !good(o)).concat(outcomes.filter(good)).slice(0, MAX_OUTCOME_LINES)
      : outcomes;
    for (const o of shownLines) card.appendChild(outcomeLine(this.model, o));
    if (outcomes.length > shownLines.length) {
      card.appendChild(el('div', {class: 'muted outcome-more', text: '… and ' + plural(outcomes.length - shownLines.length, 'more run') +
        ' (every one is in Operations and History)'}));
    }
    if (job.kind === 'reduce' && res.removed_from_logdir_bytes > 0) {
      // the two numbers of the library's reduce_summary (the CLI prints the same): the disk drops only at purge
      card.appendChild(el('div', {class: 'disk-numbers', text: 'Removed ' + bytes(res.removed_from_logdir_bytes) +
        ' from the logdir; ' + bytes(res.freed_on_disk_after_purge_bytes || 0) + ' freed on disk after a purge ' +
        '(the backups stay in the vault until then).'}));
    }
    const changed = outcomes.filter((o) => o.status === 'verified' || o.status === 'restored');
    if (changed.length) {
      // one note for the whole job, derived by the library from all its outcomes (never per-run notes merged)
      const notes = res.dashboards || [...new Set(changed.flatMap((o) => o.dashboards || []))];
      const refresh = button('Reload TensorBoard page', () => {
        try {
          window.top.location.reload();
        } catch (e) {
          window.location.reload();
        }
      }, {kind: 'flat', title: 'Reloads the page (the Profile tab then lists sessions afresh)'});
      card.appendChild(el('div', {class: 'dashboards-note'},
        el('strong', {text: 'Other dashboards: '}),
        notes.map((n) => el('div', {text: n})),
        refresh));
    }
    return card;
  }
}
