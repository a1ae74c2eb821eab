// The reduce and restore flows: dry run → confirmation stating the bytes and the changes → job.

import {bytes, el, fidelityList, plural} from './common.js';
import {confirmDialog} from './dialog.js';

const KIND_WORDS = {
  delete: ['delete', 'file', 'files'],
  compress: ['compress', 'file', 'files'],
  rewrite: ['rewrite', 'event file', 'event files'],
  remove_dir: ['remove', 'emptied folder', 'emptied folders'],
};

/** "delete 12 files (profile sessions (xplane) 8.0 MB, xprof caches 1.2 MB)" per kind. */
export function summarizeActions(actions) {
  const byKind = new Map();
  for (const a of actions) {
    if (!byKind.has(a.kind)) byKind.set(a.kind, {n: 0, cats: new Map()});
    const k = byKind.get(a.kind);
    k.n++;
    const label = a.label || a.category;
    k.cats.set(label, (k.cats.get(label) || 0) + (a.bytes_before - (a.bytes_after || 0)));
  }
  const lines = [];
  for (const [kind, k] of byKind) {
    const w = KIND_WORDS[kind] || [kind, 'item', 'items'];
    const cats = [...k.cats.entries()].filter(([, b]) => b > 0).map(([l, b]) => l + ' ' + bytes(b));
    lines.push(w[0] + ' ' + plural(k.n, w[1], w[2]) + (cats.length ? ' — ' + cats.join(', ') : ''));
  }
  return lines;
}

function vaultNote(model) {
  const st = model.state.status || {};
  return st.backup_dir
    ? 'Every removed or replaced file is first backed up (sha256-checked) to ' + st.backup_dir +
      ', so the run can be restored exactly.'
    : 'Every removed or replaced file is first backed up (sha256-checked) in the logdir\'s vault ' +
      '(.tb-footprint). The vault shares the disk, so the space is really freed when you purge the backup ' +
      '(Operations → Purge); until then you can restore the run exactly.';
}

/**
 * Dry run, then confirm, then start the job. Returns the job, or null if cancelled / nothing to do.
 */
export async function reduceFlow(model, runNames, onError) {
  let plan;
  try {
    plan = await model.dryRun(runNames);
  } catch (e) {
    onError(e.message);
    return null;
  }
  const todo = plan.runs.filter((rp) => !rp.skipped && rp.actions.length);
  const skipped = plan.runs.filter((rp) => rp.skipped);
  if (!todo.length) {
    onError(skipped.length ? 'Nothing to reduce: ' + skipped.map((rp) => rp.run + ' — ' + rp.skipped).join('; ')
      : 'Nothing to reduce under policy ' + model.state.policy + '.');
    return null;
  }
  const free = todo.reduce((s, rp) => s + rp.removable_bytes, 0);
  const before = todo.reduce((s, rp) => s + rp.bytes_before, 0);
  const body = [];
  body.push(el('p', {class: 'dialog-lead'},
    'Frees ', el('strong', {class: 'free-bytes', text: bytes(free)}),
    ' of ' + bytes(before) + ' in ' + plural(todo.length, 'run') + ' under policy ',
    el('strong', {text: model.state.policy}), '.'));
  const shown = todo.slice(0, 8);
  for (const rp of shown) {
    const block = el('div', {class: 'dialog-run'},
      el('div', {class: 'dialog-run-title'},
        el('span', {class: 'mono', text: rp.run}),
        ' — ' + bytes(rp.bytes_before) + ' → ' + bytes(rp.expected_after_bytes) +
        (rp.actions.some((a) => a.estimated) ? ' (estimated)' : '')),
      el('ul', {class: 'changes'}, summarizeActions(rp.actions).map((l) => el('li', {text: l}))));
    if (todo.length === 1 && rp.fidelity.length) {
      block.appendChild(el('div', {class: 'dialog-sub', text: 'What the dashboards will show:'}));
      block.appendChild(fidelityList(rp.fidelity, rp.fidelity_details));
    }
    body.push(block);
  }
  if (todo.length > shown.length) body.push(el('p', {text: '… and ' + plural(todo.length - shown.length, 'more run')}));
  if (skipped.length) {
    body.push(el('p', {class: 'muted', text: 'Left alone: ' + skipped.slice(0, 5).map((rp) => rp.run + ' (' + rp.skipped + ')').join('; ') +
      (skipped.length > 5 ? ' …' : '')}));
  }
  body.push(el('p', {class: 'muted', text: vaultNote(model)}));
  body.push(el('p', {class: 'muted', text: 'Each run is changed only after TensorBoard\'s own readers have checked that ' +
    'the reduced run shows what the policy promises; on any doubt the run is rolled back to its exact bytes.'}));
  const ok = await confirmDialog({
    title: todo.length === 1 ? 'Reduce ' + todo[0].run + '?' : 'Reduce ' + todo.length + ' runs?',
    body, confirm: todo.length === 1 ? 'Reduce' : 'Reduce ' + todo.length + ' runs', danger: true,
  });
  if (!ok) return null;
  try {
    // the plans shown: a run whose plan changes before the job plans it is left alone (plan_changed)
    return await model.reduce(todo.map((rp) => rp.run), todo.map((rp) => rp.digest));
  } catch (e) {
    onError(e.message);
    return null;
  }
}

/**
 * "Reduce all matching": the server's dry run of every run whose name holds `q` (totals and the
 * first runs' plans), then confirm, then a job over the same selector — the tab never sends (nor
 * holds) the names of 100,000 runs. Returns the job, or null.
 */
export async function reduceMatchingFlow(model, q, onError) {
  let notice = null;
  // the server acts only on the to-do list whose digest the confirmed dialog showed: if runs
  // appeared, changed or went quiet meanwhile it says so (409) and the new plan is shown again
  for (let attempt = 0; attempt < 3; attempt++) {
    const outcome = await confirmMatching(model, q, notice, onError);
    if (outcome.job !== undefined) return outcome.job;
    notice = outcome.notice;
  }
  onError(notice || 'The runs to reduce keep changing; try again later.');
  return null;
}

async function confirmMatching(model, q, notice, onError) {
  let plan;
  try {
    plan = await model.dryRunMatching(q);
  } catch (e) {
    onError(e.message);
    return {job: null};
  }
  if (!plan.todo_runs) {
    onError((notice ? notice + ' ' : '') + (plan.skipped_runs ? 'Nothing to reduce: ' + plan.skipped.map((rp) => rp.run + ' — ' + rp.skipped).join('; ')
      : 'Nothing to reduce under policy ' + model.state.policy + '.'));
    return {job: null};
  }
  const body = [];
  if (notice) body.push(el('p', {class: 'dialog-notice', text: notice}));
  body.push(el('p', {class: 'dialog-lead'},
    'Frees ', el('strong', {class: 'free-bytes', text: bytes(plan.removable_bytes)}),
    ' of ' + bytes(plan.bytes_before) + ' in ' + plural(plan.todo_runs, 'run') +
    (q ? ' matching “' + q + '”' : ' (every run of the logdir)') +
    ' under policy ', el('strong', {text: model.state.policy}), '.'));
  for (const rp of plan.runs) {
    body.push(el('div', {class: 'dialog-run'},
      el('div', {class: 'dialog-run-title'},
        el('span', {class: 'mono', text: rp.run}),
        ' — ' + bytes(rp.bytes_before) + ' → ' + bytes(rp.expected_after_bytes) +
        (rp.actions.some((a) => a.estimated) ? ' (estimated)' : '')),
      el('ul', {class: 'changes'}, summarizeActions(rp.actions).map((l) => el('li', {text: l})))));
  }
  if (plan.todo_runs > plan.runs.length) body.push(el('p', {text: '… and ' + plural(plan.todo_runs - plan.runs.length, 'more run')}));
  if (plan.skipped_runs) {
    body.push(el('p', {class: 'muted', text: 'Left alone: ' + plural(plan.skipped_runs, 'run') + ' — ' +
      plan.skipped.map((rp) => rp.run + ' (' + rp.skipped + ')').join('; ') + (plan.skipped_runs > plan.skipped.length ? ' …' : '')}));
  }
  body.push(el('p', {class: 'muted', text: vaultNote(model)}));
  body.push(el('p', {class: 'muted', text: 'Exactly these ' + plural(plan.todo_runs, 'run') + ' are reduced: if the ' +
    'list changes before you confirm, nothing is done and the new plan is shown.'}));
  body.push(el('p', {class: 'muted', text: 'Each run is changed only after TensorBoard\'s own readers have checked that ' +
    'the reduced run shows what the policy promises; on any doubt the run is rolled back to its exact bytes.'}));
  const ok = await confirmDialog({title: 'Reduce ' + plural(plan.todo_runs, 'run') + '?', body,
    confirm: 'Reduce ' + plural(plan.todo_runs, 'run'), danger: true});
  if (!ok) return {job: null};
  try {
    return {job: await model.reduceMatching(q, plan.digest)};
  } catch (e) {
    if (e.code === 409 && e.body && e.body.reason_code === 'not_in_plan') return {notice: e.message};
    onError(e.message);
    return {job: null};
  }
}

export async function restoreFlow(model, op, onError) {
  const body = [
    el('p', {class: 'dialog-lead'}, 'Puts back ', el('strong', {text: plural(op.files, 'file')}),
      ' (' + bytes(op.backup_bytes) + ') of run ', el('strong', {class: 'mono', text: op.run}),
      ' byte for byte from the vault, and removes what the reduction created.'),
    el('p', {text: 'The run goes from ' + bytes(op.bytes_after) + ' back to ' + bytes(op.bytes_before) +
      '. Operation ' + op.op_id + (op.policy ? ' (policy ' + op.policy + ')' : '') + '.'}),
    el('p', {class: 'muted', text: 'Every restored file is checked against its sha256 before the restore counts as done.'}),
  ];
  const ok = await confirmDialog({title: 'Restore ' + op.run + '?', body, confirm: 'Restore', danger: false});
  if (!ok) return null;
  try {
    return await model.restore(op.op_id);
  } catch (e) {
    onError(e.message);
    return null;
  }
}

export async function purgeFlow(model, opts, onError) {
  let preview;
  try {
    preview = await model.purgePreview(opts);
  } catch (e) {
    onError(e.message);
    return null;
  }
  if (!preview.ops.length) {
    onError('No backup to purge' + (opts.older_than_s ? ' older than that.' : '.'));
    return null;
  }
  const restoredNote = preview.ops.some((o) => !o.restored)
    ? 'Runs whose backup is purged can no longer be restored.' : 'All of these runs were already restored.';
  const body = [
    el('p', {class: 'dialog-lead'}, 'Deletes the backups of ', el('strong', {text: plural(preview.ops.length, 'operation')}),
      ' and frees ', el('strong', {class: 'free-bytes', text: bytes(preview.freed_bytes)}), '.'),
    el('ul', {class: 'changes'}, preview.ops.slice(0, 12).map((o) =>
      el('li', {text: o.run + ' — ' + o.op_id + ' — ' + bytes(o.bytes) + (o.restored ? ' (restored)' : '')}))),
    preview.ops.length > 12 ? el('p', {text: '… and ' + (preview.ops.length - 12) + ' more'}) : null,
    el('p', {class: 'warn-text', text: restoredNote}),
  ];
  const ok = await confirmDialog({title: 'Purge backups?', body, confirm: 'Purge ' + bytes(preview.freed_bytes), danger: true});
  if (!ok) return null;
  // Purge is the one change that cannot be undone: a second, separate confirmation that says
  // how many original files exist nowhere else and will be gone for good.
  const lost = preview.originals_lost || 0;
  const lostRuns = new Set(preview.ops.filter((o) => (o.originals || 0) > 0).map((o) => o.run)).size;
  const second = lost
    ? [el('p', {class: 'dialog-lead'}, el('strong', {class: 'originals-lost', text: plural(lost, 'original file')}),
      ' of ' + plural(lostRuns, 'run') + ' exist only in these backups.'),
    el('p', {class: 'warn-text', text: 'After the purge they are gone for good: no restore, no undo.'})]
    : [el('p', {class: 'dialog-lead'}, el('strong', {class: 'originals-lost', text: 'No original file'}),
      ' is lost: every run in this purge was restored, so its files are back in the logdir.'),
    el('p', {class: 'muted', text: 'Only the copies in the vault are deleted.'})];
  // runs of other users taken on request (--include-others-runs): they lose them too, and are not asked
  const others = [...new Map(preview.ops.flatMap((o) => o.others || []).map((u) => [u.uid, u.user])).values()];
  if (lost && others.length) {
    second.push(el('p', {class: 'warn-text others-lost',
      text: 'Among them are files of ' + others.join(', ') + ': their runs were taken into your vault on request, and they cannot restore them either.'}));
  }
  const sure = await confirmDialog({title: lost ? 'Lose ' + plural(lost, 'original') + ' for good?' : 'Delete the backups?',
    body: second, confirm: lost ? 'Delete ' + plural(lost, 'original') + ' for good' : 'Delete the backups', danger: true});
  if (!sure) return null;
  try {
    return await model.purge(Object.assign({}, opts, {originals_lost: lost, op_ids: preview.ops.map((o) => o.op_id)}));
  } catch (e) {
    onError(e.message);
    return null;
  }
}
