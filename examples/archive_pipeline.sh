#!/usr/bin/env bash
# Archive pipeline: copy a training machine's TensorBoard logs to the archive, reduce the
# archive copy, verify it, and append what changed to the team's records (CSV).
#
#   examples/archive_pipeline.sh SOURCE ARCHIVE RECORDS_CSV
#
#   SOURCE       what to copy: a folder, an rsync remote (host:/path/logs), or a bucket
#                (s3://bucket/logs with the aws CLI, gs://bucket/logs with gsutil)
#   ARCHIVE      the archive copy, a local folder (created if missing); reduced in place,
#                with its backups in ARCHIVE/.tb-footprint (or $BACKUP_DIR)
#   RECORDS_CSV  the team's records: `tb-footprint history --csv` rows, each operation once
#
# Settings (environment):
#   POLICY=archive        the policy for the archive copy (tb-footprint policies)
#   QUIET_PERIOD=10m      runs written more recently than this (at the source) are left alone
#   BACKUP_DIR=           keep the vault on another disk (frees the archive's space at once)
#   DRY_RUN=1             only plan: nothing in the archive is changed
#   TB_FOOTPRINT=tb-footprint   the command (e.g. "python -m tb_footprint_plugin.cli")
#   PYTHON=python3        the Python that has tb_footprint_plugin (lists reduced paths, merges records)
#
# Re-running is safe and cheap: files a reduction already replaced in the archive are never
# copied again (their paths come from the archive's own operation manifests), files still being
# written at the source are updated, runs under the quiet period are skipped until next time.
# Exit status: 0 all done; 1 a reduction or a verification failed (the records are still
# appended, the failed run was rolled back); 2 a usage or sync error.
set -euo pipefail

if [ $# -ne 3 ]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
SOURCE=$1
ARCHIVE=$2
RECORDS=$3
POLICY=${POLICY:-archive}
QUIET_PERIOD=${QUIET_PERIOD:-10m}
PYTHON=${PYTHON:-python3}
read -r -a TBF <<<"${TB_FOOTPRINT:-tb-footprint}"
BACKUP_ARGS=()
if [ -n "${BACKUP_DIR:-}" ]; then BACKUP_ARGS=(--backup-dir "$BACKUP_DIR"); fi

mkdir -p "$ARCHIVE"
say() { printf '== %s\n' "$*" >&2; }

# 1. sync: never the source's own state folder, never a path a reduction already replaced here
EXCLUDES=$(mktemp)
trap 'rm -f "$EXCLUDES"' EXIT
echo "/.tb-footprint/" >"$EXCLUDES"
BACKUP_DIR=${BACKUP_DIR:-} "$PYTHON" -c '
import os, sys
from tb_footprint_plugin.api import operations
for m in operations(sys.argv[1], backup_dir=os.environ["BACKUP_DIR"] or None):
    if m.get("kind") == "reduce" and m.get("outcome") == "verified" and not m.get("restored_by"):
        for f in m.get("files", []):
            print("/" + f["path"])
        dirs = {d["path"] for d in m.get("removed_dirs", [])}
        for d in dirs:  # removed profile sessions (their parents are kept out by --prune-empty-dirs)
            if not any(o.startswith(d + "/") for o in dirs):
                print("/" + d + "/")
' "$ARCHIVE" >>"$EXCLUDES" || { say "cannot read the archive's operations"; exit 2; }

say "sync $SOURCE -> $ARCHIVE ($(($(wc -l <"$EXCLUDES") - 1)) reduced path(s) excluded)"
case "$SOURCE" in
  s3://*)
    args=()
    while read -r p; do args+=(--exclude "${p#/}*"); done <"$EXCLUDES"
    aws s3 sync "$SOURCE" "$ARCHIVE" "${args[@]}" || exit 2 ;;
  gs://*)
    pattern=$(sed -e 's#^/##' -e 's#[].[^$*+?(){}|\\]#\\&#g' "$EXCLUDES" | paste -sd'|' -)
    gsutil -m rsync -r -x "^(${pattern})" "$SOURCE" "$ARCHIVE" || exit 2 ;;
  *)
    # -a keeps the source's mtimes: the quiet period sees when a run was last written there;
    # --prune-empty-dirs: a folder a reduction emptied is not brought back empty
    rsync -a --prune-empty-dirs --exclude-from="$EXCLUDES" "${SOURCE%/}/" "$ARCHIVE/" || exit 2 ;;
esac

status=0
# 2. reduce the archive copy: each run its own verified transaction, rolled back on any doubt
if [ "${DRY_RUN:-0}" = 1 ]; then
  say "plan ($POLICY, dry run)"
  "${TBF[@]}" plan "$ARCHIVE" --policy "$POLICY" --quiet-period "$QUIET_PERIOD" "${BACKUP_ARGS[@]}"
  exit 0
fi
say "reduce ($POLICY)"
"${TBF[@]}" reduce "$ARCHIVE" --yes --policy "$POLICY" --quiet-period "$QUIET_PERIOD" "${BACKUP_ARGS[@]}" || status=1

# 3. verify every kept reduction: backups re-hashed, each run re-read against its original
say "verify"
"${TBF[@]}" verify "$ARCHIVE" "${BACKUP_ARGS[@]}" || status=1

# 4. the change log into the team's records, each operation once (keyed by op_id and kind)
say "history -> $RECORDS"
"${TBF[@]}" history "$ARCHIVE" --csv | "$PYTHON" -c '
import csv, os, sys
records = sys.argv[1]
reader = csv.DictReader(sys.stdin)
new = list(reader)
seen = set()
if os.path.exists(records) and os.path.getsize(records):
    with open(records, newline="", encoding="utf-8") as f:
        seen = {(r.get("op_id"), r.get("kind"), r.get("outcome")) for r in csv.DictReader(f)}
    header = False
else:
    header = True
rows = [r for r in new if (r.get("op_id"), r.get("kind"), r.get("outcome")) not in seen]
if rows or header:
    with open(records, "a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=reader.fieldnames)
        if header:
            w.writeheader()
        w.writerows(rows)
print(f"{len(rows)} new record(s)", file=sys.stderr)
' "$RECORDS"
exit $status
