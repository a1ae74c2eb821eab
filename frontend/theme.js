// Light or dark, as TensorBoard itself shows it. TensorBoard 2.21 marks its dark mode with the
// class `dark-mode` on its page's <body> (its own toggle: browser default / light / dark); the tab
// runs in a same-origin iframe, so it reads that class and follows every change. When the parent
// page cannot be read (another origin, opened on its own), the OS setting decides.

const DARK_CLASS = 'dark-mode';

function parentBody() {
  try {
    if (window.parent && window.parent !== window && window.parent.document && window.parent.document.body) {
      return window.parent.document.body;
    }
  } catch (e) {
    // cross-origin parent: not ours to read
  }
  return null;
}

/** Set `data-theme` on our <html> now and whenever TensorBoard's mode (or the OS's) changes. */
export function followTheme(root) {
  const html = root || document.documentElement;
  const media = window.matchMedia ? window.matchMedia('(prefers-color-scheme: dark)') : null;
  const body = parentBody();
  const apply = () => {
    const dark = body ? body.classList.contains(DARK_CLASS) : !!(media && media.matches);
    html.dataset.theme = dark ? 'dark' : 'light';
  };
  apply();
  if (body) {
    new MutationObserver(apply).observe(body, {attributes: true, attributeFilter: ['class']});
  } else if (media && media.addEventListener) {
    media.addEventListener('change', apply);
  }
  return apply;
}
