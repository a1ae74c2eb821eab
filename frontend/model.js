// Footprint tab: data and state. Views read `model.state` and subscribe to changes; every
// request is a relative fetch('./…'), which TensorBoard resolves to /data/plugin/footprint/….

const POLL_IDLE_MS = 30000;   // overview refresh when nothing runs
const POLL_BUSY_MS = 4000;    // overview refresh while a job runs or the scan is refreshing
const POLL_JOB_MS = 700;      // job progress
const FILTER_DEBOUNCE_MS = 250;  // the filter box asks the server once typing pauses
export const PAGE_SIZE = 100;    // runs per page: the table never draws more

export class ApiError extends Error {
  constructor(message, code, body) {
    super(message);
    this.code = code;
    this.body = body || {};
  }
}

export async function fetchJSON(path, init) {
  let response;
  try {
    response = await fetch('./' + path, Object.assign({credentials: 'same-origin'}, init || {}));
  } catch (e) {
    throw new ApiError('TensorBoard is not reachable (' + e.message + ')', 0);
  }
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    body = null;
  }
  if (!response.ok) {
    const msg = (body && body.error) || response.status + ' ' + response.statusText;
    throw new ApiError(msg, response.status, body);
  }
  return body;
}

export function query(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    for (const one of Array.isArray(v) ? v : [v]) {
      parts.push(encodeURIComponent(k) + '=' + encodeURIComponent(one));
    }
  }
  return parts.length ? '?' + parts.join('&') : '';
}

/**
 * Why this page must not act, when something other than TensorBoard's own page frames it
 * (clickjacking: a foreign page overlays the tab with a nearly transparent frame), else null.
 *
 * Allowed: every ancestor window is of this page's origin (TensorBoard's page framing the tab,
 * as it always does), or the page is top-level (nothing can overlay a top-level window).
 * Refused: any ancestor of another origin, or an opaque one (a sandboxed frame).
 */
export function framingProblem(win) {
  const w0 = win || window;
  if (w0.top === w0.self) return null;
  const origin = w0.location.origin;
  const foreign = 'This tab is shown inside a page of another origin, which could trick you into clicking: ' +
    'reduce, restore and purge are off here. Open TensorBoard itself in its own browser tab.';
  if (!origin || origin === 'null') return foreign;
  const ancestors = w0.location.ancestorOrigins;
  if (ancestors) {
    for (let i = 0; i < ancestors.length; i++) if (ancestors[i] !== origin) return foreign;
  }
  try {
    let w = w0;
    for (let depth = 0; w !== w.top && depth < 32; depth++) {
      w = w.parent;
      // reading the location or document of a window of another origin throws
      if (w.location.origin !== origin || !w.document) return foreign;
    }
    if (w !== w.top) return foreign;
  } catch (e) {
    return foreign;
  }
  return null;
}

/** True when nobody can see the tab: browser tab hidden, or TensorBoard collapsed our iframe. */
export function isHidden() {
  return document.visibilityState === 'hidden' || window.innerHeight === 0;
}

export class Model {
  constructor() {
    this.state = {
      status: null,
      actions: {enabled: false, reasons: ['loading…']},
      token: null,
      tokenHeader: 'X-Footprint-Token',
      policies: [],
      policy: null,
      overview: null,
      overviewError: null,
      filter: '',
      // the runs page the server sorts, filters and cuts (GET runs?offset&limit&sort&order&q)
      page: {offset: 0, limit: PAGE_SIZE, sort: 'size', order: 'desc'},
      view: 'runs',          // runs | run | check | operations | history
      selectedRun: null,
      runDetail: null,
      runError: null,
      plans: {},             // run -> dry-run plan shown in the detail page
      jobs: {},              // id -> job, for jobs started or seen in this tab
      jobOrder: [],
      dismissed: {},
      checkOp: null,
      check: null,
      checkError: null,
      operations: null,
      keptBlobs: [],     // bytes a restore found in a file's place, kept in the vault (api.status)
      history: null,
      message: null,
    };
    this._listeners = new Set();
    this._timers = {};
    this._runsAsked = 0;  // the newest runs request: an older answer arriving later is dropped
    this.tokenError = null;
    this.frameError = framingProblem();
  }

  subscribe(fn) {
    this._listeners.add(fn);
    return () => this._listeners.delete(fn);
  }

  set(patch) {
    Object.assign(this.state, patch);
    for (const fn of this._listeners) {
      try {
        fn(this.state);
      } catch (e) {
        console.error('footprint view failed', e);
      }
    }
  }

  // --- start-up -------------------------------------------------------------------------
  async init() {
    const [status, policies] = await Promise.all([
      fetchJSON('status'), fetchJSON('policies'),
    ]);
    this.set({
      status,
      actions: this._actions(status.actions),
      tokenHeader: status.token_header || this.state.tokenHeader,
      policies: policies.policies,
      policy: policies.default,
    });
    for (const job of status.jobs || []) this._track(job);
    if (!this.frameError) {
      await this.refreshToken().catch((e) => {
        // e.g. another Unix user's browser, or a proxy that rewrites Host: show everything,
        // but say why actions are off (and the server's reason code)
        this.tokenError = {text: 'This page cannot get the action token: ' + e.message,
          code: (e.body && e.body.reason_code) || 'no_token'};
        this.set({actions: this._actions(this.state.actions)});
      });
    }
    await this.loadRuns({wait: 60});
    this._startPolling();
  }

  async refreshToken() {
    const t = await fetchJSON('token');
    this.tokenError = null;
    this.set({token: t.token, tokenHeader: t.header, actions: this._actions(t.actions)});
    return t.token;
  }

  /** The server's word on write actions, plus what this page itself knows (framing, no token). */
  _actions(server) {
    const a = server || {enabled: false, reasons: []};
    const mine = [];
    if (this.frameError) mine.push({text: this.frameError, code: 'foreign_frame'});
    if (this.tokenError) mine.push(this.tokenError);
    if (!mine.length) return a;
    return Object.assign({}, a, {enabled: false, reasons: (a.reasons || []).concat(mine.map((m) => m.text)),
      codes: (a.codes || []).concat(mine.map((m) => m.code))});
  }

  async post(path, body, retried) {
    // framed by another origin: this page acts on nothing, whatever was clicked
    if (this.frameError) throw new ApiError(this.frameError, 0, {reason_code: 'foreign_frame'});
    if (!this.state.token) await this.refreshToken();
    const headers = {'Content-Type': 'application/json'};
    headers[this.state.tokenHeader] = this.state.token || '';
    try {
      const res = await fetchJSON(path, {method: 'POST', headers, body: JSON.stringify(body || {})});
      this._clearError();
      return res;
    } catch (e) {
      if (!retried && e.code === 403 && /token/i.test(e.message)) {
        await this.refreshToken();
        return this.post(path, body, true);
      }
      throw e;
    }
  }

  // --- reads ----------------------------------------------------------------------------
  async loadStatus() {
    const status = await fetchJSON('status');
    this.set({status, actions: this._actions(status.actions)});
    for (const job of status.jobs || []) this._track(job);
  }

  async loadRuns(opts) {
    // responses are matched to the policy key this tab sent (a built-in name or the path of
    // TensorBoard's policy file), never to the policy's own name, which a file chooses freely;
    // and to the newest request, so a slow answer for an old filter or page never wins
    const asked = this.state.policy;
    const seq = ++this._runsAsked;
    const pg = this.state.page;
    try {
      const overview = await fetchJSON('runs' + query({policy: asked, wait: opts && opts.wait, offset: pg.offset,
        limit: pg.limit, sort: pg.sort, order: pg.order, q: this.state.filter.trim() || undefined}));
      if (this.state.policy !== asked || seq !== this._runsAsked) return;  // a newer load follows
      this.set({overview, overviewError: null, actions: this._actions(overview.actions)});
    } catch (e) {
      if (seq === this._runsAsked) this.set({overviewError: e.message});
    }
  }

  async setPolicy(name) {
    this.set({policy: name, plans: {}});
    await this.loadRuns();
    if (this.state.view === 'run' && this.state.selectedRun) await this.loadRun(this.state.selectedRun);
  }

  /** The filter box: shown at once, asked of the server once typing pauses (first page). */
  setFilter(text) {
    this.set({filter: text});
    clearTimeout(this._timers.filter);
    this._timers.filter = setTimeout(() => {
      this.set({page: Object.assign({}, this.state.page, {offset: 0})});
      this.loadRuns();
    }, FILTER_DEBOUNCE_MS);
  }

  /** A sort header: the same key flips the order, another starts descending (names ascending). */
  setSort(key) {
    const pg = this.state.page;
    const order = pg.sort === key ? (pg.order === 'desc' ? 'asc' : 'desc') : (key === 'name' ? 'asc' : 'desc');
    this.set({page: Object.assign({}, pg, {sort: key, order, offset: 0})});
    return this.loadRuns();
  }

  /** Another page of the runs: `offset` into the matching runs, as the server sorts them. */
  setOffset(offset) {
    this.set({page: Object.assign({}, this.state.page, {offset: Math.max(0, offset)})});
    return this.loadRuns();
  }

  async openRun(name) {
    this.set({view: 'run', selectedRun: name, runDetail: null, runError: null});
    await this.loadRun(name);
  }

  async loadRun(name) {
    const asked = this.state.policy;
    try {
      const detail = await fetchJSON('run' + query({run: name, policy: asked}));
      if (this.state.selectedRun === name && this.state.policy === asked) this.set({runDetail: detail, runError: null});
    } catch (e) {
      if (this.state.selectedRun === name && this.state.policy === asked) this.set({runError: e.message});
    }
  }

  /** The dry run: what the selected policy would do, with nothing changed. */
  async dryRun(runs) {
    // many runs: plan them all and keep ours (a URL naming thousands of runs is too long)
    const many = runs.length > 50;
    const plan = await fetchJSON('plan' + query({policy: this.state.policy, run: many ? undefined : runs}));
    if (many) {
      const wanted = new Set(runs);
      plan.runs = plan.runs.filter((rp) => wanted.has(rp.run));
    }
    const plans = Object.assign({}, this.state.plans);
    for (const rp of plan.runs) plans[rp.run] = rp;
    this.set({plans});
    return plan;
  }

  /** The dry run of every run matching the filter: totals and the first runs' plans (the server's). */
  async dryRunMatching(q) {
    return fetchJSON('plan' + query({policy: this.state.policy, q: q || ''}));
  }

  async loadOperations() {
    try {
      const ops = await fetchJSON('operations');
      this.set({operations: ops.operations, keptBlobs: ops.kept_blobs || []});
    } catch (e) {
      this.set({message: {kind: 'error', text: e.message}});
    }
  }

  async loadHistory() {
    try {
      const h = await fetchJSON('history');
      this.set({history: h});
    } catch (e) {
      this.set({message: {kind: 'error', text: e.message}});
    }
  }

  async openCheck(opId) {
    this.set({view: 'check', checkOp: opId, check: null, checkError: null});
    try {
      const check = await fetchJSON('operation' + query({op: opId}));
      if (this.state.checkOp === opId) this.set({check});
    } catch (e) {
      if (this.state.checkOp === opId) this.set({checkError: e.message});
    }
  }

  /** The open check read again (after a job: a restore changes what it says), kept on screen meanwhile. */
  async reloadCheck(opId) {
    try {
      const check = await fetchJSON('operation' + query({op: opId}));
      // drawn again only when it says something else: a new drawing reloads every picture
      const same = this.state.check && JSON.stringify(this.state.check) === JSON.stringify(check);
      if (!same && this.state.view === 'check' && this.state.checkOp === opId) this.set({check});
    } catch (e) {
      // the check on screen stays; the next open reads it again
    }
  }

  go(view) {
    this.set({view});
    if (view === 'operations') this.loadOperations();
    if (view === 'history') this.loadHistory();
    if (view === 'runs') this.loadRuns();
  }

  // --- jobs -----------------------------------------------------------------------------
  /**
   * Reduce these runs as the dialog showed them: `digests` (each run's plan digest from the dry
   * run) make the server leave alone, with reason plan_changed, a run whose plan changed since.
   */
  async reduce(runs, digests) {
    const body = {runs, policy: this.state.policy};
    if (digests) body.digests = digests;
    const res = await this.post('reduce', body);
    this._track(res.job);
    this._pollJob(res.job.id);
    this.loadRuns();
    return res.job;
  }

  /**
   * Reduce exactly the to-do list of the dry run the user confirmed: a selector and that plan's
   * digest, never the names; the server answers 409 (reason_code not_in_plan) if the list changed.
   */
  async reduceMatching(q, digest) {
    const res = await this.post('reduce', {match: {q: q || ''}, digest, policy: this.state.policy});
    this._track(res.job);
    this._pollJob(res.job.id);
    this.loadRuns();
    return res.job;
  }

  async restore(opId) {
    const res = await this.post('restore', {op: opId});
    this._track(res.job);
    this._pollJob(res.job.id);
    return res.job;
  }

  async purgePreview(opts) {
    const res = await this.post('purge', Object.assign({confirm: false}, opts || {}));
    return res.preview;
  }

  async purge(opts) {
    const res = await this.post('purge', Object.assign({}, opts || {}, {confirm: true}));
    this._track(res.job);
    this._pollJob(res.job.id);
    return res.job;
  }

  async cancel(jobId) {
    const res = await this.post('cancel', {job: jobId});
    this._track(res.job);
  }

  async rescan() {
    await this.post('rescan', {});
    await this.loadRuns();
  }

  dismissJob(id) {
    const dismissed = Object.assign({}, this.state.dismissed);
    dismissed[id] = true;
    this.set({dismissed});
  }

  activeJobFor(run) {
    for (const id of this.state.jobOrder) {
      const j = this.state.jobs[id];
      // a job's dict names a bounded sample of its runs (and those in progress); the overview's
      // busy map below covers the rest of the shown ones
      if (j && (j.state === 'queued' || j.state === 'running') && (j.runs.includes(run) || (j.per_run && run in j.per_run))) return j;
    }
    const busy = this.state.overview && this.state.overview.busy;
    return busy && busy[run] ? {id: busy[run]} : null;
  }

  anyActiveJob() {
    return this.state.jobOrder.some((id) => {
      const j = this.state.jobs[id];
      return j && (j.state === 'queued' || j.state === 'running');
    });
  }

  _track(job) {
    const jobs = Object.assign({}, this.state.jobs);
    const known = jobs[job.id];
    // /status and /jobs omit results: never replace a full answer by a summary
    jobs[job.id] = known && known.result && !job.result ? Object.assign({}, job, {result: known.result}) : job;
    const jobOrder = this.state.jobOrder.includes(job.id) ? this.state.jobOrder : [job.id, ...this.state.jobOrder];
    this.set({jobs, jobOrder});
    if ((job.state === 'queued' || job.state === 'running') && !this._timers['job:' + job.id]) {
      this._pollJob(job.id);
    }
  }

  _pollJob(id) {
    const key = 'job:' + id;
    clearTimeout(this._timers[key]);
    const tick = async () => {
      if (isHidden()) {
        this._timers[key] = setTimeout(tick, POLL_JOB_MS * 3);
        return;
      }
      try {
        const res = await fetchJSON('job' + query({id}));
        const job = res.job;
        this._track(job);
        if (job.state === 'queued' || job.state === 'running') {
          this._timers[key] = setTimeout(tick, POLL_JOB_MS);
          return;
        }
        delete this._timers[key];
        this._jobFinished(job);
      } catch (e) {
        delete this._timers[key];
        this.set({message: {kind: 'error', text: 'Lost track of job ' + id + ': ' + e.message}});
      }
    };
    this._timers[key] = setTimeout(tick, 200);
  }

  /** An earlier error banner goes once a later action succeeds (it no longer describes the tab). */
  _clearError() {
    if (this.state.message && this.state.message.kind === 'error') this.set({message: null});
  }

  async _jobFinished(job) {
    if (job.state === 'done') this._clearError();
    // The server rescans after every job; wait (a little) for that fresh scan.
    await this.loadRuns({wait: 15});
    if (this.state.view === 'run' && this.state.selectedRun) await this.loadRun(this.state.selectedRun);
    if (this.state.view === 'operations') await this.loadOperations();
    if (this.state.view === 'history') await this.loadHistory();
    if (this.state.view === 'check' && this.state.checkOp) await this.reloadCheck(this.state.checkOp);
    setTimeout(() => this.loadRuns(), 1500);
  }

  // --- polling --------------------------------------------------------------------------
  _startPolling() {
    const loop = async () => {
      if (!isHidden()) {
        await this.loadRuns();
        if (this.state.status && this.state.status.recovery &&
            ['pending', 'running'].includes(this.state.status.recovery.state)) {
          await this.loadStatus().catch(() => {});
        }
      }
      const ov = this.state.overview;
      const busy = this.anyActiveJob() || (ov && ov.scan && (ov.scan.refreshing || ov.scan.stale));
      this._timers.poll = setTimeout(loop, busy ? POLL_BUSY_MS : POLL_IDLE_MS);
    };
    this._timers.poll = setTimeout(loop, POLL_IDLE_MS);
    const wake = () => {
      if (isHidden()) return;
      clearTimeout(this._timers.poll);
      this._timers.poll = setTimeout(loop, 0);
    };
    document.addEventListener('visibilitychange', wake);
    window.addEventListener('resize', () => {
      // TensorBoard collapses a plugin's iframe to height 0 when another tab is chosen.
      if (this._wasHidden && !isHidden()) wake();
      this._wasHidden = isHidden();
    });
  }
}
