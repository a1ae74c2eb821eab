// Run detail: categories, the plan under the chosen policy (with its fidelity lines; that is the dry run),
// the reduce button, profile sessions, files and this run's operations.

import {ago, button, bytes, clear, el, fidelityList, plural, share, stackedBar, swatch, when} from './common.js';
import {lockReason} from './overview.js';
import {operationsTable} from './operations.js';
import {reduceFlow, summarizeActions} from './reduce.js';

export class RunView {
  constructor(model, onError) {
    this.model = model;
    this.onError = onError;
    this.el = el('section', {class: 'run-detail'});
    this._last = {};
    this.actionsOpen = false;
  }

  update(state) {
    const key = {d: state.runDetail, e: state.runError, j: state.jobs, a: state.actions, ov: state.overview,
      r: state.selectedRun};
    if (Object.keys(key).every((k) => key[k] === this._last[k])) return;
    this._last = key;
    this.render(state);
  }

  render(state) {
    clear(this.el);
    const back = el('a', {href: '#', class: 'back', text: '← All runs'});
    back.addEventListener('click', (ev) => {
      ev.preventDefault();
      this.model.go('runs');
    });
    this.el.appendChild(back);
    if (state.runError) {
      this.el.appendChild(el('div', {class: 'banner banner-error', text: state.runError}));
      return;
    }
    const d = state.runDetail;
    if (!d) {
      this.el.appendChild(el('div', {class: 'empty', text: 'Loading ' + state.selectedRun + '…'}));
      return;
    }
    const r = d.run;
    const labels = {};
    for (const c of r.categories) labels[c.name] = c.label;
    const catBytes = {};
    for (const c of r.categories) catBytes[c.name] = c.bytes;
    this.el.append(
      el('h2', {class: 'run-title'}, el('span', {class: 'mono', text: r.name})),
      el('div', {class: 'muted', text: bytes(r.total_bytes) + ' · ' + plural(r.file_count, 'file') +
        ' · last change ' + ago(r.newest_mtime) + ' (' + when(r.newest_mtime) + ')'}),
      stackedBar(catBytes, r.total_bytes, r.total_bytes, labels));
    if (r.warnings.length) {
      this.el.appendChild(el('div', {class: 'banner banner-warn'}, el('strong', {text: 'Warnings'}),
        r.warnings.slice(0, 10).map((w) => el('div', {text: w}))));
    }

    // plan and actions
    this.el.appendChild(this.planSection(state, d));

    // categories
    const cats = el('table', {class: 'table categories'},
      el('thead', {}, el('tr', {}, ['Category', 'Bytes', 'Share', 'Files', 'Records', 'Tags', 'Steps'].map((h) => el('th', {text: h})))),
      el('tbody', {}, r.categories.map((c) => el('tr', {},
        el('td', {}, swatch(c.name), ' ', c.label),
        el('td', {class: 'num', text: bytes(c.bytes)}),
        el('td', {class: 'num', text: share(c.bytes, r.total_bytes)}),
        el('td', {class: 'num', text: String(c.files)}),
        el('td', {class: 'num', text: c.records ? String(c.records) : '—'}),
        el('td', {title: c.tags.join(', '), text: c.tag_count ? c.tags.slice(0, 3).join(', ') + (c.tag_count > 3 ? ' … (' + c.tag_count + ')' : '') : '—'}),
        el('td', {class: 'num', text: c.min_step === null || c.min_step === undefined ? '—' : c.min_step + '–' + c.max_step})))));
    this.el.append(el('h3', {text: 'Categories'}), cats);

    // sessions
    if (r.sessions.length) {
      this.el.append(el('h3', {text: 'Profile sessions (' + r.sessions.length + ')'}),
        el('table', {class: 'table sessions'},
          el('thead', {}, el('tr', {}, ['Session', 'Kind', 'Hosts', 'Files', 'Bytes', 'Time'].map((h) => el('th', {text: h})))),
          el('tbody', {}, r.sessions.map((s) => el('tr', {},
            el('td', {class: 'mono', text: s.name}),
            el('td', {text: s.kind}),
            el('td', {text: s.hosts.join(', ') || '—'}),
            el('td', {class: 'num', text: String(s.files)}),
            el('td', {class: 'num', text: bytes(s.bytes)}),
            el('td', {text: when(s.mtime)}))))));
    }

    // operations on this run
    if (d.operations.length) {
      this.el.append(el('h3', {text: 'Operations on this run'}), operationsTable(this.model, d.operations, this.onError, {run: false}));
    }

    // files
    const files = el('table', {class: 'table files'},
      el('thead', {}, el('tr', {}, ['File', 'Kind', 'Bytes', 'Category'].map((h) => el('th', {text: h})))),
      el('tbody', {}, r.files.map((f) => {
        const main = Object.entries(f.categories).sort((a, b) => b[1] - a[1])[0];
        return el('tr', {title: f.warning || ''},
          el('td', {class: 'mono path', text: f.path}),
          el('td', {text: f.kind}),
          el('td', {class: 'num', text: bytes(f.size)}),
          el('td', {}, main ? [swatch(main[0]), ' ', labels[main[0]] || main[0]] : '—',
            Object.keys(f.categories).length > 1 ? el('span', {class: 'muted', text: ' +' + (Object.keys(f.categories).length - 1)}) : null));
      })));
    this.el.append(el('h3', {text: 'Files' + (r.file_count > r.files.length ? ' (largest ' + r.files.length + ' of ' + r.file_count + ')' : '')}), files);
  }

  planSection(state, d) {
    const box = el('div', {class: 'plan-box'});
    const rp = d.plan;
    const lock = lockReason(this.model, d.run.name);
    const canReduce = rp && !rp.skipped && rp.actions.length > 0;
    const reduceBtn = button('Reduce…', () => reduceFlow(this.model, [d.run.name], this.onError),
      {kind: 'primary', disabled: !!lock || !canReduce, title: lock || (canReduce ? '' : (rp && rp.skipped) || 'Nothing to reduce')});
    reduceBtn.classList.add('reduce-run');
    box.appendChild(el('div', {class: 'plan-head'},
      el('h3', {}, 'Plan under policy ', el('span', {class: 'mono', text: d.policy})),
      el('span', {class: 'spacer'}), reduceBtn));
    if (!rp) {
      box.appendChild(el('p', {class: 'muted', text: 'Not a run TensorBoard reads; nothing is planned.'}));
      return box;
    }
    if (rp.skipped) {
      box.appendChild(el('p', {class: 'plan-skipped', text: 'Nothing will be done: ' + rp.skipped}));
    } else {
      box.appendChild(el('p', {class: 'plan-summary'}, 'Frees ', el('strong', {text: bytes(rp.removable_bytes)}),
        ': ' + bytes(rp.bytes_before) + ' → ' + bytes(rp.expected_after_bytes) +
        (rp.actions.some((a) => a.estimated) ? ' (estimated)' : '') + '.'));
      box.appendChild(el('ul', {class: 'changes'}, summarizeActions(rp.actions).map((l) => el('li', {text: l}))));
    }
    if (rp.fidelity.length) {
      box.appendChild(el('div', {class: 'dialog-sub', text: 'What the dashboards will show afterwards:'}));
      box.appendChild(fidelityList(rp.fidelity, rp.fidelity_details));
    }
    if (rp.category_changes && rp.category_changes.length && !rp.skipped) {
      box.appendChild(categoryBars(rp.category_changes, 'expected after'));
    }
    if (rp.actions.length) {
      const details = el('details', {class: 'actions-list', open: this.actionsOpen ? true : null},
        el('summary', {text: plural(rp.actions.length, 'action') + ' in detail'}),
        el('table', {class: 'table'},
          el('thead', {}, el('tr', {}, ['Action', 'Path', 'Category', 'Before', 'After', 'Why'].map((h) => el('th', {text: h})))),
          el('tbody', {}, rp.actions.map((a) => el('tr', {},
            el('td', {text: a.kind}),
            el('td', {class: 'mono path', text: a.path + (a.new_path ? ' → ' + a.new_path : '')}),
            el('td', {text: a.label || a.category}),
            el('td', {class: 'num', text: bytes(a.bytes_before)}),
            el('td', {class: 'num', text: bytes(a.bytes_after) + (a.estimated ? ' ≈' : '')}),
            el('td', {class: 'muted', text: a.reason}))))));
      details.addEventListener('toggle', () => {
        this.actionsOpen = details.open;
      });
      box.appendChild(details);
    }
    return box;
  }
}

/** Per-category bars, before and after (one pair per category). */
export function categoryBars(changes, afterLabel) {
  const max = Math.max(1, ...changes.map((c) => Math.max(c.before, c.after)));
  const box = el('div', {class: 'cat-bars', role: 'table', 'aria-label': 'Bytes per category before and after'});
  box.appendChild(el('div', {class: 'cat-bars-legend muted'},
    el('span', {class: 'bar-key before'}), ' before  ', el('span', {class: 'bar-key after'}), ' ' + (afterLabel || 'after')));
  for (const c of changes) {
    box.appendChild(el('div', {class: 'cat-bar-row', role: 'row'},
      el('span', {class: 'cat-bar-label', role: 'cell'}, swatch(c.name), ' ', c.label),
      el('span', {class: 'cat-bar-pair', role: 'cell'},
        el('span', {class: 'cat-bar before', style: {width: (100 * c.before) / max + '%'}, title: 'before: ' + bytes(c.before)}),
        el('span', {class: 'cat-bar after', style: {width: Math.max(c.after ? 0.5 : 0, (100 * c.after) / max) + '%'}, title: 'after: ' + bytes(c.after)})),
      el('span', {class: 'cat-bar-num num', role: 'cell', text: bytes(c.before) + ' → ' + bytes(c.after)})));
  }
  return box;
}
