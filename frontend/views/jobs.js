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
};

function title(job) {
  const what = job.runs.length === 1 ? job.runs[0] : plural(job.runs.length, 'run');
  if (job.kind === 'reduce') return 'Reduce ' + what + (job.params.policy ? ' (' + job.params.policy + ')' : '');
  if (job.kind === 'restore') return 'Restore ' + what;
  if (job.kind === 'purge') return 'Purge backups';
  if (job.kind === 'retire') return 'Retire ' + what;
  return job.kind;
}

function outcomeLine(model, o) {
  const cls = {verified: 'ok', restored: 'ok', rolled_back: 'bad', failed: 'bad', skipped: 'muted'}[o.status] || 'muted';
  const line = el('div', {class: 'outcome-line ' + cls, dataset: {run: o.run, status: o.status}});
  line.appendChild(el('span', {class: 'mono', text: o.run}));
  if (o.status === 'verified' && o.kind === 'retire') {
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

export class JobsView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.el = el('section', {class: 'jobs', 'aria-live': 'polite'});
    this._last = {};
  }

  update(state) {
    const key = {j: state.jobs, o: state.jobOrder, d: state.dismissed};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    clear(this.el);
    let finishedShown = 0;
    for (const id of state.jobOrder) {
      const job = state.jobs[id];
      if (!job || state.dismissed[id]) continue;
      const active = job.state === 'queued' || job.state === 'running';
      if (!active) {
        finishedShown++;
        if (finishedShown > 3) continue;  // older outcomes stay in Operations / History
      }
      // the newest finished job in full; older ones as one compact line each
      this.el.appendChild(this.card(job, !active && finishedShown > 1));
    }
  }

  card(job, compact) {
    const active = job.state === 'queued' || job.state === 'running';
    const card = el('div', {class: 'job-card job-' + job.state + (compact ? ' compact' : ''),
      dataset: {job: job.id, kind: job.kind, state: job.state}});
    const head = el('div', {class: 'job-head'}, el('strong', {text: title(job)}), el('span', {class: 'spacer'}));
    if (active && job.cancellable) {
      const c = button('Cancel', () => this.model.cancel(job.id).catch((e) => this.onError(e.message)),
        {kind: 'flat', title: 'Stop before the commit point; the run is rolled back to its exact bytes'});
      c.classList.add('cancel-job');
      head.appendChild(c);
    }
    if (!active) {
      const x = button('×', () => this.model.dismissJob(job.id), {kind: 'icon', title: 'Dismiss'});
      head.appendChild(x);
    }
    card.appendChild(head);
    if (active) {
      const pct = Math.round(100 * (job.fraction || 0));
      card.appendChild(el('div', {class: 'progress', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(pct)},
        el('div', {class: 'progress-fill', style: {width: Math.max(2, pct) + '%'}})));
      card.appendChild(el('div', {class: 'muted job-step', text: (STEP_WORDS[job.step] || job.step) + ' · ' + pct + '%' +
        (job.cancel_requested ? ' · cancelling…' : '')}));
      return card;
    }
    if (job.state === 'failed') {
      card.appendChild(el('div', {class: 'bad', text: 'The job failed: ' + (job.error || 'unknown error') +
        '. Any run it touched was rolled back or will be on the next start.'}));
      return card;
    }
    const res = job.result || {};
    if (job.kind === 'purge') {
      card.appendChild(el('div', {class: 'ok', text: 'Purged ' + plural((res.ops || []).length, 'backup') + ', freed ' + bytes(res.freed_bytes) + '.'}));
      return card;
    }
    if (job.state === 'cancelled') {
      card.appendChild(el('div', {class: 'muted', text: 'Cancelled before the commit point: nothing was changed.'}));
    }
    const outcomes = res.outcomes || [];
    for (const o of outcomes) card.appendChild(outcomeLine(this.model, o));
    if (job.kind === 'reduce' && res.removed_from_logdir_bytes > 0 && !compact) {
      // the two numbers of the library's reduce_summary (the CLI prints the same): the disk drops only at purge
      card.appendChild(el('div', {class: 'disk-numbers', text: 'Removed ' + bytes(res.removed_from_logdir_bytes) +
        ' from the logdir; ' + bytes(res.freed_on_disk_after_purge_bytes || 0) + ' freed on disk after a purge ' +
        '(the backups stay in the vault until then).'}));
    }
    const changed = outcomes.filter((o) => o.status === 'verified' || o.status === 'restored');
    if (changed.length && !compact) {
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
