// Operations (with a restore link on every one whose backup is kept), purge, and the change log.

import {button, bytes, clear, el, plural, when} from './common.js';
import {purgeFlow, restoreFlow} from './reduce.js';
import {restoreRetiredFlow} from './retire.js';

function outcomeCell(o) {
  const cls = {verified: 'ok', restored: 'ok', rolled_back: 'bad', failed: 'bad'}[o.outcome] || 'muted';
  let text = {verified: 'verified ✓', restored: 'restored ✓', rolled_back: 'rolled back', failed: 'failed'}[o.outcome] || (o.outcome || '—');
  if (o.kind === 'retire' && o.outcome === 'verified') text = 'retired ✓';
  const late = (o.salvaged || []).reduce((n, s) => n + (s.records || 0), 0);
  return el('td', {class: 'outcome ' + cls, title: o.reason || ''}, text,
    o.recovered ? el('span', {class: 'muted', text: ' (after a crash)'}) : null,
    (o.salvaged || []).length ? el('span', {class: 'muted', title: (o.salvaged || []).map((s) => s.path + (s.file ? ' → ' + s.file : ' (kept in the vault)')).join('\n'),
      text: ' · late writes: ' + late + ' record(s) salvaged into the run'}) : null,
    o.rebuilt ? el('span', {class: 'muted', text: ' · manifest rebuilt (' + o.rebuilt.was + ')'}) : null);
}

/** The colour of a change-log line's outcome: verified, restored and purged ones are 'ok', rolled
 * back and failed ones 'bad', and any other (whose_unknown: its owner could not be told, nothing was
 * done with it; a salvage's late bytes kept) a warning, never the colour of a success. */
function historyClass(e) {
  if (e.outcome === 'rolled_back' || e.outcome === 'failed') return 'bad';
  return ['verified', 'restored', 'purged'].includes(e.outcome) ? 'ok' : 'warn-text';
}

/** What the vault keeps for an operation. A restored operation's originals stand in the logdir
 * again, so its backup was released (or never moved: a retired run comes back whole), never "purged";
 * a restored retirement keeps what the catalogue counts (kept_bytes: a bucket's copies until a purge,
 * the originals its restore left where another file stood, left_in_vault). */
export function backupCell(o) {
  if (o.outcome !== 'verified' || (o.kind !== 'reduce' && o.kind !== 'retire')) return '—';
  if (o.restored_by) {
    if (o.kind === 'retire') {
      return bytes(o.kept_bytes || 0) + ' kept · restored' +
        (o.left_in_vault ? '; ' + plural(o.left_in_vault, 'original') + ' left in the vault [not_restored]' : '');
    }
    return o.backup_purged ? 'restored; backup released' : 'restored; ' + bytes(o.backup_bytes) + ' still kept';
  }
  if (o.backup_purged) return 'purged';
  return bytes(o.backup_bytes) + (o.kind === 'retire' ? ' (whole run)' : '');
}

export function operationsTable(model, ops, onError, opts) {
  const showRun = !opts || opts.run !== false;
  const st = model.state;
  const headers = ['When', showRun ? 'Run' : null, 'Operation', 'Policy', 'Outcome', 'Before → after', 'Backup', ''].filter((h) => h !== null);
  return el('table', {class: 'table operations'},
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {text: h})))),
    el('tbody', {}, ops.map((o) => {
      const actions = el('td', {class: 'op-actions'});
      if (o.kind === 'reduce' && o.verified !== null) {
        const view = el('a', {href: '#', class: 'check-link', text: 'before/after'});
        view.addEventListener('click', (ev) => {
          ev.preventDefault();
          model.openCheck(o.op_id);
        });
        actions.appendChild(view);
      }
      if (o.restorable) {
        const lock = !st.actions.enabled ? 'Actions are off: ' + st.actions.reasons.join(' ')
          : model.activeJobFor(o.run) ? 'A job is running on this run' : null;
        const r = el('a', {href: '#', class: 'restore-link' + (lock ? ' disabled' : ''), title: lock || 'Put the original bytes back',
          text: 'restore…', dataset: {op: o.op_id}});
        r.addEventListener('click', (ev) => {
          ev.preventDefault();
          if (!lock) (o.kind === 'retire' ? restoreRetiredFlow : restoreFlow)(model, o, onError);
        });
        actions.appendChild(r);
      } else if (o.restore_note) {
        actions.appendChild(el('span', {class: 'muted', text: o.restore_note}));
      }
      const backup = backupCell(o);
      return el('tr', {dataset: {op: o.op_id}},
        el('td', {text: when(o.finished_at || o.started_at)}),
        showRun ? el('td', {class: 'mono', text: o.run}) : null,
        el('td', {}, el('span', {class: 'mono small', text: o.op_id}), ' ', el('span', {class: 'muted', text: o.kind + (o.of_op ? ' of ' + o.of_op : '')})),
        el('td', {text: o.policy || '—'}),
        outcomeCell(o),
        el('td', {class: 'num', text: o.kind === 'reduce' ? bytes(o.bytes_before) + ' → ' + bytes(o.bytes_after) : '—'}),
        el('td', {class: 'num backup', text: backup}),
        actions);
    })));
}

export class OperationsView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.el = el('section', {class: 'operations-page'});
    this._last = {};
  }

  update(state) {
    const key = {o: state.operations, a: state.actions, j: state.jobs, ov: state.overview, k: state.keptBlobs};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    clear(this.el);
    const ov = state.overview;
    const lock = !state.actions.enabled ? 'Actions are off: ' + state.actions.reasons.join(' ')
      : this.model.anyActiveJob() ? 'Wait for the running job to finish' : null;
    const age = el('select', {class: 'purge-age', 'aria-label': 'Purge backups older than'},
      [['all', 'all backups'], ['86400', 'older than 1 day'], ['604800', 'older than 7 days'], ['2592000', 'older than 30 days']]
        .map(([v, t]) => el('option', {value: v, text: t})));
    const purge = button('Purge…', () => {
      const opts = age.value === 'all' ? {} : {older_than_s: Number(age.value)};
      purgeFlow(this.model, opts, this.onError);
    }, {kind: 'flat', disabled: !!lock, title: lock || 'Delete kept backups to free their space'});
    purge.classList.add('purge');
    this.el.append(
      el('div', {class: 'plan-box purge-box'},
        el('div', {class: 'plan-head'},
          el('h3', {text: 'Backups in the vault: ' + (ov ? bytes(ov.vault_bytes) : '…')}),
          el('span', {class: 'spacer'}), age, purge),
        el('p', {class: 'muted', text: 'A reduced run can be restored exactly as long as its backup is kept. ' +
          'Purging deletes backups (a backup another kept operation still needs is never deleted).'})));
    if (!state.operations) {
      this.el.appendChild(el('div', {class: 'empty', text: 'Loading operations…'}));
      return;
    }
    if (!state.operations.length) {
      this.el.appendChild(el('div', {class: 'empty', text: 'No operations yet.'}));
      return;
    }
    this.el.appendChild(operationsTable(this.model, state.operations, this.onError));
    const kept = keptBlobsBox(state.keptBlobs || []);
    if (kept) this.el.appendChild(kept);
  }
}

/** Bytes a restore (or a rollback) found where a file belonged and kept in the vault: late
 * records written to a reduced file among them; and the originals a restore left in the vault
 * because another file stood at their path (code not_restored). What each holds, and the command
 * that brings it back. */
function keptBlobsBox(blobs) {
  if (!blobs.length) return null;
  const failed = blobs.filter((b) => b.error);
  const rows = blobs.filter((b) => !b.error);
  return el('div', {class: 'plan-box kept-blobs'},
    el('h3', {text: 'Kept in the vault in a file\'s place (' + rows.length + ')'}),
    el('p', {class: 'muted', text: 'A restore never overwrites what it finds where an original goes back: those bytes ' +
      '(records written after the reduction, for one) are kept here; where another file stands at the path, the ' +
      'original itself stays here instead [not_restored]. Each comes with the command that copies it back.'}),
    failed.map((b) => el('div', {class: 'bad', text: 'Could not list them: ' + b.error})),
    rows.length ? el('table', {class: 'table kept-blobs-table'},
      el('thead', {}, el('tr', {}, ['Run', 'What it holds', 'Size', 'Bring it back'].map((h) => el('th', {text: h})))),
      el('tbody', {}, rows.map((b) => el('tr', {dataset: {code: b.code, op: b.op_id}},
        el('td', {class: 'mono', text: b.run || '—'}),
        el('td', {}, b.holds, b.late_records ? el('div', {class: 'ok small', text: plural(b.late_records, 'late record') +
          ' back in the run' + (b.late_records_file ? ' as ' + b.late_records_file : '')}) : null,
        el('div', {class: 'muted small', text: '[' + b.code + '] ' + (b.op_id || '') + (b.present ? '' : ' · missing from the vault')})),
        el('td', {class: 'num', text: bytes(b.size)}),
        el('td', {}, b.present && b.bring_back ? el('code', {class: 'mono small bring-back', text: b.bring_back}) : el('span', {class: 'bad', text: 'missing'}))))))
      : null);
}

export class HistoryView {
  constructor(model) {
    this.model = model;
    this.el = el('section', {class: 'history-page'});
    this._last = null;
  }

  update(state) {
    if (state.history === this._last) return;
    this._last = state.history;
    clear(this.el);
    const h = state.history;
    if (!h) {
      this.el.appendChild(el('div', {class: 'empty', text: 'Loading the change log…'}));
      return;
    }
    if (!h.entries.length) {
      this.el.appendChild(el('div', {class: 'empty', text: 'Nothing has been changed in this logdir yet.'}));
      return;
    }
    // how many there are, above the newest rows (at the foot of 500 rows it was read last, if ever);
    // a bucket's page reads only the manifests it shows: its total is then a lower bound
    if (h.total > h.entries.length) {
      const atLeast = h.total_exact === false;
      this.el.appendChild(el('p', {class: 'muted history-total', 'data-exact': String(!atLeast),
        title: atLeast ? 'The older operations of this bucket were counted without being read: each counts once, '
          + 'its restore and purge not counted, so the change log holds at least this many entries.' : undefined,
        text: 'Newest ' + h.entries.length + ' of ' + (atLeast ? 'at least ' : '') + h.total + ' shown.'}));
    }
    this.el.appendChild(el('table', {class: 'table history'},
      el('thead', {}, el('tr', {}, ['When', 'What', 'Run', 'Policy', 'Before → after', 'Outcome', 'Who'].map((t) => el('th', {text: t})))),
      el('tbody', {}, h.entries.map((e) => el('tr', {},
        el('td', {text: when(e.time)}),
        el('td', {text: e.kind || '—'}),
        el('td', {class: 'mono', text: e.run || '—'}),
        el('td', {text: e.policy || '—'}),
        el('td', {class: 'num', text: bytes(e.before) + ' → ' + bytes(e.after)}),
        el('td', {class: historyClass(e), title: e.reason || '',
          text: e.outcome === 'verified' ? 'verified ✓' : e.outcome === 'restored' ? 'restored ✓'
            : (e.outcome || '—') + (e.reason ? ': ' + e.reason : '')}),
        el('td', {class: 'muted', text: [e.user, e.host].filter(Boolean).join('@')}))))));
  }
}
