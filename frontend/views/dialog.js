// A modal confirmation: what will happen, in plain words, and two buttons.

import {button, el} from './common.js';

/**
 * @param {{title: string, body: (Node|Node[]), confirm: string, danger: boolean}} opts
 * @return {!Promise<boolean>} true when confirmed
 */
export function confirmDialog(opts) {
  return new Promise((resolve) => {
    const previous = document.activeElement;
    const close = (result) => {
      document.removeEventListener('keydown', onKey, true);
      backdrop.remove();
      if (previous && previous.focus) previous.focus();
      resolve(result);
    };
    const onKey = (ev) => {
      if (ev.key === 'Escape') {
        ev.preventDefault();
        close(false);
      }
    };
    const ok = button(opts.confirm || 'Confirm', () => close(true), {kind: opts.danger ? 'danger' : 'primary'});
    ok.classList.add('dialog-confirm');
    const cancel = button('Cancel', () => close(false), {kind: 'flat'});
    cancel.classList.add('dialog-cancel');
    const dialog = el('div', {class: 'dialog', role: 'dialog', 'aria-modal': 'true', 'aria-labelledby': 'fp-dialog-title'},
      el('h2', {id: 'fp-dialog-title', text: opts.title}),
      el('div', {class: 'dialog-body'}, opts.body),
      el('div', {class: 'dialog-buttons'}, cancel, ok));
    const backdrop = el('div', {class: 'backdrop'}, dialog);
    backdrop.addEventListener('click', (ev) => {
      if (ev.target === backdrop) close(false);
    });
    document.addEventListener('keydown', onKey, true);
    document.body.appendChild(backdrop);
    ok.focus();
  });
}
