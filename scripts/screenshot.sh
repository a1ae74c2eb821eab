#!/usr/bin/env bash
# Refresh the README's screenshots from the browser tests (real TensorBoard, headless
# Chromium): the overview and the verified before/after check.
set -euo pipefail
cd "$(dirname "$0")/.."
# the test environment (scripts/test.sh --install-only makes it): pytest and Playwright live there,
# not in the demo's ./.venv
[ -x .venv-test/bin/python ] || bash scripts/test.sh --install-only
PY=.venv-test/bin/python
export PATH="$PWD/.venv-test/bin:$PATH"
"$PY" -m pytest -q -p no:cacheprovider tests/test_browser.py -k reduce_check_restore
cp test-artifacts/screenshots/01-overview.png docs/screenshot.png
cp test-artifacts/screenshots/08-before-after-check.png docs/screenshot-check.png
echo "updated docs/screenshot.png and docs/screenshot-check.png"
