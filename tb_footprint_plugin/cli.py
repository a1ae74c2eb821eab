"""``tb-footprint``: the command line over the same library API the TensorBoard plugin uses."""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.codes import Skip
from tb_footprint_plugin.fmt import bar, human_bytes, parse_duration, parse_size, share
from tb_footprint_plugin.version import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _print_scan(fp, top: Optional[int], by: str) -> None:
    total = fp.total_bytes
    print(f"{fp.logdir}: {human_bytes(total)} in {sum(1 for r in fp.runs)} runs"
          f" (backups kept in the vault: {human_bytes(fp.vault_bytes)})")
    if by == "run":
        runs = fp.runs[:top] if top else fp.runs
        width = max([len(r.name) for r in runs] + [3])
        print(f"\n  {'RUN'.ljust(width)}  {'SIZE':>9}  {'SHARE':>6}  {'':20}  BIGGEST CATEGORY")
        for r in runs:
            big = r.biggest_category()
            big_s = ""
            if big:
                big_s = f"{cat.label(big)} {share(r.categories[big].bytes, r.total_bytes).strip()}"
            print(f"  {r.name.ljust(width)}  {human_bytes(r.total_bytes):>9}  {share(r.total_bytes, total)}"
                  f"  {bar(r.total_bytes, total)}  {big_s}")
        if top and len(fp.runs) > top:
            rest = fp.runs[top:]
            print(f"  … {len(rest)} more runs, {human_bytes(sum(r.total_bytes for r in rest))}")
    print("\n  CATEGORY                        SIZE   SHARE  FILES  RECORDS")
    cats = list(fp.categories.values())
    if top and by == "category":
        cats = cats[:top]
    for c in cats:
        print(f"  {cat.label(c.name)[:28]:28}  {human_bytes(c.bytes):>9}  {share(c.bytes, total)}"
              f"  {c.files:5d}  {c.records:7d}")
    for w in fp.warnings + [w for r in fp.runs for w in r.warnings]:
        print(f"warning: {w}", file=sys.stderr)


def cmd_scan(args) -> int:
    from tb_footprint_plugin.scan.scanner import scan

    fp = scan(args.logdir, backup_dir=args.backup_dir, use_cache=not args.no_cache)
    if args.json:
        json.dump(fp.to_dict(with_files=args.files), sys.stdout, indent=1, ensure_ascii=True)
        print()
    else:
        _print_scan(fp, args.top, args.by)
    _warn_unsettled(args.logdir, args.backup_dir)
    return EXIT_OK


def _warn_unsettled(logdir: str, backup_dir=None) -> None:
    """Unfinished operations and damage, with the command that settles them (on stderr)."""
    from tb_footprint_plugin import api

    try:
        found = api.unfinished(logdir, backup_dir)
    except (OSError, ValueError):
        return
    for o in found["unfinished_operations"]:
        print(f"warning: unfinished {o['kind']} operation {o['op_id']} on run {o['run']!r} "
              "(interrupted?): its run may be half changed", file=sys.stderr)
    for p in found["problems"]:
        print(f"warning: [{p['code']}] {p['detail']}", file=sys.stderr)
    if found["settle_command"]:
        print(f"warning: run `{found['settle_command']}` to settle this", file=sys.stderr)


def cmd_demo(args) -> int:
    from tb_footprint_plugin.demo import generate_demo

    summary = generate_demo(args.dir, seed=args.seed, scale=args.scale, overwrite=args.overwrite)
    print(json.dumps(summary, indent=1) if args.json else f"demo logs written to {args.dir}")
    return EXIT_OK


def _dump(obj) -> None:
    json.dump(obj, sys.stdout, indent=1, ensure_ascii=True, default=str)
    print()


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--backup-dir", default=None, help="vault location (default LOGDIR/.tb-footprint)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")


def _filters(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--policy", default="archive",
                    help="archive (default), lossless, keep-latest[=N], or a JSON/TOML policy file")
    ap.add_argument("--runs", dest="run_glob", default=None, help="only runs matching this glob")
    ap.add_argument("--run", dest="runs", action="append", default=None, help="only this run (repeatable)")
    ap.add_argument("--min-size", type=parse_size, default=0, help="only runs of at least this size (100MB)")
    ap.add_argument("--older-than", type=parse_duration, default=None,
                    help="only runs not written for this long (14d, 12h)")
    ap.add_argument("--quiet-period", type=parse_duration, default=600.0,
                    help="a run written more recently than this is active and left alone (default 10m)")
    ap.add_argument("--delete", action="append", default=[], metavar="CATEGORY",
                    help="custom rule on top of --policy: also delete this file category (repeatable)")
    ap.add_argument("--keep", action="append", default=[], metavar="CATEGORY",
                    help="custom rule on top of --policy: keep this file category (repeatable)")
    ap.add_argument("--keep-latest", type=int, default=None, metavar="N",
                    help="custom rule: keep only the newest N profile sessions / traces per worker")
    ap.add_argument("--keep-per-tag", type=_per_tag, default=None, metavar="PLUGIN=N,...",
                    help="custom rule: keep N evenly spaced items per tag (first and last always), "
                         "e.g. histograms=50,images=5")


def _per_tag(text: str) -> dict:
    out = {}
    for part in filter(None, text.split(",")):
        plugin, _, n = part.partition("=")
        if not n.isdigit():
            raise argparse.ArgumentTypeError(f"expected PLUGIN=N, got {part!r}")
        out[plugin.strip()] = int(n)
    return out


def _policy(args):
    """--policy, refined by custom rules given as flags."""
    from tb_footprint_plugin import api

    return api.custom_policy(args.policy, delete=args.delete, keep=args.keep, keep_latest=args.keep_latest,
                             keep_per_tag=args.keep_per_tag)


def _print_plan(p) -> None:
    print(f"policy {p.policy['name']}: {p.policy['description']}")
    idle = [rp for rp in p.runs if rp.code == Skip.NOTHING]
    for rp in p.runs:
        if rp in idle:
            continue
        head = f"\n{rp.run}: {human_bytes(rp.bytes_before)} → {human_bytes(rp.expected_after_bytes)}"
        if rp.skipped:
            print(f"{head}  [skipped: {rp.skipped}]")
            continue
        print(f"{head}  (frees {human_bytes(rp.removable_bytes)})")
        for line in rp.fidelity:
            print(f"  ✓ {line}")
        kinds = {}
        for a in rp.actions:
            kinds.setdefault(a.kind, []).append(a)
        for kind, acts in kinds.items():
            size = sum(a.bytes_before for a in acts)
            print(f"  {kind:10} {len(acts):4d} path(s) {human_bytes(size):>9}"
                  + ("  (after size estimated)" if any(a.estimated for a in acts) else ""))
    if idle:
        print(f"\n{len(idle)} run(s) with nothing to reduce under this policy "
              f"({human_bytes(sum(rp.bytes_before for rp in idle))}): "
              + ", ".join(rp.run for rp in idle[:6]) + (" …" if len(idle) > 6 else ""))
    print(f"\ntotal: {human_bytes(p.total_bytes)} → {human_bytes(p.expected_after_bytes)} "
          f"(removable {human_bytes(p.removable_bytes)}, {share(p.removable_bytes, p.total_bytes).strip()})")
    for n in p.notes:
        print(f"note: {n}")
    if p.cost:
        from tb_footprint_plugin.plan.cost import format_cost

        print("\nrequests to the store:")
        print(format_cost(p.cost))


def cmd_plan(args) -> int:
    from tb_footprint_plugin import api

    p = api.plan(args.logdir, _policy(args), backup_dir=args.backup_dir, runs=args.runs,
                 run_glob=args.run_glob, min_size=args.min_size, older_than=args.older_than,
                 quiet_period=args.quiet_period)
    _dump(p.to_dict()) if args.json else _print_plan(p)
    _warn_unsettled(args.logdir, args.backup_dir)
    return EXIT_OK


def cmd_policies(args) -> int:
    from tb_footprint_plugin.plan.policies import list_policies

    pols = list_policies()
    if args.json:
        _dump([p.to_dict() for p in pols])
        return EXIT_OK
    for p in pols:
        print(f"{p.name}\n  {p.description}")
        for c, a in sorted(p.file_rules.items()):
            print(f"    {a:8} {cat.label(c)}")
        if p.compress_torch:
            print("    compress PyTorch traces (.pt.trace.json → .gz)")
        if p.keep_latest is not None:
            print(f"    keep the newest {p.keep_latest} profile session(s) per run")
    print("\nscalars, hparams and text are never changed by any policy.")
    return EXIT_OK


def _outcome_line(o) -> str:
    if o.status == "verified":
        return (f"✓ {o.run}: verified, {human_bytes(o.bytes_before)} → {human_bytes(o.bytes_after)}"
                f" (saved {human_bytes(o.saved_bytes)}, op {o.op_id})")
    if o.status == "restored":
        return f"✓ {o.run}: restored ({o.reason}; op {o.op_id})"
    mark = "·" if o.status in ("skipped", "dry_run") else "✗"
    code = f" [{o.code}]" if o.code else ""
    return f"{mark} {o.run}: {o.status}{code}" + (f" — {o.reason}" if o.reason else "")


def cmd_reduce(args) -> int:
    from tb_footprint_plugin import api

    bar_ = None
    if args.json or args.dry_run:
        on_outcome = None
    else:
        try:
            from tqdm import tqdm

            bar_ = tqdm(total=0, unit="run", disable=None, file=sys.stderr)
        except ImportError:  # progress is a nicety
            bar_ = None

        def on_outcome(o):
            if bar_ is not None:
                bar_.update(1)
                bar_.write(_outcome_line(o))
            else:
                print(_outcome_line(o))

    try:
        logdirs, shard = _batch_args(args)
    except ValueError as e:  # a shard spec or a scheduler's environment that names no shard
        print(f"tb-footprint: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    reports = api.reduce_logdirs(
        logdirs, shard=shard, backup_dir=args.backup_dir, policy=_policy(args), dry_run=args.dry_run,
        runs=args.runs, run_glob=args.run_glob, min_size=args.min_size, older_than=args.older_than,
        quiet_period=args.quiet_period, jobs=args.jobs, timeout=args.timeout,
        ledger=None if args.dry_run else (args.ledger or "default"),
        verify_backends=tuple(args.verify.split(",")), on_outcome=on_outcome,
        max_file_ops_per_second=args.max_file_ops_per_second, lease_seconds=args.lease,
    )
    if bar_ is not None:
        bar_.close()
    if args.json:
        _dump(reports[0].to_dict() if len(reports) == 1 else [r.to_dict() for r in reports])
        return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED
    rc = EXIT_OK
    for logdir, report in zip(logdirs, reports):
        if len(logdirs) > 1 or shard:
            print(f"\n{logdir}" + (f" — shard {shard[0]}/{shard[1]}: {len(report.shard_runs or [])} run(s)"
                                   if shard else ""))
        rc = max(rc, _print_reduce(args, report))
    return rc


def _batch_args(args):
    """(logdirs, shard) of a reduce: positional logdirs plus ``--logdirs-from``; the shard from
    ``--shard``, else from a Slurm array or a Kubernetes Indexed Job's environment."""
    import os

    from tb_footprint_plugin import api

    logdirs = ([args.logdir] if args.logdir else []) + list(args.more_logdirs)
    if args.logdirs_from:
        try:
            with open(args.logdirs_from, "r", encoding="utf-8") as f:
                logdirs += [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        except OSError as e:
            raise api.ShardError(f"--logdirs-from {args.logdirs_from}: {e.strerror or e}") from None
    if not logdirs:
        raise api.ShardError("no logdir given (a LOGDIR argument or --logdirs-from FILE)")
    shard = api.parse_shard(args.shard) if args.shard else api.shard_from_env(os.environ, args.shard_count)
    return logdirs, shard


def _print_reduce(args, report) -> int:
    if args.dry_run:
        _print_plan(report.plan)
        print("\ndry run: nothing was changed. Run again without --dry-run to reduce.")
    else:
        for r in report.recovered:
            print(f"recovered {r.op_id} ({r.run}): {r.action} — {r.detail}" if r.action != "refused"
                  else f"refused [{r.code}] journal {r.op_id}: {r.detail}")
        for prob in report.ledger_problems:
            print(f"refused [{prob['code']}] ledger: {prob['detail']}" +
                  (f" (kept as {prob['kept_as']})" if prob.get("kept_as") else ""))
        done = [o for o in report.outcomes if o.status == "verified"]
        print(f"\n{len(done)} run(s) reduced and verified, {len(report.failed)} failed or rolled back; "
              f"saved {human_bytes(report.saved_bytes)} in the logdir. Backups are in the vault until "
              f"`tb-footprint purge`. Ledger: {report.ledger_path}")
        if done:
            print("A TensorBoard that is already running keeps showing what it loaded before; "
                  "restart it to see the reduced runs.")
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_restore(args) -> int:
    from tb_footprint_plugin import api

    outs = api.restore(args.logdir, run=args.run, op=args.op, backup_dir=args.backup_dir)
    if args.json:
        _dump([o.to_dict() for o in outs])
    else:
        for o in outs:
            print(_outcome_line(o))
        if not outs:
            print("nothing to restore")
    return EXIT_OK if all(o.status == "restored" for o in outs) else EXIT_FAILED


def cmd_verify(args) -> int:
    from tb_footprint_plugin import api

    res = api.verify(args.logdir, run=args.run, op=args.op, backup_dir=args.backup_dir,
                     verify_backends=tuple(args.verify.split(",")))
    if args.json:
        _dump(res)
    else:
        for r in res:
            print(f"{'✓' if r['ok'] else '✗'} {r['run']} (op {r['op_id']}): backups "
                  f"{'intact' if r['backups_ok'] else 'DAMAGED: ' + ', '.join(r['damaged_backups'])}")
            for c in r["verification"].get("checks", []):
                print(f"    {'✓' if c['ok'] else '✗'} {c['detail']}")
        if not res:
            print("no kept reductions to verify")
    return EXIT_OK if all(r["ok"] for r in res) else EXIT_FAILED


def cmd_purge(args) -> int:
    from tb_footprint_plugin import api

    rep = api.purge(args.logdir, older_than=args.older_than, run=args.run, yes=args.yes,
                    backup_dir=args.backup_dir, op=args.op)
    if args.json:
        _dump(rep.to_dict())
        return EXIT_OK
    for r in rep.refused:
        print(f"refused [{r['code']}]: {r['detail'] if 'file' not in r else r['file'] + ': ' + r['detail']}")
    for o in rep.ops:
        print(f"  {o['op_id']}  {o['run']}  {human_bytes(o['bytes'])}" + ("  (restored)" if o["restored"] else "")
              + ("  (retired run: its only copy)" if o.get("kind") == "retire" and not o["restored"] else ""))
    verb = "would free" if rep.dry_run else "freed"
    print(f"{len(rep.ops)} backup(s); {verb} {human_bytes(rep.freed_bytes)}; "
          f"{rep.originals_lost} original file(s) {'would be' if rep.dry_run else 'were'} lost for good")
    for k in rep.kept:
        print(f"  kept {k['op_id']}  {k['run']}  {human_bytes(k['bytes'])}  [{k['code']}] {k['detail']}")
    if rep.kept:
        print(f"{len(rep.kept)} backup(s) kept: purging them could destroy bytes that exist nowhere else")
    if rep.dry_run and rep.ops:
        print("nothing deleted: add --yes to purge these backups (their runs can no longer be restored)")
    return EXIT_OK


def cmd_status(args) -> int:
    from tb_footprint_plugin import api

    st = api.status(args.logdir, backup_dir=args.backup_dir)
    if args.json:
        _dump(st)
        return EXIT_OK
    print(f"{st['logdir']}\n  vault: {human_bytes(st['vault_bytes'])} in {', '.join(st['vaults'])}")
    print(f"  unfinished operations: {len(st['unfinished_operations'])}")
    for o in st["unfinished"]:
        print(f"    {o['op_id']}  {o['kind']}  run {o['run']!r}: interrupted; the run may be half changed")
    for p in st["problems"]:
        where = f"{p['file']}: " if p.get("file") else ""
        print(f"  problem [{p['code']}]: {where}{p['detail']}")
    for lw in st["late_writes"]:
        print(f"  late writes [{lw['code']}]: {lw['records']} record(s) written to {lw['path']} after "
              f"{lw['op_id']}" + (f", salvaged into {lw['file']}" if lw.get("file") else ", kept in the vault"))
    if st["settle_command"]:
        print(f"  run `{st['settle_command']}` to settle this (also done by the next reduce, restore or purge)")
    kept = [o for o in st["operations"] if o["kind"] == "reduce" and not o["backup_purged"]]
    print(f"  operations: {len(st['operations'])} ({len(kept)} with kept backups)")
    if st["ledger"]:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(st["ledger"]["counts"].items()))
        print(f"  ledger ({st['ledger']['policy']}): {counts}")
    if st.get("batch"):
        _print_batch(st["batch"], args.runs)
    return EXIT_OK


def _print_batch(b: dict, per_run: bool) -> None:
    """The batch as one: every ledger (one per shard) merged; per run who did it with --runs."""
    order = ("pending", "reducing", "verifying", "done", "failed", "skipped")
    counts = ", ".join(f"{k} {b['counts'][k]} ({human_bytes(b['bytes'].get(k, 0))})" for k in order if k in b["counts"])
    print(f"  batch over {len(b['ledgers'])} ledger(s): {counts or 'no runs'}; "
          f"saved {human_bytes(b['saved_bytes'])}")
    if b["stalled"]:
        print(f"  {len(b['stalled'])} run(s) were being reduced by a worker that is gone: rerun its shard "
              "(or any shard covering them) to take them over")
    for p in b["problems"]:
        print(f"  refused [{p.get('code', '?')}]: {p['detail']}")
    if per_run:
        width = max([len(r) for r in b["runs"]] + [3])
        print(f"\n  {'RUN'.ljust(width)}  {'STATE':9}  {'SIZE':>9}  {'AFTER':>9}  WHO")
        for run, e in b["runs"].items():
            who = f"{e.get('host') or '?'} pid {e.get('pid') or '?'}" + (f" shard {e['shard']}" if e.get("shard") else "")
            after = human_bytes(e["after_size_bytes"]) if e.get("after_size_bytes") is not None else "—"
            state = e["state"] + ("?" if e.get("stalled") else "")
            extra = f"  [{e['code']}]" if e.get("code") else ""
            print(f"  {run.ljust(width)}  {state:9}  {human_bytes(e.get('original_size_bytes') or 0):>9}  "
                  f"{after:>9}  {who}{extra}")


def cmd_history(args) -> int:
    from tb_footprint_plugin import api

    entries = api.history(args.logdir, backup_dir=getattr(args, "backup_dir", None))
    if args.csv:
        sys.stdout.write(api.history_csv(entries))
    elif args.json:
        _dump(entries)
    else:
        import datetime

        for e in entries:
            t = datetime.datetime.fromtimestamp(e.get("time", 0)).strftime("%Y-%m-%d %H:%M")
            print(f"{t}  {e.get('kind', ''):7} {e.get('outcome', ''):11} {e.get('run', '')}  "
                  f"{human_bytes(e.get('before') or 0)} → {human_bytes(e.get('after') or 0)}  {e.get('op_id', '')}")
    _warn_unsettled(args.logdir)
    return EXIT_OK


def cmd_recover(args) -> int:
    from tb_footprint_plugin import api

    outs = api.recover_logdir(args.logdir, backup_dir=args.backup_dir)
    if args.json:
        _dump([dict(vars(o)) for o in outs])
    else:
        for o in outs:
            mark = "✗" if o.action == "failed" else "✓"
            print(f"{mark} {o.op_id or '-'} ({o.run or 'vault'}): {o.action} [{o.code}] — {o.detail}")
        if not outs:
            print("nothing to recover: no unfinished operation, no damage found")
        left = api.unfinished(args.logdir, args.backup_dir)
        for p in left["problems"]:
            print(f"still: [{p['code']}] {p['detail']}")
    return EXIT_FAILED if any(o.action == "failed" for o in outs) else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tb-footprint",
        description="See what fills a TensorBoard logdir, and cut it safely (backup, verify, restore).",
    )
    p.add_argument("--version", action="version", version=f"tb-footprint {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("scan", help="size breakdown by run and category")
    s.add_argument("logdir")
    s.add_argument("--json", action="store_true", help="machine-readable output (schema in docs/json-schema.md)")
    s.add_argument("--files", action="store_true", help="with --json: include every file")
    s.add_argument("--top", type=int, default=None, help="show only the N biggest rows")
    s.add_argument("--by", choices=("run", "category"), default="run")
    s.add_argument("--backup-dir", default=None)
    s.add_argument("--no-cache", action="store_true", help="re-read every event file")
    s.set_defaults(func=cmd_scan)

    s = sub.add_parser("policies", help="list the named policies")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_policies)

    s = sub.add_parser("plan", help="dry run: what a policy would do (writes nothing)")
    s.add_argument("logdir")
    _common(s)
    _filters(s)
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("reduce", help="reduce runs: backup, transform, verify, commit or roll back")
    s.add_argument("logdir", nargs="?")
    s.add_argument("more_logdirs", nargs="*", metavar="LOGDIR", help="more logdirs, reduced in the same call")
    s.add_argument("--logdirs-from", default=None, metavar="FILE", help="read more logdirs from FILE, one a line")
    s.add_argument("--shard", default=None, metavar="I/N",
                   help="take only shard I of N (from 0) of the runs; default: from SLURM_ARRAY_TASK_ID/"
                        "SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX when set")
    s.add_argument("--shard-count", type=int, default=None, metavar="N",
                   help="number of shards with JOB_COMPLETION_INDEX (default TB_FOOTPRINT_SHARD_COUNT)")
    s.add_argument("--max-file-ops-per-second", type=float, default=None, metavar="RATE",
                   help="cap metadata operations (stat, open, rename, unlink, link) for shared filesystems")
    s.add_argument("--lease", type=parse_duration, default=None,
                   help="run lock lease (default 120s): a dead worker's runs are taken over after it")
    _common(s)
    _filters(s)
    s.add_argument("--dry-run", action="store_true", help="only plan")
    s.add_argument("--jobs", type=int, default=1, help="runs reduced in parallel")
    s.add_argument("--timeout", type=parse_duration, default=None, help="per-run time limit (rolled back after)")
    s.add_argument("--ledger", default=None, help="ledger path (default LOGDIR/.tb-footprint/ledger.json)")
    s.add_argument("--verify", default="python,rust", help="reader backends to verify with")
    s.set_defaults(func=cmd_reduce)

    s = sub.add_parser("verify", help="re-check kept reductions against their backups")
    s.add_argument("logdir")
    s.add_argument("run", nargs="?")
    s.add_argument("--op", default=None)
    s.add_argument("--verify", default="python,rust")
    _common(s)
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("restore", help="put back the exact original bytes")
    s.add_argument("logdir")
    s.add_argument("run", nargs="?")
    s.add_argument("--op", default=None)
    _common(s)
    s.set_defaults(func=cmd_restore)

    s = sub.add_parser("purge", help="delete backups of verified reductions (lists only, without --yes)")
    s.add_argument("logdir")
    s.add_argument("--older-than", type=parse_duration, default=None)
    s.add_argument("--run", default=None)
    s.add_argument("--op", default=None)
    s.add_argument("--yes", action="store_true")
    _common(s)
    s.set_defaults(func=cmd_purge)

    _retire_parsers(sub)

    s = sub.add_parser("status", help="vault, ledger and unfinished operations")
    s.add_argument("logdir")
    _common(s)
    s.add_argument("--runs", action="store_true", help="the batch run by run: state, bytes, who (host, pid, shard)")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("recover", help="settle unfinished operations, rebuild lost manifests, finish killed "
                                       "purges, salvage late writes (also done by every reduce/restore/purge)")
    s.add_argument("logdir")
    _common(s)
    s.set_defaults(func=cmd_recover)

    s = sub.add_parser("history", help="the change log")
    s.add_argument("logdir")
    s.add_argument("--csv", action="store_true")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_history)

    d = sub.add_parser("demo", help="write deterministic demo logs")
    d.add_argument("dir")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--scale", type=float, default=1.0)
    d.add_argument("--overwrite", action="store_true")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_demo)
    return p


def _retire_parsers(sub) -> None:
    s = sub.add_parser("retire", help="move whole runs out of the logdir into the vault (dry run without --yes)",
                       description="Select runs and retire them: every file leaves the logdir for the vault, "
                                   "unchanged; `tb-footprint restore LOGDIR RUN` brings a run back byte for byte, "
                                   "`tb-footprint purge` frees the space. Without --yes the choice is only shown "
                                   "(on a terminal you are asked).")
    s.add_argument("logdir")
    s.add_argument("runs", nargs="*", help="run names (as TensorBoard shows them)")
    s.add_argument("--glob", dest="run_glob", default=None, help="runs whose name matches this glob")
    s.add_argument("--group", default=None, help="the group a keep-best rule ranks (a glob, e.g. 'sweep/*')")
    s.add_argument("--older-than", type=parse_duration, default=None, help="no file changed for this long (e.g. 30d)")
    s.add_argument("--min-size", type=parse_size, default=0, help="runs holding at least this much (e.g. 1G)")
    s.add_argument("--keep-best", type=int, default=None, help="keep the best N runs of the group, retire the rest")
    s.add_argument("--metric", default=None, help="scalar tag that ranks runs (e.g. val/loss)")
    s.add_argument("--mode", choices=("min", "max"), default="min", help="min: lower is better (default)")
    s.add_argument("--value", choices=("last", "min", "max"), default="last",
                   help="which value of the metric ranks a run (default: the last)")
    s.add_argument("--keep-list", default=None, help="file of run names or globs never to retire (one a line)")
    s.add_argument("--with-nested", action="store_true",
                   help="a run whose directory holds other runs takes them along (otherwise it is left alone)")
    s.add_argument("--quiet-period", type=parse_duration, default=600.0,
                   help="runs with a file changed this recently are being written: never retired (default 10m)")
    s.add_argument("--yes", action="store_true", help="retire without asking")
    _common(s)
    s.set_defaults(func=cmd_retire)

    s = sub.add_parser("retired", help="list retired runs kept in the vault (restorable)")
    s.add_argument("logdir")
    s.add_argument("--search", default=None, help="only runs whose name contains this")
    _common(s)
    s.set_defaults(func=cmd_retired)


def _metric_note(item) -> str:
    m = item.metric
    if not m:
        return ""
    return f"  [{m['tag']} {m['value']:.6g} #{m['rank']}/{m['of']}]"


def cmd_retire(args) -> int:
    from tb_footprint_plugin import api

    rule = api.retire_rule(runs=args.runs or None, run_glob=args.run_glob, group=args.group,
                           older_than=args.older_than, min_size=args.min_size, keep_best=args.keep_best,
                           metric=args.metric, mode=args.mode, value=args.value, keep_list_file=args.keep_list,
                           include_nested=args.with_nested)
    plan = api.retire_plan(args.logdir, rule, backup_dir=args.backup_dir, quiet_period=args.quiet_period)
    go = args.yes
    if not args.json:
        print(f"{len(plan.selected)} run(s) to retire, {human_bytes(plan.bytes)}:")
        for i in plan.items:
            mark = "→" if i.selected else "·"
            print(f"  {mark} {i.run}  {human_bytes(i.bytes)}{_metric_note(i)}  — {i.reason}")
        if not go and plan.selected and sys.stdin.isatty() and sys.stdout.isatty():
            ans = input(f"Retire these {len(plan.selected)} run(s) into the vault? [y/N] ")
            go = ans.strip().lower() in ("y", "yes")
    if not go:
        if args.json:
            _dump({"dry_run": True, "plan": plan.to_dict(), "bytes": plan.bytes})
        elif plan.selected:
            print("nothing moved (dry run): add --yes to retire them")
        return EXIT_OK
    rep = api.retire(args.logdir, rule, dry_run=False, backup_dir=args.backup_dir, quiet_period=args.quiet_period,
                     only=[i.run for i in plan.selected],
                     on_outcome=None if args.json else (lambda o: print(_retire_line(o))))
    if args.json:
        _dump(rep.to_dict())
    else:
        print(f"retired {sum(1 for o in rep.outcomes if o.status == 'verified')} run(s), "
              f"{human_bytes(rep.retired_bytes)}; `tb-footprint retired {args.logdir}` lists them")
    return EXIT_OK if rep.ok else EXIT_FAILED


def _retire_line(o) -> str:
    if o.status == "verified":
        return f"✓ {o.run}: retired, {human_bytes(o.bytes_before)} into the vault (op {o.op_id})"
    return _outcome_line(o)


def cmd_retired(args) -> int:
    from tb_footprint_plugin import api

    rows = [r for r in api.retired(args.logdir, backup_dir=args.backup_dir)
            if not args.search or args.search.lower() in r["run"].lower()]
    if args.json:
        _dump(rows)
        return EXIT_OK
    import datetime

    for r in rows:
        when = datetime.datetime.fromtimestamp(r["retired_at"] or 0).strftime("%Y-%m-%d %H:%M")
        along = f" (+{len(r['takes_along'])} nested)" if r["takes_along"] else ""
        print(f"  {r['run']}{along}  {human_bytes(r['bytes'])}  {when}  op {r['op_id']}")
    print(f"{len(rows)} retired run(s), {human_bytes(sum(r['bytes'] for r in rows))}; "
          f"restore one with `tb-footprint restore {args.logdir} RUN`")
    return EXIT_OK


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``tb-footprint``; returns 0 all done, 1 some failed, 2 usage error."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    try:
        return args.func(args)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"tb-footprint: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("tb-footprint: interrupted", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
