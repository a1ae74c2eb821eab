#!/usr/bin/env bash
# Install everything the test suite needs into ./.venv-test, then run the whole suite and the
# benchmarks at small sizes. This is the README's test command and what CI runs. Its environment
# is its own: scripts/demo.sh installs into ./.venv, and a demo TensorBoard started from there keeps
# serving the tab while this command installs and tests (an editable install into the demo's
# environment would pull the installed package out from under it; tests/test_readme_commands.py
# runs this install step beside a running demo). `--install-only` stops before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL_ONLY=0
if [ "${1:-}" = "--install-only" ]; then
  INSTALL_ONLY=1
  shift
fi
PY="${PYTHON:-python3}"
VENV=.venv-test
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# The suite's packages and TensorFlow install side by side (two pip processes, each mostly
# unpacking wheels on one core): they write to different folders and neither upgrades pip.
"$VENV"/bin/python -m pip install -q --disable-pip-version-check -c scripts/test-constraints.txt -e ".[test]" &
deps_pid=$!
# Keras' TensorBoard callback (and its profile_batch) writes through TensorFlow. It goes into a
# folder of its own that only the Keras integration test puts on its job's path, so TensorBoard
# in every other test keeps its TensorFlow-free readers (TensorFlow would be imported by each).
# Installed under another name and renamed when complete: an install cut short is never taken
# for a finished one by the next run.
tf_pid=""
if [ ! -d "$VENV/tensorflow/tensorflow" ]; then
  case "$(uname -m)" in x86_64) TF_REQ="tensorflow-cpu==2.21.0" ;; *) TF_REQ="tensorflow==2.21.0" ;; esac
  rm -rf "$VENV/tensorflow.partial"
  { "$VENV"/bin/python -m pip install -q --disable-pip-version-check --target "$VENV/tensorflow.partial" "$TF_REQ" \
      && rm -rf "$VENV/tensorflow" && mv "$VENV/tensorflow.partial" "$VENV/tensorflow"; } &
  tf_pid=$!
fi
install_rc=0
wait "$deps_pid" || install_rc=$?
if [ -n "$tf_pid" ]; then wait "$tf_pid" || install_rc=$?; fi
if [ "$install_rc" != 0 ]; then
  echo "installing the test environment failed (exit status $install_rc)" >&2
  exit "$install_rc"
fi
export TB_FOOTPRINT_TEST_TENSORFLOW="$PWD/$VENV/tensorflow"
# The package is installed editable, so pip compiled none of its modules; where
# PYTHONDONTWRITEBYTECODE is set (CI's machine sets it) no process would ever cache one, and each
# of the hundreds of CLI and TensorBoard processes the suite starts compiled the package again
# (test_docs' README and FAILSAFE cases: 45 s of CPU, 32 s with the bytecode written once here).
# (not tests/fixtures: what is there is data the tests read, sizes and all, never imported)
"$VENV"/bin/python -m compileall -q -j 0 -x '/fixtures/' tb_footprint_plugin tests bench >/dev/null
# The tab's browser tests drive Debian's Chromium (never a browser download); the archive
# pipeline example syncs with rsync.
if { [ ! -x /usr/bin/chromium ] || ! command -v rsync >/dev/null 2>&1; } \
    && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver rsync >/dev/null
fi
# Azurite (the Azure Blob emulator the object-store tests run against) from npm, into a
# repo-local, git-ignored folder; node and npm come from Debian when missing.
if [ ! -x .ci/node/node_modules/.bin/azurite-blob ]; then
  if ! command -v npm >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  npm install --prefix .ci/node --no-audit --no-fund --silent azurite@3.35.0
fi
if [ "$INSTALL_ONLY" = 1 ]; then
  echo "test environment ready in ./$VENV"
  exit 0
fi
export PATH="$PWD/$VENV/bin:$PATH"
# Three workers on two cores: much of a test's wall time is waiting for a TensorBoard process, a store
# server or the browser, which another file's work can overlap. A file stays on one worker, so its
# module fixtures (a TensorBoard process, a reduced copy) are built once. TB_FOOTPRINT_TEST_WORKERS=0
# runs everything in this process. The slowest tests are listed at the end: the suite has to stay well
# under CI's 30 minutes on two cores, and that list says where its time goes.
"$VENV"/bin/python -m pytest -q -p no:cacheprovider -n "${TB_FOOTPRINT_TEST_WORKERS:-3}" --dist loadfile \
  --durations=25 tests "$@"
# The benchmarks at small sizes, two at a time (CI has two cores; each bench but one is one process
# doing one thing at a time, so run one by one they left a core idle for ~4 minutes). At --small no
# bench's exit status depends on a time (a time line is judged and printed, gated only at full size
# or with --gate-time); its printed times are measured beside one other bench (the load average it
# prints says so). bench/shards.py runs alone first: its figure is the speed-up of 1, 2 and 4
# workers started at once. Then the longest start first (vault, scale) and the rest take the lane
# that frees up. Each one's output is kept and printed whole, in a fixed order, with its wall time;
# any bench that fails fails the command, after every one has run and been printed.
BENCH_OUT="$(mktemp -d "${TMPDIR:-/tmp}/tbfp-bench.XXXXXX")"
BENCHES=()
for b in bench/*.py; do BENCHES+=("$b --small"); done
BENCHES+=("bench/verify.py --small --scanned")
SOLO="bench/shards.py --small"
FIRST=("bench/vault.py --small" "bench/scale.py --small")
ORDER=()
for b in "${FIRST[@]}"; do
  for x in "${BENCHES[@]}"; do [ "$x" = "$b" ] && ORDER+=("$b"); done
done
for b in "${BENCHES[@]}"; do
  case " ${FIRST[*]} $SOLO " in *" $b "*) ;; *) ORDER+=("$b") ;; esac
done
bench_log() { echo "$BENCH_OUT/$(echo "$1" | tr ' /' '__')"; }
run_bench() {
  local log start rc=0
  log="$(bench_log "$1")"
  start=$SECONDS
  # shellcheck disable=SC2086 # "$1" is a script and its flags, split on purpose
  "$VENV"/bin/python $1 >"$log.out" 2>&1 </dev/null || rc=$?
  echo "$rc $((SECONDS - start))" >"$log.rc"
}
bench_start=$SECONDS
for b in "${BENCHES[@]}"; do [ "$b" = "$SOLO" ] && run_bench "$b"; done
# A non-interactive shell starts its background jobs with SIGINT ignored, so a bench in a lane
# would outlive a Ctrl-C of this command: with job control each lane's bench runs in a process
# group of its own that keeps SIGINT, and an interrupt (or TERM) of this command is passed on to
# every bench still running, which stops and cleans up as it does when run by hand.
set -m
bench_pids=()
trap 'for p in "${bench_pids[@]}"; do kill -INT -- "-$p" 2>/dev/null || true; done; wait; rm -rf "$BENCH_OUT"; exit 130' INT TERM
running=0
for b in "${ORDER[@]}"; do
  if [ "$running" -ge 2 ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_bench "$b" &
  bench_pids+=("$!")
  running=$((running + 1))
done
wait || true
trap - INT TERM
set +m
failed=()
for b in "${BENCHES[@]}"; do
  log="$(bench_log "$b")"
  echo "== $b"
  cat "$log.out" 2>/dev/null || true
  read -r rc took <"$log.rc" || { rc=1; took="?"; }
  echo "== $b took $took s$( [ "$rc" = 0 ] || echo ", exit status $rc")"
  [ "$rc" = 0 ] || failed+=("$b")
done
rm -rf "$BENCH_OUT"
echo "== benchmarks took $((SECONDS - bench_start)) s; the whole command $SECONDS s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "== FAILED: ${failed[*]}"
  exit 1
fi
