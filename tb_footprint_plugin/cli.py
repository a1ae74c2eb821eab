"""``tb-footprint``: the command line over the same library API the TensorBoard plugin uses.

Why one module: the command line is one ``argparse`` tree whose subcommands
share their options (``_common``, ``_filters``, ``_selectors``), their output (text or
``--json``) and their consent and progress helpers; each subcommand is a thin caller of the API,
and the length is help texts and printing, not logic.
"""
from __future__ import annotations

import argparse
import io
import os
import re  # argparse imports it anyway
import sys
import time
import urllib.parse
from typing import Dict, List, Optional, Sequence

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery, Skip, StoreError
from tb_footprint_plugin.fmt import bar, human_bytes, parse_duration, parse_size, share, shown
from tb_footprint_plugin.version import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# --help and --version import nothing more than this module needs to parse: every other module
# (json, threading, signal, the scan's categories, the library) is imported by the verb using it


def _json():
    import json

    return json


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _print_scan(fp, top: Optional[int], by: str) -> None:
    from tb_footprint_plugin.api import categories as cat

    total = fp.total_bytes
    print(f"{fp.logdir}: {human_bytes(total)} in {sum(1 for r in fp.runs)} runs"
          f" (backups kept in the vault: {human_bytes(fp.vault_bytes)})")
    if by == "run":
        runs = fp.runs[:top] if top else fp.runs
        names = [_cell(r.name) for r in runs]
        width = max([len(n) for n in names] + [3])
        print(f"\n  {'RUN'.ljust(width)}  {'SIZE':>9}  {'SHARE':>6}  {'':20}  BIGGEST CATEGORY")
        for r, name in zip(runs, names):
            big = r.biggest_category()
            big_s = ""
            if big:
                big_s = f"{cat.label(big)} {share(r.categories[big].bytes, r.total_bytes).strip()}"
            print(f"  {name.ljust(width)}  {human_bytes(r.total_bytes):>9}  {share(r.total_bytes, total)}"
                  f"  {bar(r.total_bytes, total)}  {big_s}")
        if top and len(fp.runs) > top:
            rest = fp.runs[top:]
            print(f"  … {len(rest)} more runs, {human_bytes(sum(r.total_bytes for r in rest))}")
    cats = list(fp.categories.values())
    if top and by == "category":
        cats = cats[:top]
    rows = [("  CATEGORY", "SIZE", "SHARE", "FILES", "RECORDS")]
    for c in cats:
        # records are counted inside event files; a file category has none to count
        records = "—" if c.name in cat.FILE_LEVEL else f"{c.records:,}"
        rows.append((f"  {cat.label(c.name)[:40]}", human_bytes(c.bytes), share(c.bytes, total).strip(),
                     f"{c.files:,}", records))
    print()
    _print_table(rows, right=(1, 2, 3, 4))
    for w in fp.warnings + [w for r in fp.runs for w in r.warnings]:
        print(f"warning: {shown(w)}", file=sys.stderr)


def _cell(name: str, most: int = 60) -> str:
    """A run name as one table cell: escaped (``shown``: a newline or a byte not UTF-8 cannot
    split or garble a row) and at most ``most`` characters, its middle elided (the start and
    the end are what tell sibling runs apart); ``--json`` has the name whole."""
    text = shown(name)
    if len(text) <= most:
        return text
    keep = most - 1
    return text[:keep // 2] + "…" + text[len(text) - (keep - keep // 2):]


def cmd_scan(args) -> int:
    from tb_footprint_plugin import api

    fp = api.scan(args.logdir, backup_dir=args.backup_dir, use_cache=not args.no_cache)
    api.check_logdir(args.logdir, args.backup_dir, footprint=fp)
    fp = _selected(fp, api.select_runs(fp, args.runs, args.run_glob))
    if args.json:
        _json().dump(fp.to_dict(with_files=args.files), sys.stdout, indent=1, ensure_ascii=True)
        print()
    else:
        _print_scan(fp, args.top, args.by)
        if args.files:
            _print_files(fp, args.top)
    _warn_unsettled(args.logdir, args.backup_dir)
    return EXIT_OK


def _selected(fp, names: Optional[List[str]]):
    """The scan narrowed to the selected runs (same selectors as every verb): their runs, and the
    categories and total of those runs only."""
    if names is None:
        return fp
    import dataclasses

    chosen = set(names)
    runs = [r for r in fp.runs if r.name in chosen]
    cats: dict = {}
    for r in runs:
        for name, c in r.categories.items():
            if name not in cats:
                cats[name] = type(c)(name=name)
            cats[name].add(c)
    cats = dict(sorted(cats.items(), key=lambda kv: (-kv[1].bytes, kv[0])))
    return dataclasses.replace(fp, runs=runs, categories=cats, total_bytes=sum(r.total_bytes for r in runs))


def _print_files(fp, top: Optional[int]) -> None:
    """``scan --files``: every file of each run shown, biggest first, with its categories."""
    from tb_footprint_plugin.api import categories as cat

    runs = fp.runs[:top] if top else fp.runs
    for r in runs:
        print(f"\n{_shown(r.name)}: {len(r.files)} file(s), {human_bytes(r.total_bytes)}")
        for f in sorted(r.files, key=lambda f: (-f.size, f.path)):
            cats = ", ".join(cat.label(c) for c, _ in sorted(f.categories.items(), key=lambda kv: -kv[1])[:2])
            print(f"  {human_bytes(f.size):>9}  {_shown(f.path)}" + (f"  ({cats})" if cats else ""))


def _warn_unsettled(logdir: str, backup_dir=None) -> None:
    """Unfinished operations and damage, with the command that settles them (on stderr)."""
    from tb_footprint_plugin import api

    try:
        found = api.unfinished(logdir, backup_dir)
    except (OSError, ValueError):
        return
    for o in _unfinished_lines(api, logdir, backup_dir, found["unfinished_operations"]):
        print(f"warning: {o}", file=sys.stderr)
    for p in found["problems"]:
        print(f"warning: [{p['code']}] {p['detail']}", file=sys.stderr)
    if found["settle_command"]:
        print(f"warning: run `{found['settle_command']}` to settle this", file=sys.stderr)


def _unfinished_lines(api, logdir: str, backup_dir, ops: List[dict]) -> List[str]:
    """Each unfinished operation said plainly: is its run untouched (every file's sha256 as
    before) or changed, and what settles it."""
    try:
        state = {s["op_id"]: s for s in api.interrupted_state(logdir, backup_dir)}
    except (OSError, ValueError):
        state = {}
    out = []
    for o in ops:
        s = state.get(o["op_id"]) or {}
        # what recover will do, by recovery's own branches (health.recover_will): the same words
        # recover then prints, not a guess of this front end's
        will = (o.get("recover_will") or {}).get("detail")
        if s.get("untouched"):
            how = (f"its run is untouched (its {s['files']} file(s) have the sha256 they had before); "
                   + (f"recover: {will}" if will else "settling removes the attempt's staging files and journal"))
        elif s.get("untouched") is False:
            how = (f"its run is changed ({len(s['changed'])} of {s['files']} file(s) differ from before); "
                   + (f"recover: {will}" if will else "settling puts the originals back, or finishes it if it "
                                                       "had committed"))
        else:
            how = f"recover: {will}" if will else "settling rolls it back or finishes it"
        out.append(f"unfinished {o['kind']} operation {o['op_id']} on run {o['run']!r} (interrupted): {how}")
    return out


def cmd_demo(args) -> int:
    from tb_footprint_plugin.demo import generate_demo

    summary = generate_demo(args.dir, seed=args.seed, scale=args.scale, overwrite=args.overwrite)
    print(_json().dumps(summary, indent=1) if args.json else f"demo logs written to {args.dir}")
    if summary.get("state_kept") and not args.json:
        print(summary["state_kept"])  # not silently (review R17 F16)
    return EXIT_OK


def _dump(obj) -> None:
    _json().dump(obj, sys.stdout, indent=1, ensure_ascii=True, default=str)
    print()


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--backup-dir", default=None, help="vault location (default LOGDIR/.tb-footprint)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")


def _others_flag(ap: argparse.ArgumentParser, verb: str) -> None:
    ap.add_argument("--include-others-runs", action="store_true",
                    help=f"{verb} runs another user owns too (its folder, or a file it would change): by default "
                         "they are left alone (others_run), since your vault would hold their originals out of "
                         "their owner's reach; each one taken says whose vault holds it. Root too")


def _filters(ap: argparse.ArgumentParser) -> None:
    _others_flag(ap, "plan and reduce")
    ap.add_argument("--policy", default="archive",
                    help="archive (default), lossless, keep-latest[=N], or a JSON/TOML policy file")
    _selectors(ap, positional=False)
    ap.add_argument("--min-size", type=_arg(_number(parse_size)), default=0, metavar="SIZE",
                    help="only runs of at least this size (100MB; 0 or more)")
    ap.add_argument("--older-than", type=_arg(_number(parse_duration)), default=None, metavar="DURATION",
                    help="only runs not written for this long (14d, 12h; 0 or more)")
    ap.add_argument("--quiet-period", type=_arg(_number(parse_duration)), default=600.0, metavar="DURATION",
                    help="a run written more recently than this is active and left alone (default 10m; 0 or more)")
    ap.add_argument("--delete", action="append", default=[], metavar="CATEGORY",
                    help="custom rule on top of --policy: also delete this file category (repeatable)")
    ap.add_argument("--keep", action="append", default=[], metavar="CATEGORY",
                    help="custom rule on top of --policy: keep this file category (repeatable)")
    ap.add_argument("--keep-latest", type=_arg(_number(_whole)), default=None, metavar="N",
                    help="custom rule: keep only the newest N profile sessions / traces per worker (0 or more: "
                         "0 keeps none, their backups kept)")
    ap.add_argument("--keep-per-tag", type=_per_tag, default=None, metavar="PLUGIN=N,...",
                    help="custom rule: keep N evenly spaced items per tag (first and last always, so N is at "
                         "least 2), e.g. histograms=50,images=5")


GLOB_HELP = ("runs whose name matches this glob: `*` stays within one folder, `**` spans folders "
             "('sweep/*', 'sweep/**', '**/eval'); an error if none does")


def _selectors(ap: argparse.ArgumentParser, positional: bool = True) -> None:
    """The run selectors every verb that takes runs accepts, with one meaning: names (positional
    and ``--run``), and a glob (``--runs`` or ``--glob``, matched by ``plan.select``)."""
    if positional:
        # default=[]: argparse makes a '*' positional without a default required, and a missing
        # logdir was then said as "required: logdir, RUN" (review R16 F9)
        ap.add_argument("run_names", nargs="*", default=[], metavar="RUN",
                        help="runs by name, as TensorBoard shows them (after `--` a name may begin with '-')")
    ap.add_argument("--run", dest="runs", action="append", default=None, metavar="NAME",
                    help="only this run (repeatable; an error if there is no such run)")
    ap.add_argument("--runs", "--glob", dest="run_glob", default=None, metavar="GLOB", help=GLOB_HELP)


def _merge_names(args) -> None:
    """Positional run names join ``--run``: one list of names for every verb."""
    names = list(getattr(args, "run_names", None) or [])
    if names:
        args.runs = list(args.runs or []) + [n for n in names if n not in (args.runs or [])]


def _check_selectors(args) -> None:
    """An empty or blank run name or glob (``--glob "$RUNS"`` with RUNS unset) is a usage
    error for every verb: read as "no selector" it would act on every run."""
    glob = getattr(args, "run_glob", None)
    if isinstance(glob, str) and not glob.strip():
        raise UsageError(f"an empty run glob ({glob!r}) selects no run; leave --glob out to mean every run")
    names = getattr(args, "runs", None)  # `status --runs` is a flag, not names
    if isinstance(names, list) and any(not str(n).strip() for n in names):
        raise UsageError("an empty run name selects no run")


def _per_tag(text: str) -> dict:
    """``--keep-per-tag PLUGIN=N,...``: each N a whole number of at least 2 (the first and the
    last item of a tag are always kept), by ``_number``'s rule."""
    out = {}
    count = _number(_whole, 2)
    for part in filter(None, text.split(",")):
        plugin, eq, n = part.partition("=")
        if not eq or not plugin.strip():
            raise argparse.ArgumentTypeError(f"expected PLUGIN=N, got {part!r}")
        try:
            out[plugin.strip()] = count(n)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: N must be a whole number of at least 2 (a tag's first "
                                             "and last items are always kept)") from None
    return out


def _policy(args):
    """--policy, refined by custom rules given as flags."""
    from tb_footprint_plugin import api

    return api.custom_policy(args.policy, delete=args.delete, keep=args.keep, keep_latest=args.keep_latest,
                             keep_per_tag=args.keep_per_tag)


def _frees(removable: int, on_disk: int) -> str:
    """A run's plan figure: what ``du`` sees go, and the names' bytes when they differ (a sparse
    file's holes, a second hard link of an inode the plan removes: review R17 F3)."""
    if on_disk == removable:
        return f"frees {human_bytes(removable)}"
    return f"removes {human_bytes(removable)}, frees {human_bytes(on_disk)} on disk"


def _print_plan(p, verbose: bool = False) -> None:
    print(f"policy {p.policy['name']}: {p.policy['description']}")
    idle = [rp for rp in p.runs if rp.code == Skip.NOTHING]
    for rp in p.runs:
        if rp in idle:
            continue
        head = f"\n{shown(rp.run)}: {human_bytes(rp.bytes_before)} → {human_bytes(rp.expected_after_bytes)}"
        if rp.skipped:  # with its code, as a reduce's skipped outcome says it
            print(f"{head}  [skipped{f' [{rp.code}]' if rp.code else ''}: {rp.skipped}]")
            continue
        print(f"{head}  ({_frees(rp.removable_bytes, rp.disk_removable_bytes)})")
        if rp.owner_said:  # another user's, taken on request: said before anyone says yes (review R12 H3)
            print(f"  ! {rp.owner_said}")
        if rp.linked_files:  # what the swap cannot free: another name keeps it (the plan's note says more)
            print(f"  ! {rp.linked_files} file(s) hard-linked elsewhere ({human_bytes(rp.linked_bytes)}): "
                  f"their bytes stay on disk, their backups are copies [{Finding.HARD_LINKED}]")
        if verbose:
            _print_fidelity(rp)
        else:
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
          f"(removable {human_bytes(p.removable_bytes)}, {share(p.removable_bytes, p.total_bytes).strip()}"
          + (f"; {human_bytes(p.disk_removable_bytes)} of it on disk" if p.disk_removable_bytes != p.removable_bytes
             else "") + ")")
    if p.disk_in_use_bytes is not None:
        print(f"{_in_use_now(p.logdir)} (logdir + vault): {human_bytes(p.disk_in_use_bytes)}")
    for n in p.notes:
        print(f"note: {n}")
    if p.cost:
        from tb_footprint_plugin.api import format_cost

        print("\nrequests to the store:")
        print(format_cost(p.cost))


def _in_use_now(logdir: str) -> str:
    """What the in-use figure is called: "disk in use now" on a disk, "stored now" in a bucket
    (what the store keeps and bills: the objects' sizes, not blocks)."""
    from tb_footprint_plugin import api

    return "stored now" if api.is_remote(logdir) else "disk in use now"


def cmd_plan(args) -> int:
    from tb_footprint_plugin import api

    policy = api.get_policy(_policy(args))  # a bad policy is said first, whatever the folder holds
    api.check_logdir(args.logdir, args.backup_dir)
    p = api.plan(args.logdir, policy, backup_dir=args.backup_dir, runs=args.runs,
                 run_glob=args.run_glob, min_size=args.min_size, older_than=args.older_than,
                 quiet_period=args.quiet_period, include_others_runs=args.include_others_runs)
    _dump(p.to_dict()) if args.json else _print_plan(p, args.verbose)
    _warn_unsettled(args.logdir, args.backup_dir)
    return EXIT_OK


def cmd_policies(args) -> int:
    from tb_footprint_plugin.api import list_policies
    from tb_footprint_plugin.api import categories as cat

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
        for verb, what in p.content_lines():
            print(f"    {verb:8} {what}")
        if p.keep_latest is not None:
            print(f"    keep the newest {p.keep_latest} profile session(s) per run")
    print("\nscalars, hparams and text are never changed by any policy.")
    return EXIT_OK


def _taken_said(o) -> str:
    """Another user's run reduced or retired on request (finding ``others_run_taken``): its outcome's
    words, whose vault holds it, on a line of their own."""
    taken = any(f.get("code") == Finding.OTHERS_RUN_TAKEN for f in getattr(o, "findings", None) or [])
    return f"\n    {o.reason}" if taken and o.reason else ""


def _outcome_line(o) -> str:
    if o.status == Outcome.VERIFIED:
        return (f"✓ {shown(o.run)}: verified, {human_bytes(o.bytes_before)} → {human_bytes(o.bytes_after)}"
                f" (saved {human_bytes(o.saved_bytes)}, op {o.op_id})") + _taken_said(o) + _findings_said(o)
    if o.status == Outcome.RESTORED:
        return f"✓ {shown(o.run)}: restored ({o.reason}; op {o.op_id})" + _findings_said(o)
    mark = "·" if o.status in (Outcome.SKIPPED, Outcome.DRY_RUN) else "✗"
    code = f" [{o.code}]" if o.code else ""
    who = shown(o.run) if o.run else "(the logdir's state)"  # damage of the state is no run's
    return f"{mark} {who}: {o.status}{code}" + (f" — {o.reason}" if o.reason else "") + _findings_said(o)


def _findings_said(o, most: int = 3) -> str:
    """An outcome's findings (``RunOutcome.findings``, its codes besides ``code``) on a line of
    their own under it: each code once, with the paths it names (the first ``most``)."""
    by: Dict[str, List[str]] = {}
    for f in getattr(o, "findings", None) or []:
        by.setdefault(f["code"], [])
        if f.get("path"):
            by[f["code"]].append(shown(f["path"]))
    said = [f"[{c}]" + (f" {', '.join(ps[:most])}" + (f" (+{len(ps) - most} more)" if len(ps) > most else "")
                        if ps else "") for c, ps in by.items()]
    return ("\n    also: " + "; ".join(said)) if said else ""


class _Progress:
    """A progress bar on stderr when it is a terminal (bytes with rate and ETA, plus runs done);
    nothing otherwise. Redrawn twice a second so a long step still shows time passing. It counts
    what it shows: the runs and bytes of the plan it was given (the same the plan summary printed),
    never an outcome of a run outside it (a ledger skip, a run left alone)."""

    def __init__(self, sizes: dict, verb: str):
        self.bar = None
        self.sizes = dict(sizes)
        self.finished: set = set()
        self.credit: dict = {}
        if not sys.stderr.isatty() or not self.sizes:
            return
        try:
            from tqdm import tqdm
        except ImportError:  # progress is a nicety
            return
        import shutil
        import threading

        # a terminal that reports no size (some ptys) still gets a bar of a usual width
        # the total in the plan's own words (human_bytes), so the bar and the summary agree
        self.of = f"/{len(self.sizes)} runs of {human_bytes(sum(self.sizes.values()))}"
        self.bar = tqdm(total=sum(self.sizes.values()), unit="B", unit_scale=True, unit_divisor=1000, desc=verb,
                        file=sys.stderr, ncols=shutil.get_terminal_size((100, 24)).columns,
                        nrows=shutil.get_terminal_size((100, 24)).lines,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}B/{total_fmt}B "
                                   "[{elapsed}<{remaining}, {rate_fmt}{postfix}]",
                        postfix=f"0{self.of}")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                self.bar.refresh()

    def step(self, run: str, size: int, fraction: float) -> None:
        """``run`` (of ``size`` bytes) is ``fraction`` done."""
        if self.bar is None or run not in self.sizes:
            return
        with self._lock:
            new = int(size * max(0.0, min(1.0, fraction)))
            delta = new - self.credit.get(run, 0)
            if delta > 0:
                self.credit[run] = new
                self.bar.update(delta)
            self.bar.set_description_str(shown(run)[-30:], refresh=False)

    def done(self, run: str, line: str) -> None:
        """``run`` finished; ``line`` says how."""
        if self.bar is None:
            print(line, flush=True)
            return
        if run in self.sizes and run not in self.finished:
            self.step(run, self.sizes[run], 1.0)
            with self._lock:
                self.finished.add(run)
                self.bar.set_postfix_str(f"{len(self.finished)}{self.of}", refresh=False)
        with self._lock:
            self.bar.write(line, file=sys.stdout)

    def close(self) -> None:
        if self.bar is not None:
            self._stop.set()
            with self._lock:
                self.bar.close()


def _counter(verb: str, unit: str):
    """A plain counting bar (``unit`` per step) on stderr when it is a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety
        return None
    import shutil

    # a pty that reports no size gets a usual one: tqdm hides a bar below the last of 0 rows
    size = shutil.get_terminal_size((100, 24))
    return tqdm(total=1, unit=unit, desc=verb, file=sys.stderr, ncols=size.columns, nrows=size.lines)


def _ask(question: str) -> bool:
    """A yes/no question on the terminal (the caller checked stdin is one); anything but y/yes is no."""
    print(question + " [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


GO = None  # what ``_consent`` returns when the verb may change things
#: the rule, as every changing verb's --help says it
CONSENT_RULE = ("The plan is shown first. On a terminal you are asked; --yes (-y) acts without asking; "
                "without a terminal and without --yes nothing changes and the exit code is 2; "
                "--dry-run (-n) only shows the plan (exit 0). Ctrl-C settles the operation under way before "
                "it exits 130, as the next start would: a reduce or retire of a run not yet committed goes back "
                "to its exact bytes (one past its commit is finished); a restore or purge under way is finished.")


def _consent(args, verb: str, changes: int, question: str) -> Optional[int]:
    """The one rule of every verb that changes something (reduce, restore, purge, retire), called
    once the plan has been shown: ``GO`` to act, else the exit code to return having changed nothing.

    ``--dry-run``: nothing changes, exit 0. Nothing to change: exit 0. ``--yes``: act. On a terminal:
    ask. Without a terminal and without ``--yes`` (a notebook cell, CI, a cron job): nothing
    changes and the exit code is 2, so a script that forgot ``--yes`` fails loudly instead of
    acting on a plan nobody read. ``recover`` is not under this rule: it only settles what a crash
    left, as every start of a verb does anyway."""
    if getattr(args, "dry_run", False) or changes == 0:
        return EXIT_OK
    if args.yes:
        return GO
    if sys.stdin.isatty():
        try:
            if _ask(question):
                return GO
        except KeyboardInterrupt:  # at the question nothing has begun: said so, for every verb (review R17 F17)
            print(f"\ntb-footprint {verb}: interrupted at the question; nothing was changed", file=sys.stderr)
            return EXIT_INTERRUPTED
        print("nothing changed.", file=sys.stderr)
        return EXIT_OK
    print(f"tb-footprint {verb}: nothing changed: no terminal to ask on; add --yes (-y) to {verb} as shown, "
          "or --dry-run (-n) to only see the plan", file=sys.stderr)
    return EXIT_USAGE


def _plan_summary(plans: list, out, verbose: bool = False) -> int:
    """The reduce's plan summary, the same lines for a question, a refusal and a progress bar;
    returns how many runs it will touch (an interrupted attempt it settles and redoes included)."""
    todo = _todo(plans)
    size = sum(rp.bytes_before for _, rp in todo)
    removable = sum(rp.removable_bytes for _, rp in todo)
    print(f"policy {plans[0].policy['name']}: {len(todo)} run(s) to reduce, {human_bytes(size)}, "
          f"{human_bytes(removable)} removable ({share(removable, size).strip()}); "
          "backups stay in the vault until `tb-footprint purge`.", file=out)
    for p, rp in todo[:10]:
        name = shown(rp.run) if len(plans) == 1 else f"{p.logdir}: {shown(rp.run)}"
        redo = "  (its interrupted attempt is rolled back first, then it is reduced again)" \
            if rp.code == Skip.UNFINISHED else ""
        print(f"  {name}: {human_bytes(rp.bytes_before)} → {human_bytes(rp.expected_after_bytes)}{redo}", file=out)
        if rp.owner_said:
            print(f"    ! {rp.owner_said}", file=out)
        if verbose:
            _print_fidelity(rp, out, indent="    ")
    if len(todo) > 10:
        print(f"  … {len(todo) - 10} more (`tb-footprint plan {plans[0].logdir}` lists them all)", file=out)
    others = sum(1 for _, rp in todo if rp.owner_said)
    if others:  # the fact the question turns on, counted, even past the ten runs listed
        print(f"  {others} of them another user's, taken on request: their originals go into your vault", file=out)
    done = [rp.run for p in plans for rp in p.runs if rp.code == Skip.LEDGER_DONE]
    if done:
        print(f"  ({len(done)} run(s) this batch's ledger already settled are skipped: {', '.join(done[:6])}"
              + (" …" if len(done) > 6 else "") + ")", file=out)
    return len(todo)


def _todo(plans: list) -> list:
    """(plan, run plan) of every run a reduce will touch: the runs planned, and a run left alone
    only because an interrupted operation of its own is unsettled (the reduce settles it first)."""
    return [(p, rp) for p in plans for rp in p.runs
            if rp.actions and (not rp.skipped or rp.code == Skip.UNFINISHED)]


def _print_fidelity(rp, out=None, indent: str = "  ") -> None:
    """A run's fidelity lines, each followed by its details when the plan carries them
    (``RunPlan.fidelity_details``, a list parallel to ``fidelity``: text or lines of text)."""
    details = getattr(rp, "fidelity_details", None) or []
    for i, line in enumerate(rp.fidelity):
        print(f"{indent}✓ {line}", file=out or sys.stdout)
        d = details[i] if i < len(details) else None
        for extra in (d.splitlines() if isinstance(d, str) else (d or [])):
            if str(extra).strip():
                print(f"{indent}    {extra}", file=out or sys.stdout)


def cmd_reduce(args) -> int:
    from tb_footprint_plugin import api

    try:
        logdirs, shard = _batch_args(args)
    except ValueError as e:  # a shard spec or a scheduler's environment that names no shard
        print(f"tb-footprint reduce: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    api.get_policy(_policy(args))  # a bad policy is said first, whatever the folders hold
    for ld in logdirs:  # before anything is written: a folder with no TensorBoard data gets no state folder
        api.check_logdir(ld, args.backup_dir)
    if args.dry_run:
        reports = api.reduce_logdirs(logdirs, shard=shard, dry_run=True, **_reduce_kwargs(args))
        if args.json:
            out = [r.to_dict() for r in reports]
            _dump(out[0] if len(out) == 1 else out)
            return EXIT_OK
        for logdir, report in zip(logdirs, reports):
            _batch_head(logdirs, logdir, shard, report)
            _print_reduce(args, report)
        return EXIT_OK
    showing = not args.json and sys.stderr.isatty()
    plans = _upfront_plans(args, logdirs, shard) if showing or not args.yes else []
    confirmed = None  # --yes: no question was asked, the reduce does its own plan
    if not args.yes:
        n = _plan_summary(plans, sys.stderr if args.json else sys.stdout, args.verbose)
        rc = _consent(args, "reduce", n, f"Reduce {n} run(s)?")
        if rc is not GO:
            if args.json:
                _dump({"dry_run": True, "changed": False, "plans": [p.to_dict() for p in plans]})
            elif n == 0:
                print("nothing to reduce.")
            return rc
        # the plan said yes to: a run whose plan changed while the question was open is left alone
        confirmed = api.confirmed_digests(plans)
    todo = {rp.run: rp.bytes_before for _, rp in _todo(plans)}
    bar_ = _Progress(todo, "reducing") if showing else None
    current: List[str] = []  # the runs under way (several with --jobs), for what an interrupt says

    def progress(run, _step, frac):
        if run not in current:
            current.append(run)
        if bar_ is not None:
            bar_.step(run, todo.get(run, 0), frac)

    landed = []  # every run's outcome as it lands: an interrupt with --json still reports them

    def on_outcome(o):
        landed.append(o)
        if o.run in current and not cancel.cancelled:  # after an interrupt: still the runs it stopped
            current.remove(o.run)
        if args.json:
            return
        line = _outcome_line(o)
        bar_.done(o.run, line) if bar_ is not None else print(line, flush=True)

    cancel = api.CancelToken()
    since = time.time()
    try:
        with _interruptible(cancel):
            reports = api.reduce_logdirs(
                logdirs, shard=shard, dry_run=False, ledger=args.ledger or "default",
                on_outcome=on_outcome, progress=progress, cancel=cancel,
                max_file_ops_per_second=args.max_file_ops_per_second, lease_seconds=args.lease,
                confirmed=confirmed, **_reduce_kwargs(args))
    except KeyboardInterrupt as e:
        if bar_ is not None:
            bar_.close()
        return _interrupted(args, "reduce", logdirs, shard, current, getattr(e, "settled", None), since,
                            landed=landed)
    if bar_ is not None:
        bar_.close()
    if args.json:
        out = [api.reduce_summary(r) for r in reports]  # what the tab shows too
        _dump(out[0] if len(out) == 1 else out)
        return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED
    rc = EXIT_OK
    for logdir, report in zip(logdirs, reports):
        _batch_head(logdirs, logdir, shard, report)
        rc = max(rc, _print_reduce(args, report))
    return rc


def _reduce_kwargs(args) -> dict:
    """The selection, policy and checks of a reduce, the same for its dry run and the real one."""
    return dict(backup_dir=args.backup_dir, policy=_policy(args), runs=args.runs, run_glob=args.run_glob,
                min_size=args.min_size, older_than=args.older_than, quiet_period=args.quiet_period, jobs=args.jobs,
                timeout=args.timeout, verify_backends=args.verify,
                vault_format=getattr(args, "vault_format", None),
                include_others_runs=args.include_others_runs)


def _batch_head(logdirs: List[str], logdir: str, shard, report) -> None:
    if len(logdirs) > 1 or shard:
        print(f"\n{logdir}" + (f" — shard {shard[0]}/{shard[1]}: {len(report.shard_runs or [])} run(s)"
                               if shard else ""))


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


#: the SIGINT handler a verb's ``_interruptible`` replaced, kept while Ctrl-C stays ignored from
#: the instant its ``with`` ends by an interrupt until ``_interrupted`` has settled (a second Ctrl-C
#: in between escaped the verb's own settling: review R8 F2); put back by ``_interrupted``, else
#: by ``main`` on its way out
_SIGINT_AFTER_SETTLING: List = []


def _sigint_back() -> None:
    """Put back the SIGINT handler an interrupted verb's settling kept ignored, if any."""
    import signal

    if _SIGINT_AFTER_SETTLING:
        signal.signal(signal.SIGINT, _SIGINT_AFTER_SETTLING.pop())


class _interruptible:
    """While a verb changes things, Ctrl-C cancels the batch (a run on another thread stops at its
    next step and rolls back) and interrupts this thread (its run is settled by ``_interrupted``)."""

    def __init__(self, cancel, settles: str = "each run under way stops at its next step and is rolled back"):
        self.cancel, self.before, self.settles = cancel, None, settles

    def _handler(self, signum, frame):
        if self.cancel.cancelled:  # settling now: a second Ctrl-C must not cut a rollback short
            print("\nstill settling the interrupted run (Ctrl-\\ quits at once; the next start settles "
                  "what is left)", file=sys.stderr, flush=True)
            return
        print(f"\ninterrupting: {self.settles}…", file=sys.stderr, flush=True)
        self.cancel.cancel()
        raise KeyboardInterrupt

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self.before = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        import signal

        if self.before is None:
            return
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # straight from this handler (which no longer raises: cancelled) to ignored, so a
            # second Ctrl-C before ``_interrupted`` cannot cut the settling short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _SIGINT_AFTER_SETTLING[:] = [self.before]
        else:
            signal.signal(signal.SIGINT, self.before)


def _interrupted(args, verb: str, logdirs: List[str], shard, current: List[str],
                 settled_already: Optional[List[dict]] = None, since: Optional[float] = None,
                 landed: Sequence = ()) -> int:
    """After Ctrl-C: settle what the interrupted run left (a run not committed goes back to its
    exact original bytes, one past the commit point is finished) with a second Ctrl-C ignored,
    say what happened and what to run next; exit 130. ``since``: when this reduce began, to say
    what became of an interrupted run that left nothing to settle. ``landed``: the outcomes of the
    runs finished before the interrupt; with ``--json`` stdout is one JSON document of those and
    of what was settled (a script resuming the work parses it, never an empty stdout). A second
    Ctrl-C is ignored while it settles; the handler before is put back after, so a process that
    called ``main`` (a notebook, a test) and its later children are interruptible again."""
    import signal
    import threading

    before = None
    if threading.current_thread() is threading.main_thread():
        ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
        before = _SIGINT_AFTER_SETTLING.pop() if _SIGINT_AFTER_SETTLING else ignored
    try:
        return _settle_interrupted(args, verb, logdirs, shard, current, settled_already, since, landed)
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)


def _settle_interrupted(args, verb: str, logdirs: List[str], shard, current: List[str],
                        settled_already: Optional[List[dict]], since: Optional[float], landed: Sequence) -> int:
    """``_interrupted``'s work, with Ctrl-C ignored."""
    from tb_footprint_plugin import api

    where = f" while changing {', '.join(current)}" if current else ""
    print(f"\ntb-footprint {verb}: interrupted{where}; settling what it left…", file=sys.stderr, flush=True)
    reducing = verb == "reduce"
    all_settled: List[dict] = []
    for ld in logdirs:
        if settled_already is not None:  # the library settled it on its way out (``api.Interrupted``)
            settled = settled_already
            settled_already = []  # the other logdirs: nothing under way there; settle what a crash left
        else:
            try:
                settled = api.settle_interrupted(ld, args.backup_dir, policy=_policy(args) if reducing else "archive",
                                                 ledger=(args.ledger or "default") if reducing else None, shard=shard)
            except (OSError, ValueError) as e:
                print(f"  {ld}: not settled now ({e}); the next start settles it "
                      f"(`tb-footprint recover {ld}`)", file=sys.stderr)
                continue
        all_settled.extend(settled)
        for o in settled:
            print(f"  {_recovered_line(o)}", file=sys.stderr)
        if reducing and since is not None and len(logdirs) == 1 and "://" not in ld:
            named = {o.get("run") for o in settled}
            for line in _unsettled_lines(ld, args.backup_dir, [r for r in current if r not in named], since):
                print(f"  {line}", file=sys.stderr)
    words = sys.argv[1:] if sys.argv[1:2] == [verb] else [verb, *logdirs]
    cut = words.index("--") if "--" in words else len(words)  # after `--` every word is a run name
    if "--yes" not in words[:cut] and "-y" not in words[:cut]:
        words = [*words[:cut], "--yes", *words[cut:]]
    done = {"reduce": "Runs reduced and verified", "restore": "Runs restored",
            "purge": "Backups deleted"}.get(verb, "Runs retired")
    print(f"{done} before the interrupt stay so; nothing else was changed. `tb-footprint status "
          f"{_quote(logdirs[0])}` shows the logdir. To go on: `tb-footprint "
          f"{' '.join(_quote(w) for w in words)}`" + (" (runs already done are skipped)." if reducing else "."),
          file=sys.stderr)
    if getattr(args, "json", False):
        _dump({"interrupted": True, "verb": verb, "outcomes": [o.to_dict() for o in landed],
               "settled": [dict(o) for o in all_settled]})
    return EXIT_INTERRUPTED


def _unsettled_lines(logdir: str, backup_dir: Optional[str], runs: List[str], since: float) -> List[str]:
    """What became of each interrupted run that left nothing to settle: the interrupt came
    before its transaction began (nothing of it changed) or after its commit (a verified
    reduction, e.g. while its backups were compacted or the ledger written) — said from this
    command's own operations of the run, so the user is not left guessing."""
    from tb_footprint_plugin import api

    lines = []
    for run in runs:
        try:
            ops = [o for o in api.operations(logdir, run=run, backup_dir=backup_dir)
                   if o.get("kind") == "reduce" and isinstance(o.get("started_at"), (int, float))
                   and o["started_at"] >= since]
        except (OSError, ValueError):
            continue  # the manifests cannot be read now: `status` says it
        if not ops:
            lines.append(f"✓ {run}: untouched: stopped before it backed up or changed any file")
        elif str(ops[0].get("outcome")) == Outcome.VERIFIED:
            lines.append(f"✓ {run}: reduced and verified before the interrupt took effect — op {ops[0]['op_id']}")
        elif str(ops[0].get("outcome")) == Outcome.ROLLED_BACK:
            lines.append(f"✓ {run}: rolled back: as it was — op {ops[0]['op_id']}")
    return lines


def _recovered_line(o: dict) -> str:
    """One settled operation, said plainly: what the run is now."""
    if o["action"] == Recovery.ROLLED_BACK:
        if o["untouched"] and not o["files"]:  # stopped before its first backup: nothing of it was changed
            state = "untouched: stopped before it backed up or changed any file"
        elif o["untouched"]:
            state = f"untouched: its {o['files']} file(s) have the sha256 they had before; staging files removed"
        elif o["untouched"] is False:
            state = f"rolled back, but not every file has its sha256 from before ({o['detail']}): see `status`"
        else:
            state = f"rolled back: as it was ({o['detail']})"
        return f"{'✗' if o['untouched'] is False else '✓'} {shown(o['run'])}: {state} — op {o['op_id']}"
    if o["action"] == Recovery.COMPLETED and o.get("kind") == "reduce":
        return f"✓ {shown(o['run'])}: was past the commit point: reduced and verified — op {o['op_id']}"
    if o["action"] == Recovery.COMPLETED and o.get("code") == Finding.COMPACTION_FINISHED:
        # a batch compacts its committed runs in rounds: one the interrupt came before is done here
        return f"✓ {shown(o['run'])}: reduced and verified; its backups compacted now — op {o['op_id']}"
    if o["action"] == Recovery.COMPLETED:  # a restore, salvage, retire, purge or vault upkeep, finished
        return f"✓ {shown(o['run'] or 'vault')}: finished — {o['detail']}" + (f" — op {o['op_id']}" if o["op_id"] else "")
    mark = "✗" if o["action"] == Recovery.FAILED else "·"
    return f"{mark} {shown(o['run'] or 'vault')}: {o['action']} [{o['code']}] — {o['detail']}"


def _batch_args(args):
    """(logdirs, shard) of a reduce: positional logdirs plus ``--logdirs-from``; the shard from
    ``--shard``, else from a Slurm array or a Kubernetes Indexed Job's environment."""
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
    if args.shard and args.shard_count is not None and args.shard_count != args.shard[1]:
        # two counts: which one the other workers of the batch use cannot be told, and a partition
        # of another count takes other runs
        raise api.ShardError(f"--shard {args.shard[0]}/{args.shard[1]} and --shard-count {args.shard_count} "
                             "give two shard counts; give one")
    shard = args.shard or api.shard_from_env(os.environ, args.shard_count)
    return logdirs, shard


def _upfront_plans(args, logdirs: List[str], shard) -> list:
    """What this call would reduce, per logdir (a shard's runs only): made up front only for a
    terminal's question or progress bar."""
    from tb_footprint_plugin import api

    mine = api.shard_plan(logdirs, shard, args.backup_dir) if shard else None
    several = len(logdirs) > 1 and (args.runs is not None or args.run_glob)
    selection = api.selection_by_logdir(logdirs, args.runs, args.run_glob, args.backup_dir) if several else {}
    plans = []
    for ld in logdirs:
        sel = selection.get(ld, {"runs": args.runs, "run_glob": args.run_glob})
        runs = sel["runs"]
        if mine is not None and "://" not in ld:  # a bucket logdir is reduced whole (as reduce_logdir does)
            runs = [r for r in mine.get(os.path.abspath(ld), []) if runs is None or r in runs]
        p = api.plan(ld, _policy(args), backup_dir=args.backup_dir, runs=runs, run_glob=sel["run_glob"],
                     min_size=args.min_size, older_than=args.older_than, quiet_period=args.quiet_period,
                     include_others_runs=args.include_others_runs)
        # a resumed batch skips what its ledger settled: the question counts only what it will touch
        api.ledger_skips(p, _policy(args), backup_dir=args.backup_dir, ledger=args.ledger or "default", shard=shard)
        plans.append(p)
    return plans


def _why_nothing_freed(args, done) -> str:
    """Why a reduce freed no disk space, from the facts: no run reduced (the state's records
    alone took the space), hard-linked backups holding every byte, or backups kept until purge."""
    if not done:
        return "no run was reduced; that is the state's own records"
    if getattr(args, "vault_format", None) == "hardlink":
        return "the backups are hard links there"
    return "the backups stay in the vault until `tb-footprint purge`"


def _print_reduce(args, report) -> int:
    if args.dry_run:
        _print_plan(report.plan, args.verbose)
        print("\ndry run: nothing was changed. Run again without --dry-run to reduce.")
    else:
        for r in report.recovered:
            print((f"recovered {r.op_id} ({shown(r.run)}): {r.action} — {r.detail}" if r.action != Recovery.REFUSED
                   else f"refused [{r.code}] journal {r.op_id}: {r.detail}") + _findings_said(r))
        for prob in report.ledger_problems:
            print(f"refused [{prob['code']}] ledger: {prob['detail']}" +
                  (f" (kept as {prob['kept_as']})" if prob.get("kept_as") else ""))
        done = [o for o in report.outcomes if o.status == Outcome.VERIFIED]
        ledger_skips = sum(1 for o in report.outcomes if o.code == Skip.LEDGER_DONE)
        # measured on the logdir's disk: the vault's too only when it is there (review R17 F14)
        disk, whose = (("on the logdir's disk", "the vault is on another disk") if report.plan.vault_elsewhere
                       else ("on disk", "logdir + vault"))
        print(f"\n{len(done)} run(s) reduced and verified, {len(report.failed)} failed or rolled back"
              + (f", {ledger_skips} already done in the ledger" if ledger_skips else "")
              + f"; removed {human_bytes(report.removed_from_logdir_bytes)} from the logdir; "
              + (f"freed now {human_bytes(report.freed_now_bytes)} {disk} ({whose}); "
                 if report.freed_now_bytes > 0 else
                 f"freed now nothing {disk} ({whose}{'; ' if report.plan.vault_elsewhere else ': '}"
                 f"{human_bytes(-report.freed_now_bytes)} more, " + _why_nothing_freed(args, done) + "); ")
              + f"{human_bytes(report.freed_on_disk_after_purge_bytes)} more after `tb-footprint purge` "
              f"(backups stay in the vault until then). Ledger: {report.ledger_path}")
        if report.disk_in_use_after_bytes is not None:
            print(f"{_in_use_now(report.plan.logdir)} (logdir + vault): {human_bytes(report.disk_in_use_after_bytes)} "
                  f"(was {human_bytes(report.disk_in_use_before_bytes)})")
        if report.remote_vault:
            print(_remote_line(report.remote_vault))
        if done:
            print("A TensorBoard that is already running keeps showing what it loaded before; "
                  "restart it to see the reduced runs.")
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_restore(args) -> int:
    from tb_footprint_plugin import api

    names = list(args.runs or [])
    if not names and args.run_glob is None and args.op is None and not args.all:
        if not sys.stdin.isatty():
            raise UsageError("name the run(s) to restore, a glob (--runs), an operation (--op), or --all for every run")
        args.all = True  # on a terminal a bare restore offers every run, and asks
    rows = _restorable_rows(api, args)
    if args.op is not None:
        targets = [r for r in rows if r["op_id"] == args.op]
        calls = [dict(op=args.op)]
    elif args.all:
        targets, calls = rows, [dict()]
    else:
        if args.run_glob:
            found, missing = api.selecting.select(sorted({r["run"] for r in rows}), None, args.run_glob)
            if missing:
                raise UsageError(f"nothing to restore matches {args.run_glob!r} (runs with something to restore: "
                                 f"{', '.join(sorted({r['run'] for r in rows})[:8]) or 'none'})")
            names += [n for n in found if n not in names]
        _no_unknown_runs(api, args, names, rows)
        targets = [r for r in rows if r["run"] in names]
        calls = [dict(run=n) for n in names]
    if not args.json:
        for r in targets:
            print(f"  {shown(r['run'])}: {r['what']} {r['op_id']}  {human_bytes(r['bytes'] or 0)}")
        if targets:
            print(f"{len({r['run'] for r in targets})} run(s) to restore byte for byte "
                  f"({len(targets)} operation(s), newest first).")
    if targets:  # a run restored already is said so by ``restore`` itself, without a question
        rc = _consent(args, "restore", len(targets), f"Restore {len({r['run'] for r in targets})} run(s)?")
        if rc is not GO:
            if args.json:
                _dump({"dry_run": True, "changed": False, "restorable": targets})
            return rc
    elif args.dry_run:
        print("nothing to restore")
        return EXIT_OK
    outs = []
    landed = []  # each run's outcome as it lands: one call restores every run of --all
    cancel = api.CancelToken()
    try:  # Ctrl-C: the restore under way is finished now (as the next start would), then exit 130
        with _interruptible(cancel, "the restore under way is finished before exiting"):
            for c in calls:
                outs += _restore_call(api, args, c, landed.append, cancel)
    except KeyboardInterrupt:
        # the runs restored before the interrupt are named (with --json in _interrupted's document)
        for o in landed if not args.json else ():
            print(_outcome_line(o))
        return _interrupted(args, "restore", [args.logdir], None, [], landed=landed)
    if args.json:
        _dump(api.restore_summary(outs)["outcomes"])
    else:
        for o in outs:
            print(_outcome_line(o))
        if not outs:
            print("nothing to restore")
    # restored with an original left in the vault (another file stood at its path): not back either
    return EXIT_OK if all(o.status == Outcome.RESTORED and o.code != Finding.NOT_RESTORED
                          and all(f["code"] != Finding.NOT_RESTORED for f in getattr(o, "findings", ()))
                          or o.code == Skip.ALREADY_RESTORED for o in outs) else EXIT_FAILED


def _no_unknown_runs(api, args, names: List[str], rows: List[dict]) -> None:
    """A named run of which no operation is recorded is a usage error before anything is shown or
    restored (review R17 F15: ``restore A TYPO --yes`` restored A, then exited 2, which says nothing
    changed), as on every other verb; a run restored already (its operations recorded) and a run
    taken along by its parent's retirement (named in its ``takes_along``) go on to ``restore``,
    which says so. Any other name under a recorded run is a typo too (review R19 F2), and so is a
    name a manifest lists as taken along outside its run (the summaries' ``takes_along``: only names
    inside it, review R20)."""
    known = {r["run"] for r in rows}
    unknown = [n for n in names if n not in known]
    if not unknown:
        return
    ops = api.operations(args.logdir, backup_dir=args.backup_dir)
    recorded = known | {o["run"] for o in ops if isinstance(o.get("run"), str)}
    recorded |= {a for o in api.summarize_operations(ops) for a in o.get("takes_along") or ()}
    typos = [n for n in unknown if n not in recorded]
    if typos:
        # a name no readable record carries may be a run whose manifest is refused or unreadable:
        # the engine's own refusal then names that damage (``restore_blocked``, exit 1), never "a typo"
        refusal = api.restore_refusal(args.logdir, typos[0], backup_dir=args.backup_dir)
        if refusal.code != Failure.NOT_FOUND:
            raise refusal
        dash = " (`--yes` after `--` is taken as a run name)" if any(n.startswith("-") for n in typos) else ""
        raise UsageError(f"nothing to restore for run {shown(typos[0])!r}{dash}; nothing was restored (runs with "
                         f"something to restore: {', '.join(shown(n) for n in sorted(known)[:8]) or 'none'})")


def _restore_call(api, args, call: dict, on_outcome, cancel) -> list:
    """``api.restore`` of one call; a run or operation of which nothing is recorded is a usage
    error (exit 2, as a name matching no run is on every verb), while damage that may hide its
    backups stays a failure (``restore_blocked``, exit 1). ``cancel``: the token Ctrl-C sets before
    it interrupts this thread (``_interruptible``), given to the engine too."""
    try:
        return api.restore(args.logdir, backup_dir=args.backup_dir, on_outcome=on_outcome, cancel=cancel, **call)
    except api.TransactionError as e:
        if e.code == Failure.NOT_FOUND:
            rows = sorted({r["run"] for r in _restorable_rows(api, args)})
            raise UsageError(f"{e} (runs with something to restore: "
                             f"{', '.join(shown(n) for n in rows[:8]) or 'none'})") from e
        raise


def _restorable_rows(api, args) -> List[dict]:
    """What a restore could put back: kept reductions and retired runs, as the plan it shows."""
    rows = [{"run": o["run"], "op_id": o["op_id"], "what": "reduction", "bytes": o.get("bytes_before")}
            for o in api.restorable(args.logdir, backup_dir=args.backup_dir)]
    # every store: a bucket's retired runs are in the plan and in the hint of what can come back too
    # (review R21 PD9, PD21: they were left out, so a bucket's unretire printed no plan)
    rows += [{"run": r["run"], "op_id": r["op_id"], "what": "retired run", "bytes": r["bytes"]}
             for r in api.retired(args.logdir, backup_dir=args.backup_dir)]
    return rows


def cmd_verify(args) -> int:
    from tb_footprint_plugin import api

    names = list(args.runs or [])
    hidden: list = []  # the state's damage that may hide a named run's reduction
    if args.run_glob or names:
        kept = sorted({o["run"] for o in api.restorable(args.logdir, backup_dir=args.backup_dir)})
        # a named run without a kept reduction is a usage error (exit 2), never "nothing to verify";
        # unless damaged state may hide it: then that damage is the answer (exit 1, review R22 F2)
        unknown = [n for n in names if n not in kept]
        if unknown:
            hidden = [r for r in api.verify(args.logdir, run=unknown[0], backup_dir=args.backup_dir,
                                            verify_backends=args.verify) if not r["ok"]]
            if not hidden:
                raise UsageError(f"run {shown(unknown[0])!r} has no kept reduction to verify "
                                 f"(runs with one: {', '.join(shown(n) for n in kept[:8]) or 'none'})")
            names = [n for n in names if n in kept]
    if args.run_glob:
        found, missing = api.selecting.select(kept, None, args.run_glob)
        if missing:
            raise UsageError(f"no kept reduction of a run matches {args.run_glob!r} "
                             f"(runs with one: {', '.join(kept[:8]) or 'none'})")
        names += [n for n in found if n not in names]
    # progress on a terminal only (stderr): one step per check, sized once the checks are known
    bar_ = _counter("verifying", "check") if not args.json else None
    done = [0]  # checks finished by earlier calls (one call per named run)

    def progress(summary, i, n):
        if bar_ is None:
            return
        if i == 0:
            bar_.total = done[0] + n
        bar_.n = done[0] + i
        size = human_bytes(summary.get("bytes_before") or 0)
        bar_.set_description_str(f"verifying {summary['run'][-30:]} ({size})")  # redraws

    res: list = []
    seen = set()  # the state's damage comes with each named run's results: said once

    def add(rows):
        for r in rows:
            key = (r["op_id"], r["run"], r.get("code"), r.get("path"), r.get("line"),
                   tuple(c.get("detail") for c in (r.get("verification") or {}).get("checks", [])))
            if key not in seen:
                seen.add(key)
                res.append(r)
    add(hidden)
    # Ctrl-C: the check under way stops within a moment and every run not checked is said so
    # (code interrupted), then exit 130; a second Ctrl-C quits at once
    cancel = api.CancelToken()
    try:
        with _cancelling(cancel):
            for run in names or ([] if hidden else [None]):
                add(api.verify(args.logdir, run=run, op=args.op, backup_dir=args.backup_dir,
                               verify_backends=args.verify, progress=progress, cancel=cancel))
                if bar_ is not None:
                    done[0] = bar_.n = bar_.total
                    bar_.refresh()
    finally:
        if bar_ is not None:
            bar_.close()
    if args.json:
        _dump(res)
    else:
        for r in res:
            # a finding of the state (op "-": a damaged file that may hide manifests; or a file of
            # one operation's: its refused manifest) says its code
            code = f" [{r['code']}]" if r.get("code") and (r["op_id"] == "-" or r.get("path")) else ""
            print(f"{'✓' if r['ok'] else '✗'} {shown(r['run'])} (op {r['op_id']}){code}: {_backups_said(r)}")
            for c in r["verification"].get("checks", []):
                print(f"    {'✓' if c['ok'] else '✗'} {c['detail']}")
        if not res:
            print("no kept reductions to verify")
    if cancel.cancelled:
        unchecked = sum(1 for r in res if r.get("checked") is False)  # whatever its code says it found
        print(f"\ntb-footprint verify: interrupted; {unchecked} reduction(s) not checked [{Failure.INTERRUPTED}] "
              "(nothing was changed)", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if all(r["ok"] for r in res) else EXIT_FAILED


class _cancelling(_interruptible):
    """While a verb that only reads runs, the first Ctrl-C cancels it (it stops within a moment and
    says what it did not get to) and a second one interrupts at once; the handler before is put
    back after (``_interruptible``'s)."""

    def _handler(self, signum, frame):
        if self.cancel.cancelled:
            raise KeyboardInterrupt
        print("\ninterrupting: the check under way stops now…", file=sys.stderr, flush=True)
        self.cancel.cancel()


def _backups_said(r: dict) -> str:
    """What ``verify`` says of one reduction's backups: intact, or those damaged, those this user
    may not read and those its remote store keeps archived, each named; an unreadable or archived
    one is never called damaged (review R16 F16, helper S's note on R24 F8)."""
    said = []
    if r.get("damaged_backups"):
        said.append("backups DAMAGED: " + ", ".join(r["damaged_backups"]))
    if r.get("unreadable_backups"):
        said.append(f"backups UNREADABLE [{r.get('code') or StoreError.PERMISSION}] (permission, not damage): "
                    + ", ".join(r["unreadable_backups"])
                    + " — give this user read access to each file named (`chmod u+r FILE`), or run verify "
                      "as the user who owns the vault")
    if r.get("archived_backups"):
        said.append(f"backups ARCHIVED [{StoreError.ARCHIVED}] (not damaged: the store keeps them in an archive "
                    "class; ask it to restore each object named, then verify again): " + "; ".join(r["archived_backups"]))
    if said:
        return "; ".join(said)
    if r.get("path"):  # the state's finding: no operation's backups of its own checked
        return ("damaged state: the reductions it may hide are not checked" if r.get("op_id") == "-"
                else "its state does not read: its backups are not checked")
    return "backups intact" if r["backups_ok"] else "backups not all checked"


def cmd_purge(args) -> int:
    from tb_footprint_plugin import api

    if getattr(args, "forget_missing", None) is not None:
        return _forget_missing(args)
    purging = []  # set once backups are being deleted: a Ctrl-C then settles the purge

    def purge(yes: bool, op_ids=None):  # every selected run in one pass: shared blobs and lost originals counted once
        def call():
            return api.purge(args.logdir, older_than=args.older_than, runs=args.runs or None, run_glob=args.run_glob,
                             yes=yes, backup_dir=args.backup_dir, op=args.op, op_ids=op_ids)

        if not yes:
            return call()
        purging.append(True)
        # Ctrl-C: the purge under way is finished now (from its recorded intent), then exit 130
        with _interruptible(api.CancelToken(), "the purge under way is finished before exiting"):
            return call()

    try:
        return _purge_asked(args, purge)
    except KeyboardInterrupt:
        if not purging:  # at the preview or the question: nothing was being deleted
            print("\ntb-footprint purge: interrupted before anything was deleted; nothing was changed",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        return _interrupted(args, "purge", [args.logdir], None, [])


def _forget_missing(args) -> int:
    """``purge --forget-missing OP_ID``: what ending the missing manifest's line means, the question
    (the one consent rule), then the one line (``api.forget_missing``)."""
    from tb_footprint_plugin import api

    if args.runs or args.run_glob or args.op or args.older_than is not None:
        raise UsageError("--forget-missing ends one operation's line and purges nothing: give it without run "
                         "selectors, --op or --older-than")
    doc = api.forget_missing(args.logdir, args.forget_missing, yes=False, backup_dir=args.backup_dir)
    if not args.yes:
        if not args.json:
            for w in doc["words"][:-1]:  # a run's name is the log's, untrusted: one printable line each
                print(shown(w))
        rc = _consent(args, "purge", 1, f"End the line of operation {doc['op_id']}? Run {shown(doc['run'])} "
                                        "stays unrestorable either way")
        if rc is not GO:
            if args.json:
                _dump(doc)
            elif args.dry_run:
                print(shown(doc["words"][-1]))
            return rc
    doc = api.forget_missing(args.logdir, args.forget_missing, yes=True, backup_dir=args.backup_dir)
    if args.json:
        _dump(doc)
    else:
        for w in doc["words"] if args.yes else doc["words"][-1:]:
            print(shown(w))
    return EXIT_OK


def _purge_asked(args, purge) -> int:
    """``cmd_purge``'s preview, question and purge (``purge(yes, op_ids)``: ``api.purge`` of the selection)."""
    rep = purge(bool(args.yes))
    if not args.yes:
        if not args.json:
            _print_purge(rep)
        rc = _consent(args, "purge", len(rep.ops), f"Delete these {len(rep.ops)} backup(s)? Their runs can no "
                                                   "longer be restored")
        if rc is not GO:
            if args.json:
                _dump(rep.to_dict())
            elif args.dry_run and rep.ops:
                print("nothing deleted (dry run): add --yes to purge these backups (their runs can no longer "
                      "be restored)")
            return rc
        # the answer was to what the preview showed: only those operations may go (one committed
        # while the question was on screen is never purged unseen), and only if purging them
        # still loses what was said
        shown = [o["op_id"] for o in rep.ops]
        again = purge(False, op_ids=shown)
        if sorted(o["op_id"] for o in again.ops) != sorted(shown) or again.originals_lost != rep.originals_lost:
            print(f"tb-footprint purge: nothing deleted: what this purge would delete changed since the preview "
                  f"({len(again.ops)} backup(s), {again.originals_lost} original(s) lost for good, not "
                  f"{len(rep.ops)} and {rep.originals_lost}); run it again to see the new preview", file=sys.stderr)
            return EXIT_FAILED
        rep = purge(True, op_ids=shown)
    if args.json:
        _dump(rep.to_dict())
    else:
        _print_purge(rep)
    # a backup kept for an error (a full disk, a lock that could not be taken) is a failed purge
    return EXIT_FAILED if any(k["code"] in _FAILURES for k in rep.kept) else EXIT_OK


_FAILURES = frozenset(c.value for c in Failure)


def _print_purge(rep) -> None:
    # a warning refuses nothing: said as such, the purge goes on (review R17 F12)
    for said, found in (("warning", rep.warnings), ("refused", rep.refused)):
        for r in found:
            print(f"{said} [{r['code']}]: {r['detail'] if 'file' not in r else r['file'] + ': ' + r['detail']}")
    for o in rep.ops:
        print(f"  {o['op_id']}  {shown(o['run'])}  {human_bytes(o['bytes'])}" + ("  (restored)" if o["restored"] else "")
              + ("  (retired run: its only copy)" if o.get("kind") == "retire" and not o["restored"] else "")
              + (f"  (files of {', '.join(u['user'] for u in o['others'])}: their only copy)" if o.get("others") else "")
              + ("  (frees nothing: every blob kept)" if o.get("kept_by") else ""))
    verb = "would free" if rep.dry_run else "freed"
    print(f"{len(rep.ops)} backup(s); {verb} {human_bytes(rep.freed_bytes)}; "
          f"{rep.originals_lost} original file(s) {'would be' if rep.dry_run else 'were'} lost for good")
    held = sum(1 for o in rep.ops if o.get("kept_by"))
    if held:  # a missing manifest keeps every blob (the warning above): these free nothing, yet go (review R27)
        print(f"{held} of these {'would free' if rep.dry_run else 'freed'} nothing: every blob of their vault is kept "
              "while an operation the change log names has no manifest (the warning above); their runs "
              f"{'could' if rep.dry_run else 'can'} no longer be restored (their files are counted above), and a later "
              "purge frees their space once that manifest is back")
    others = {u["uid"]: u["user"] for o in rep.ops for u in o.get("others") or []}
    if others:  # runs of other users taken on request (--include-others-runs): they lose them, not you
        held = sum(1 for o in rep.ops if o.get("others"))
        print(f"{held} of these {'hold' if rep.dry_run else 'held'} the only copies of other users' files "
              f"({', '.join(others[u] for u in sorted(others))}): "
              f"{'once purged, nobody can restore them' if rep.dry_run else 'nobody can restore them now'}")
    if rep.folder_freed_bytes is not None:  # a bucket's local folder of blobs: what its forget frees there
        print(f"the local backup folder: {'would free up to' if rep.dry_run else 'freed'} "
              f"{human_bytes(rep.folder_freed_bytes)} of stored blobs")
    for k in rep.kept:
        print(f"  kept {k['op_id']}  {shown(k['run'])}  {human_bytes(k['bytes'])}"
              + ("  (retired run)" if k.get("kind") == "retire" else "") + f"  [{k['code']}] {k['detail']}")
    failed = sum(k["code"] in _FAILURES for k in rep.kept)
    busy = sum(k["code"] == Skip.LOCKED for k in rep.kept)
    guarded = len(rep.kept) - failed - busy
    if guarded:
        print(f"{guarded} backup(s) kept: purging them could destroy bytes that exist nowhere else")
    if busy:
        print(f"{busy} backup(s) not purged: their runs are being changed by another process; purge them later")
    if failed:
        print(f"{failed} backup(s) not purged for the error named above; nothing of theirs was deleted")


def cmd_status(args) -> int:
    from tb_footprint_plugin import api

    st = api.status(args.logdir, backup_dir=args.backup_dir)
    if args.json:
        _dump(st)
        return EXIT_OK
    print(f"{st['logdir']}\n  vault: {human_bytes(st['vault_bytes'])} in {', '.join(st['vaults'])}")
    if st.get("disk_in_use_bytes") is not None:
        print(f"  {_in_use_now(args.logdir)} (logdir + vault): {human_bytes(st['disk_in_use_bytes'])}; "
              + _freed_now(st.get("freed_now_bytes"), bool(st.get("vault_elsewhere")))
              + f"{human_bytes(st.get('freed_after_purge_bytes') or 0)} more freed after `tb-footprint purge`")
    if st.get("remote_vault"):
        print("  " + _remote_line(st["remote_vault"]))
    print(f"  unfinished operations: {len(st['unfinished_operations'])}")
    for line in _unfinished_lines(api, args.logdir, args.backup_dir, st["unfinished"]):
        print(f"    {line}")
    for p in st["problems"]:
        where = f"{p['file']}: " if p.get("file") else ""
        print(f"  problem [{p['code']}]: {where}{p['detail']}")
    for held in st.get("locked_runs", []):  # another live process holds the run: not ours to settle
        print(f"  locked [{held['code']}]: {shown(held['run'])} — {held['detail']}")
    for lw in st["late_writes"]:
        print(f"  late writes [{lw['code']}]: {lw['records']} record(s) written to {lw['path']} after "
              f"{lw['op_id']}" + (f", salvaged into {lw['file']}" if lw.get("file") else ", kept in the vault"))
    for kb in st.get("kept_blobs", []):
        print(f"  kept in the vault [{kb['code']}] by {kb['op_id']}: {kb['holds']}"
              + ("" if kb["present"] else " — MISSING from the vault"))
        print(f"    bring it back: {kb['bring_back']}")
    if st["settle_command"]:
        print(f"  run `{st['settle_command']}` to settle this (also done by the next reduce, restore or purge)")
    # a retired run's copy in the vault is a kept backup too: purge frees it (review R17 F11)
    kept = [o for o in st["operations"] if not o["backup_purged"] and (
        o["kind"] == "reduce" or (o["kind"] == "retire" and o["outcome"] == Outcome.VERIFIED and not o["restored_by"]))]
    print(f"  operations: {len(st['operations'])} ({len(kept)} with kept backups)")
    if st["ledger"]:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(st["ledger"]["counts"].items()))
        print(f"  ledger ({st['ledger']['policy']}): {counts}")
    if st.get("batch"):
        _print_batch(st["batch"], args.runs, args.logdir)
    return EXIT_OK


def _print_batch(b: dict, per_run: bool, logdir: str = "LOGDIR") -> None:
    """The batch as one: every ledger (one per shard) merged; per run who did it with --runs."""
    order = ("pending", "reducing", "verifying", "done", "failed", "skipped", "restored")
    counts = ", ".join(f"{k} {b['counts'][k]} ({human_bytes(b['bytes'].get(k, 0))})" for k in order if k in b["counts"])
    print(f"  batch over {len(b['ledgers'])} ledger(s): {counts or 'no runs'}; "
          f"saved {human_bytes(b['saved_bytes'])}")
    if b["stalled"]:
        sharded = len(b["ledgers"]) > 1 or any(e.get("shard") for e in b["runs"].values())
        if sharded:
            print(f"  {len(b['stalled'])} run(s) were being reduced by a worker that is gone: rerun its shard "
                  "(or any shard covering them) to take them over")
        else:  # one machine, one process: no shard to speak of
            print(f"  {len(b['stalled'])} run(s) were being reduced by a process that is gone (killed or "
                  f"interrupted): `tb-footprint reduce {_quote(logdir)} --yes` settles and reduces them again")
    for p in b["problems"]:
        print(f"  refused [{p.get('code', '?')}]: {p['detail']}")
    if per_run:
        names = {run: _shown(run) for run in b["runs"]}
        width = max([len(n) for n in names.values()] + [3])
        print(f"\n  {'RUN'.ljust(width)}  {'STATE':9}  {'SIZE':>9}  {'AFTER':>9}  WHO")
        for run, e in b["runs"].items():
            who = (f"{e.get('host') or '?'} pid {e.get('pid') or '?'}" if e.get("pid") else "—") + \
                (f" shard {e['shard']}" if e.get("shard") else "")
            after = human_bytes(e["after_size_bytes"]) if e.get("after_size_bytes") is not None else "—"
            state = e["state"] + ("?" if e.get("stalled") else "")
            extra = f"  [{e['code']}]" if e.get("code") else ""
            print(f"  {names[run].ljust(width)}  {state:9}  {human_bytes(e.get('original_size_bytes') or 0):>9}  "
                  f"{after:>9}  {who}{extra}")


def _freed_now(n: Optional[int], elsewhere: bool = False) -> str:
    """"freed now …; " of a status or history line; nothing where it is not measured (a bucket).
    ``elsewhere``: a vault is on another disk, so it is the logdir's disk's (as a reduce says it)."""
    where = "on the logdir's disk (the vault is on another disk)" if elsewhere else "on disk"
    return "" if n is None else f"freed now {human_bytes(n)} {where} by the kept reductions; "


def _shown(name: str) -> str:
    """A run name for one table cell: control characters (a tab, a newline) written as escapes,
    so a name cannot break the columns or the lines."""
    return name if name.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def _size_cell(v) -> str:
    """A history line's byte count for a table cell; blank where the line has no number there
    (lines are untrusted: a planted ``"before": "x"`` costs its cell, not the table)."""
    import math

    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return ""
    return human_bytes(v)


def cmd_history(args) -> int:
    from tb_footprint_plugin import api

    entries = api.history(args.logdir, backup_dir=getattr(args, "backup_dir", None),
                          newest=getattr(args, "last", None))
    if args.csv:  # times as ISO 8601 with the UTC offset, what spreadsheets and pandas parse
        sys.stdout.write(api.history_csv([dict(e, time=_iso(e.get("time"))) for e in entries]))
    elif args.json:
        _dump(entries)
    else:
        import datetime

        rows = [("TIME", "KIND", "OUTCOME", "RUN", "BEFORE", "AFTER", "FREED NOW", "AFTER PURGE", "BACKUP", "OP")]
        for e in entries:
            t = datetime.datetime.fromtimestamp(e.get("time", 0)).strftime("%Y-%m-%d %H:%M")
            if e.get("kind") == "purge":
                sizes = (f"freed {_size_cell(e.get('freed')) or human_bytes(0)}", "")
            else:
                sizes = (_size_cell(e.get("before")) or human_bytes(0), _size_cell(e.get("after")) or human_bytes(0))
            # the entry's own figures (``api.history``): blank where it has none (not a verified reduce)
            freed = tuple(_size_cell(e.get(k)) for k in ("freed_now_bytes", "freed_after_purge_bytes"))
            rows.append((t, str(e.get("kind", "")), str(e.get("outcome", "")), shown(e.get("run", "")), *sizes,
                         *freed, "gone" if e.get("backup") in ("purged", "released") else str(e.get("backup", "")),
                         str(e.get("op_id", ""))))
        if entries:
            _print_disk_line(api, args.logdir, getattr(args, "backup_dir", None))
            _print_table(rows, right=(4, 5, 6, 7))
        else:
            print("no changes recorded")
    _warn_unsettled(args.logdir)
    return EXIT_OK


def _print_disk_line(api, logdir: str, backup_dir: Optional[str]) -> None:
    """The history's header: the disk in use now and what is freed now / after purge, once, by the
    tab's count (``api.disk_numbers``); nothing when the logdir is refused (its refusal is said
    elsewhere: the history still lists what its change log holds)."""
    try:
        nums = api.disk_numbers(logdir, backup_dir)
    except (OSError, ValueError):
        return
    if nums.get("disk_in_use_bytes") is None:
        return
    print(f"{_in_use_now(logdir)} (logdir + vault): {human_bytes(nums['disk_in_use_bytes'])}; "
          + _freed_now(nums.get("freed_now_bytes"), bool(nums.get("vault_elsewhere")))
          + f"{human_bytes(nums.get('freed_after_purge_bytes') or 0)} more freed after `tb-footprint purge`\n")


def _iso(t) -> str:
    import datetime

    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return ""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).astimezone().isoformat(timespec="seconds")


def cmd_recover(args) -> int:
    from tb_footprint_plugin import api

    if args.adopt_moved_state:
        try:
            adopted = api.adopt_moved_state(args.logdir)
        except ValueError as e:  # refused (trust.Untrusted is one), nothing changed
            print(f"tb-footprint: not adopted: {e}", file=sys.stderr)
            return 1
        if not args.json:
            print(f"✓ state adopted: bound to {adopted['logdir']} (moved from {adopted.get('moved_from')}), "
                  f"id {adopted['id'][:8]}… kept" if adopted else "nothing to adopt: the state is bound to this logdir")
    outs = api.recover_logdir(args.logdir, backup_dir=args.backup_dir)
    if args.json:
        _dump([dict(vars(o)) for o in outs])
    else:
        kept_rows = None  # status's kept_blobs, read once, only when a rollback kept backups
        for o in outs:
            # a rollback that kept backups is settled and lost nothing, but its run is not as it was
            # (an original is in the vault only): neither a success nor a failure, and the command
            # that gives the originals back is named under it
            mark = "✗" if o.action in (Recovery.FAILED, Recovery.REFUSED) else \
                "!" if o.action == Recovery.BACKUPS_KEPT else "✓"
            # what it found besides its code (``RecoveryOutcome.findings``) under it, as an outcome's
            print(f"{mark} {o.op_id or '-'} ({shown(o.run or 'vault')}): {o.action} [{o.code}] — {o.detail}"
                  + _findings_said(o))
            # a bucket batch's journal is named by the batch: each run's own op id, the one status,
            # history and restore name, said under it (review R21 PD14)
            for line in _settled_runs_said(o):
                print(f"    {line}")
            if o.action == Recovery.BACKUPS_KEPT:
                if kept_rows is None:
                    kept_rows = api.kept_blobs(args.logdir, args.backup_dir)
                for line in _kept_by_recovery(args, o, kept_rows):
                    print(f"    {line}")
        left = api.unfinished(args.logdir, args.backup_dir)
        if not outs:
            # never "no damage found" above the damage it lists; and a backup's bytes are hashed by verify, not here
            print("nothing to recover: no unfinished operation" + (
                "; what is left below is not for recover to mend" if left["problems"] else
                ", no damage found in the state (backups' contents are hashed by `tb-footprint verify`)"))
        for p in left["problems"]:
            print(f"still: [{p['code']}] {p['detail']}")
    # a journal refused is left exactly as it is for the user to look at: not settled, so not 0
    return EXIT_FAILED if any(o.action in (Recovery.FAILED, Recovery.REFUSED) for o in outs) else EXIT_OK


def _settled_runs_said(o, most: int = 20) -> List[str]:
    """The runs a recovery settled under an id of its own (a bucket batch's journal), each with its
    operation's op id; nothing when every run's op id is the outcome's."""
    runs = [r for r in (o.runs or []) if isinstance(r, dict) and r.get("op_id") and r.get("op_id") != o.op_id]
    lines = [f"{shown(r.get('run'))}: op {r['op_id']}" for r in runs[:most]]
    if len(runs) > most:
        lines.append(f"and {len(runs) - most} more run(s): `recover --json` lists them (runs[].op_id)")
    return lines


def _kept_by_recovery(args, o, kept_rows: List[dict]) -> List[str]:
    """What a recovery's ``backups_kept`` outcome leaves and how to get the originals back: each
    original its rollback left in the vault with its bring-back command (status's ``kept_blobs``
    row of that operation and path), else (its manifest still says the reduction, whose swap a
    kept key shows) the restore of that operation."""
    said = ["nothing lost: every backup of this operation is kept in the vault"]
    where = f" --backup-dir {_quote(args.backup_dir)}" if args.backup_dir else ""
    restores = []
    for k in o.kept or []:
        if any(kb.get("of_op") == k["op_id"] and kb.get("path") == k["path"] for kb in kept_rows):
            said.append(f"bring {shown(k['path'])}'s original back beside it: tb-footprint vault bring-back "
                        f"{_quote(args.logdir)} --op {_quote(k['op_id'])} --path {_quote(k['path'])}{where}")
        elif k["op_id"] not in restores:
            restores.append(k["op_id"])
    said += [f"give the originals back: tb-footprint restore {_quote(args.logdir)} --op {_quote(op)} --yes{where}"
             for op in restores]
    return said


_VERIFY_BACKENDS = ("python", "rust")


def _arg(parse):
    """An argparse type from a ``fmt`` parser: its ValueError (which names the accepted format)
    becomes the usage error argparse prints, instead of 'invalid parse_size value'."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = parse.__name__
    return convert


def _number(parse, least: float = 0, *, above: bool = False, most: float = float("inf")):
    """The one rule of every number option (a count, a size, a duration, a rate, a factor):
    ``parse``'s value must also be a finite number of at least ``least`` (above it when
    ``above``) and at most ``most``. Wrapped in ``_arg``, a value outside is argparse's usage
    error (exit 2), which names the option; this names the value and what is accepted. Why
    refuse rather than clamp: a negative size or age selects what 0 does, a NaN age compares
    false with every run's (so a quiet period of NaN would call every run quiet), and a count of
    0 where none makes sense would do nothing, or everything, without saying so."""
    def convert(text: str):
        try:
            v = parse(text)
        except OverflowError:  # parse_size('inf'): int(inf)
            v = float("inf")
        bound = f"{'above' if above else 'at least'} {least:g}"
        if not (float("-inf") < v < float("inf")):  # NaN fails this too
            raise ValueError(f"{text!r}: must be a finite number {bound}")
        if v < least or (above and v == least):
            raise ValueError(f"{text!r}: must be {bound}")
        if v > most:
            raise ValueError(f"{text!r}: must be at most {most:g}")
        return v
    convert.__name__ = parse.__name__
    return convert


def _whole(text: str) -> int:
    """A whole number, e.g. ``--jobs 4`` (bounds are ``_number``'s)."""
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r}: not a whole number (e.g. 4)") from None


def _shard(text: str):
    """``--shard I/N`` checked as it is parsed, so its error names the option (0 <= I < N)."""
    from tb_footprint_plugin import api

    return api.parse_shard(text)


def _backends(text: str) -> tuple:
    """``--verify``: checked before anything runs (a typo must not back up and transform first)."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names == ("both",):  # the error below offers it by that word
        return _VERIFY_BACKENDS
    bad = [n for n in names if n not in _VERIFY_BACKENDS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown reader backend {', '.join(bad) or repr(text)}: "
                                         f"use {', '.join(_VERIFY_BACKENDS)} (comma-separated) or both")
    return names


#: a word read as a value, not an option: '-' then a digit, or '-.' then a digit (see _VerbParser)
_NEGATIVE_VALUE = re.compile(r"^-\.?[0-9]")


class _VerbParser(argparse.ArgumentParser):
    """A verb's parser. Options and positionals may come in any order (``restore LOGDIR -n RUN``
    as ``restore LOGDIR RUN -n``), and ``--`` ends the options: every word after it is a
    positional, so a run name may begin with '-' (``restore LOGDIR -- -x``, review R16 F7).

    Two passes, as argparse's ``parse_known_intermixed_args``: the options with every positional
    switched off, then the positionals. Unlike it, the words from the first ``--`` on are kept out
    of the first pass (which would swallow a ``--`` that no positional precedes) and handed to
    the second with their ``--``.

    A word that begins with '-' then a digit (``-1m``, ``-1/4``, ``-.5``) is a value, as argparse
    already takes ``-5`` and ``-.5`` (no option of ours begins with a digit): ``--timeout -1m``
    reaches ``--timeout``'s own check ("must be above 0"), where argparse's plain number pattern
    left ``-1m`` an unknown option and said only "expected one argument". The pattern is
    ``_negative_number_matcher``, the one argparse consults for this in every version we run
    on (3.9 to 3.13); ``tests/test_cli_numbers.py`` fails if a version stops consulting it."""

    _plain = False  # inside a pass: argparse's own parse

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE

    def parse_known_args(self, args=None, namespace=None):
        if self._plain:
            return super().parse_known_args(args, namespace)
        args = list(sys.argv[1:] if args is None else args)
        cut = args.index("--") if "--" in args else len(args)
        positionals = self._get_positional_actions()
        saved = [(a, a.nargs, a.default) for a in positionals]
        usage = self.usage
        self._plain = True
        try:
            if usage is None:  # the first pass's errors show the whole usage, positionals included
                self.usage = self.format_usage()[len("usage: "):]
            try:
                for a in positionals:
                    a.nargs = a.default = argparse.SUPPRESS
                namespace, rest = super().parse_known_args(args[:cut], namespace)
            finally:
                for a, nargs, default in saved:
                    a.nargs, a.default = nargs, default
            return super().parse_known_args(rest + args[cut:], namespace)
        finally:
            self._plain = False
            self.usage = usage


#: the verbs under the consent rule (``_consent``): they ask, and refuse without a terminal
CHANGING_VERBS = ("reduce", "restore", "purge", "retire")
#: what exit code 1 means, verb by verb: every verb's --help and the README's table say these words
EXIT_ONE = {
    "scan": "an error stopped it (said as `error [CODE]`)",
    "policies": "an error stopped it (said as `error [CODE]`)",
    "plan": "an error stopped it (said as `error [CODE]`)",
    "reduce": "some run failed or was rolled back (each said with its code), or an error stopped it",
    "verify": "a check failed or a backup is damaged, or an error stopped it",
    "restore": "some run was not restored (each said with its code; a skipped one too — a locked run, a file held "
               "open for writing: you asked for the originals and they are not back), or was restored with an "
               "original left in the vault because another file stood at its path (`not_restored`; `tb-footprint "
               "status` says how to bring it back), or an error stopped it",
    "purge": "a backup was kept for an error (a full disk, a run lock it could not take), or what it would "
             "delete changed while the question was open (nothing deleted), or an error stopped it",
    "retire": "some run failed or was rolled back (each said with its code), or an error stopped it; a run left "
              "alone because it is being written is skipped (`active`), as a reduce's, and exits 0",
    "retired": "an error stopped it (said as `error [CODE]`)",
    "status": "an error stopped it (said as `error [CODE]`); damage it reports is no error",
    "recover": "an operation could not be settled, or a journal was refused (left as it is for you to look "
               "at), or an error stopped it",
    "history": "an error stopped it (said as `error [CODE]`)",
    "demo": "an error stopped it (e.g. the folder holds files the demo did not write, without `--overwrite`)",
    "vault": "an error stopped it (said as `error [CODE]`)",
}


def exit_codes(verb: str) -> str:
    """The exit codes of ``verb``, as its --help's epilog says them (``main`` returns them)."""
    changing = verb in CHANGING_VERBS
    rows = [
        ("0", "done" + ("; also --dry-run, nothing to do, or the [y/N] question answered no (nothing changed)"
                        if changing else "")),
        ("1", EXIT_ONE[verb]),
        ("2", "usage error (an unknown option, a bad value, a missing logdir, a run name or glob that matches "
              "nothing)" + ("; or no terminal to ask on and no --yes: nothing changed" if changing else "")),
        ("130", "interrupted by Ctrl-C" + (" (the operation under way settled first)" if changing else "")),
        ("141", "its output's reader went away (`| head`): the rest of the output is dropped, the verb still "
                "finishes"),
        ("143", "stopped by SIGTERM (settled as Ctrl-C is)"),
    ]
    import textwrap

    return "exit codes:\n" + "".join(textwrap.fill(what, 100, initial_indent=f"  {code:>3}  ",
                                                    subsequent_indent=" " * 7) + "\n" for code, what in rows)


def _verb(sub, name: str, help: str, description: str, examples: str) -> argparse.ArgumentParser:
    """One subcommand with its one-line help, a description, examples and exit codes (shown by ``-h``)."""
    return sub.add_parser(name, help=help, description=description,
                          epilog="examples:\n" + "".join(f"  {e}\n" for e in examples.splitlines())
                          + "\n" + exit_codes(name),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _scan_parser(sub) -> None:
    s = _verb(sub, "scan", "size breakdown by run and category",
              "Show what fills a logdir: bytes per run and per category (scalars, images, profiles, …). "
              "Reads only; the scan cache goes to the user's cache directory.",
              "tb-footprint scan runs\ntb-footprint scan runs --by category --top 5\ntb-footprint scan runs --json")
    s.add_argument("logdir", help="the TensorBoard logdir")
    _selectors(s)
    s.add_argument("--json", action="store_true", help="machine-readable output (schema in docs/json-schema.md)")
    s.add_argument("--files", action="store_true", help="list every file of each run shown (biggest first)")
    s.add_argument("--top", type=_arg(_number(_whole, 1)), default=None, metavar="N",
                   help="show only the N biggest rows (at least 1; without it, every row)")
    s.add_argument("--by", choices=("run", "category"), default="run", help="rows by run (default) or by category")
    s.add_argument("--backup-dir", default=None, help="vault location (default LOGDIR/.tb-footprint)")
    s.add_argument("--no-cache", action="store_true", help="re-read every event file")
    s.set_defaults(func=cmd_scan)


def _policies_parser(sub) -> None:
    s = _verb(sub, "policies", "list the named policies",
              "List the named policies and what each does to every file category.", "tb-footprint policies")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_policies)


def _plan_parser(sub) -> None:
    s = _verb(sub, "plan", "dry run: what a policy would do (writes nothing)",
              "Show what a policy would remove or rewrite in each run, and what every dashboard keeps. "
              "Writes nothing.",
              "tb-footprint plan runs\ntb-footprint plan runs --policy lossless --runs 'mnist/*'")
    s.add_argument("logdir", help="the TensorBoard logdir")
    s.add_argument("run_names", nargs="*", default=[], metavar="RUN",
                   help="runs by name, as TensorBoard shows them (after `--` a name may begin with '-')")
    _common(s)
    _filters(s)
    s.add_argument("--verbose", "-v", action="store_true", help="each fidelity line with its details")
    s.set_defaults(func=cmd_plan)


def _reduce_parser(sub) -> None:
    s = _verb(sub, "reduce", "reduce runs: backup, transform, verify, commit or roll back",
              "Reduce runs, each as its own transaction: back up, transform, verify with TensorBoard's "
              "readers, then commit or roll back. " + CONSENT_RULE + " Several logdirs (or "
              "--logdirs-from) are reduced in one call; --shard (or a Slurm array / Kubernetes Indexed "
              "Job's environment) takes one shard of their runs.",
              "tb-footprint reduce runs\ntb-footprint reduce runs --yes --policy lossless\n"
              "tb-footprint reduce runs --run mnist/baseline/train --dry-run\n"
              "tb-footprint reduce --logdirs-from logdirs.txt --shard 0/4 --yes")
    s.add_argument("logdir", nargs="?", help="the TensorBoard logdir")
    s.add_argument("more_logdirs", nargs="*", default=[], metavar="LOGDIR|RUN",
                   help="more logdirs, reduced in the same call; a name that is no folder here but a run "
                        "of the first logdir selects that run (as --run does)")
    s.add_argument("--logdirs-from", default=None, metavar="FILE", help="read more logdirs from FILE, one a line")
    s.add_argument("--shard", type=_arg(_shard), default=None, metavar="I/N",
                   help="take only shard I of N (from 0) of the runs; default: from SLURM_ARRAY_TASK_ID/"
                        "SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX when set")
    s.add_argument("--shard-count", type=_arg(_number(_whole, 1)), default=None, metavar="N",
                   help="number of shards, at least 1 (default TB_FOOTPRINT_SHARD_COUNT): needed with "
                        "JOB_COMPLETION_INDEX, "
                        "and with Slurm when only some indices of the first array are submitted again "
                        "(array indices are then the shards, from 0)")
    s.add_argument("--max-file-ops-per-second", type=_arg(_number(float, above=True)), default=None,
                   metavar="RATE",
                   help="cap metadata operations (stat, open, rename, unlink, link) per second for shared "
                        "filesystems (above 0)")
    s.add_argument("--lease", type=_arg(_number(parse_duration, above=True, most=86400.0)), default=None,
                   metavar="DURATION",
                   help="run lock lease (above 0, at most 1d; default 120s): a dead worker's runs are taken "
                        "over after it")
    _common(s)
    _filters(s)
    s.add_argument("--dry-run", "-n", action="store_true", help="only plan (exit 0)")
    s.add_argument("--yes", "-y", action="store_true",
                   help="reduce without asking; needed without a terminal (otherwise: the plan, exit 2)")
    s.add_argument("--verbose", "-v", action="store_true", help="the plan's fidelity lines with their details")
    s.add_argument("--jobs", type=_arg(_number(_whole, 1)), default=1, metavar="N",
                   help="runs reduced in parallel (at least 1)")
    s.add_argument("--timeout", type=_arg(_number(parse_duration, above=True)), default=None, metavar="DURATION",
                   help="per-run time limit above 0, e.g. 30m (rolled back after)")
    s.add_argument("--ledger", default=None, help="ledger path (default LOGDIR/.tb-footprint/ledger.json)")
    s.add_argument("--verify", type=_backends, default="python,rust", metavar="BACKENDS",
                   help="reader backends to verify with: python, rust or python,rust (default)")
    # the API's VAULT_FORMATS, spelled out: building the parser imports no engine
    s.add_argument("--vault-format", choices=("compressed", "hardlink"), default=None,
                   help="how backups are kept after each run commits: compressed (default: zstd, checked, the "
                        "disk is freed at once) or hardlink (faster; the disk is freed only by purge); a bucket "
                        "logdir keeps whole copies (or compressed blobs with a local --backup-dir) and refuses another")
    s.set_defaults(func=cmd_reduce)


def _verify_parser(sub) -> None:
    s = _verb(sub, "verify", "re-check kept reductions against their backups",
              "Re-hash every kept backup and compare what TensorBoard's readers show of the run now "
              "with the original.",
              "tb-footprint verify runs\ntb-footprint verify runs mnist/baseline/train --verify python")
    s.add_argument("logdir", help="the TensorBoard logdir")
    _selectors(s)
    s.add_argument("--op", default=None, help="only this operation id")
    s.add_argument("--verify", type=_backends, default="python,rust", metavar="BACKENDS",
                   help="reader backends: python, rust or python,rust (default)")
    _common(s)
    s.set_defaults(func=cmd_verify)


def _restore_parser(sub) -> None:
    s = _verb(sub, "restore", "put back the exact original bytes",
              "Put back the exact original bytes of a run's reductions (sha256 checked), newest first. "
              "Without a run name, --all restores every run (on a terminal you are asked instead). " + CONSENT_RULE,
              "tb-footprint restore runs mnist/baseline/train --yes\ntb-footprint restore runs --op OP_ID -y\n"
              "tb-footprint restore runs --runs 'sweep/**' --dry-run\ntb-footprint restore runs --all --yes")
    s.add_argument("logdir", help="the TensorBoard logdir")
    _selectors(s)
    s.add_argument("--op", default=None, help="restore only this operation id")
    s.add_argument("--all", action="store_true", help="restore every restorable run of the logdir")
    s.add_argument("--dry-run", "-n", action="store_true", help="only list what would be restored (exit 0)")
    s.add_argument("--yes", "-y", action="store_true",
                   help="restore without asking; needed without a terminal (otherwise: the list, exit 2)")
    _common(s)
    s.set_defaults(func=cmd_restore)


def _purge_parser(sub) -> None:
    s = _verb(sub, "purge", "delete backups of verified reductions (without --yes: lists them and asks on a terminal, exit 2 without one)",
              "Delete the vault's backups of verified reductions: the disk space is freed, the runs can "
              "no longer be restored. " + CONSENT_RULE,
              "tb-footprint purge runs --older-than 7d -n\ntb-footprint purge runs --run mnist/baseline/train --yes")
    s.add_argument("logdir", help="the TensorBoard logdir")
    s.add_argument("--older-than", type=_arg(_number(parse_duration)), default=None, metavar="DURATION",
                   help="only backups of operations older than this, e.g. 7d (0 or more)")
    _selectors(s)  # the selected runs are purged together: one preview counts what they share once
    s.add_argument("--op", default=None, help="only this operation's backup")
    s.add_argument("--forget-missing", default=None, metavar="OP_ID",
                   help="instead of purging: end the line of this operation whose manifest is missing (status: "
                        "manifest_missing), so that later purges stop keeping every blob; its run stays "
                        "unrestorable either way; deletes nothing (without --yes: says what it means)")
    s.add_argument("--yes", "-y", action="store_true",
                   help="delete without asking; needed without a terminal (otherwise: the list, exit 2)")
    s.add_argument("--dry-run", "-n", action="store_true", help="only list what would be deleted (exit 0)")
    _common(s)
    s.set_defaults(func=cmd_purge)


def _status_parser(sub) -> None:
    s = _verb(sub, "status", "vault, ledger and unfinished operations",
              "Show the vault, the batch ledger, kept operations and unfinished ones. Changes nothing.",
              "tb-footprint status runs")
    s.add_argument("logdir", help="the TensorBoard logdir")
    _common(s)
    s.add_argument("--runs", action="store_true", help="the batch run by run: state, bytes, who (host, pid, shard)")
    s.set_defaults(func=cmd_status)



def _recover_parser(sub) -> None:
    s = _verb(sub, "recover", "settle unfinished operations, rebuild lost manifests, finish killed "
                              "purges, salvage late writes (also done by every reduce/restore/purge)",
              "Settle what an interrupted operation left: roll each unfinished operation back or forward, "
              "rebuild lost manifests, finish killed purges and salvage records written after a reduction.",
              "tb-footprint recover runs")
    s.add_argument("logdir", help="the TensorBoard logdir")
    _common(s)
    s.add_argument("--adopt-moved-state", action="store_true",
                   help="this logdir was MOVED here from another filesystem (a new inode): bind its state folder "
                        "to it again, its id kept, so its retired runs and backups are its own again (refused, "
                        "nothing changed, while the logdir it was made for still stands: that is a copy). Only "
                        "for a move: a copy whose original was renamed would then share its backups")
    s.set_defaults(func=cmd_recover)

def _history_parser(sub) -> None:
    s = _verb(sub, "history", "the change log",
              "Every reduce, restore and purge of the logdir, oldest first.",
              "tb-footprint history runs\ntb-footprint history runs --last 20\n"
              "tb-footprint history runs --csv > changes.csv")
    s.add_argument("logdir", help="the TensorBoard logdir")
    s.add_argument("--last", type=_arg(_number(_whole, 1)), default=None, metavar="N",
                   help="only the newest N entries, oldest first (at least 1; without it, every entry)")
    s.add_argument("--csv", action="store_true",
                   help="CSV output; a cell starting with = + - @ (a run's name, a user) is written "
                        "with a leading ' so a spreadsheet shows it as text, never runs it (--json: as is)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_history)


def _demo_parser(sub) -> None:
    d = _verb(sub, "demo", "write deterministic demo logs",
              "Write a small logdir of typical runs (scalars, images, histograms, profiles, traces).",
              "tb-footprint demo runs\ntb-footprint demo runs --overwrite --scale 0.5")
    d.add_argument("dir", help="folder to write (must be empty or absent unless --overwrite)")
    d.add_argument("--seed", type=int, default=0, help="random seed (same seed, same bytes)")
    d.add_argument("--scale", type=_arg(_number(float, above=True)), default=1.0, metavar="FACTOR",
                   help="size factor above 0 (1.0 ≈ 25 MB)")
    d.add_argument("--overwrite", action="store_true", help="replace an earlier demo in DIR, vault included")
    d.add_argument("--json", action="store_true", help="machine-readable summary")
    d.set_defaults(func=cmd_demo)


def _print_table(rows: List[tuple], right=()) -> None:
    """Rows padded to their columns' widths (numbers right-aligned), headers included."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        print("  ".join(cells).rstrip())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tb-footprint",
        description="See what fills a TensorBoard logdir, and cut it safely (backup, verify, restore).",
        epilog="exit codes: 0 done (a declined [y/N] question included: nothing changed), 1 a run failed or an "
               "error stopped the verb, 2 usage error or a changing verb without a terminal and without --yes, "
               "130 Ctrl-C, 141 the output's reader went away (`| head`), 143 SIGTERM; "
               "`tb-footprint VERB -h` says what each means for that verb.",
    )
    p.add_argument("--version", action="version", version=f"tb-footprint {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_VerbParser)
    for add in (_scan_parser, _policies_parser, _plan_parser, _reduce_parser, _verify_parser, _restore_parser,
                _purge_parser, _retire_parsers, _status_parser, _recover_parser, _history_parser, _demo_parser,
                _vault_parser):
        add(sub)
    _VERBS.clear()
    _VERBS.update(sub.choices)
    return p


def _remote_line(r: dict) -> str:
    """What the remote vault of a local logdir stores (not on this disk)."""
    line = (f"in the remote vault (not on this disk): {human_bytes(r['remote_vault_bytes'])} stored for "
            f"{r['remote_blobs']} backup(s) of {human_bytes(r['original_bytes'])} in {', '.join(r['urls'])}")
    if r.get("offloads_pending"):
        line += (f"; {r['offloads_pending']} operation(s) still to offload (their backups stay on this disk "
                 "until the next start moves them)")
    return line + "".join(f"; cannot read {e['url']}: {e['error']}" for e in r.get("errors", []))


def _vault_parser(sub) -> None:
    s = _verb(sub, "vault", "the vault in a bucket: its lifecycle rule; an original left in it brought out",
              "`vault lifecycle` prints the bucket lifecycle rule (S3, GCS or Azure JSON) that moves the remote "
              "vault's data/ objects to an infrequent-access class after --days and to an archive class 90 days "
              "later (never its index/), and the command that applies it. Reads only. "
              "`vault bring-back` copies an original a restore left in a bucket logdir's vault (`status` lists it, "
              "[not_restored]) out beside its path, as <path>.kept (an event file: kept-<op>-<tag>.tfrecord): "
              "create-only, checked; from a local --backup-dir folder too. The vault keeps it until a purge.",
              "tb-footprint vault lifecycle runs\ntb-footprint vault lifecycle --backup-dir s3://bucket/vaults --days 60\n"
              "tb-footprint vault bring-back s3://bucket/logs --backup-dir /vault --op OP --path run/notes.txt")
    s.add_argument("action", choices=("lifecycle", "bring-back"),
                   help="lifecycle: print the rule; bring-back: copy an original left in the vault out beside its path")
    s.add_argument("logdir", nargs="?", default=None, help="a local logdir whose backups go to a bucket "
                                                           "(bring-back: the bucket logdir)")
    s.add_argument("--backup-dir", default=None, help="the bucket URL given to reduce (without a logdir); "
                                                      "bring-back: the local folder given to reduce or retire")
    s.add_argument("--op", default=None, help="bring-back: the operation whose original it is (status's row names it)")
    s.add_argument("--path", default=None, help="bring-back: the original's path in the logdir")
    s.add_argument("--days", type=_arg(_number(_whole)), default=30, metavar="N",
                   help="days before data/ objects change class (default 30; 0 or more)")
    s.add_argument("--json", action="store_true", help="the whole answer as JSON (rule, prefixes, command, note)")
    s.set_defaults(func=cmd_vault)


def cmd_vault(args) -> int:
    from tb_footprint_plugin import api

    if args.action == "bring-back":
        if args.logdir is None or not args.op or not args.path:
            raise UsageError("bring-back needs the bucket logdir, --op and --path (`tb-footprint status` prints "
                             "the whole command for each original left in the vault)")
        done = api.bring_back(args.logdir, args.op, args.path, backup_dir=args.backup_dir)
        if args.json:
            _dump(done)
        else:
            print(f"{done['path']}'s original copied to {done['to']} ({human_bytes(done['bytes'] or 0)}, checked); "
                  "the vault keeps it until a purge")
        return EXIT_OK
    if args.logdir is None and not args.backup_dir:
        raise UsageError("give a logdir whose backups are offloaded, or --backup-dir s3://…, gs://… or az://… "
                         "(the URL given to reduce)")
    out = api.vault_lifecycle(args.logdir, args.backup_dir, args.days)
    if args.json:
        _dump(out)
        return EXIT_OK
    _dump(out["rule"])  # stdout is the rule alone: `> lifecycle.json` gives the file to apply
    print(f"# apply: {out['apply']}\n# prefixes: {', '.join(out['prefixes'])}\n# {out['note']}", file=sys.stderr)
    return EXIT_OK


def _retire_parsers(sub) -> None:
    s = _verb(sub, "retire", "move whole runs out of the logdir into the vault (dry run without --yes)",
              "Select runs and retire them: every file leaves the logdir for the vault, unchanged; "
              "`tb-footprint restore LOGDIR RUN` brings a run back byte for byte, `tb-footprint purge` frees "
              "the space. " + CONSENT_RULE,
              "tb-footprint retire runs --older-than 30d -n\n"
              "tb-footprint retire runs --group 'sweep/*' --keep-best 3 --metric val/loss --yes")
    s.add_argument("logdir", help="the TensorBoard logdir")
    _selectors(s)
    s.add_argument("--group", default=None, help="the group a keep-best rule ranks (a glob, e.g. 'sweep/*'; "
                                                  "`*` stays within one folder, `**` spans folders)")
    s.add_argument("--older-than", type=_arg(_number(parse_duration)), default=None, metavar="DURATION",
                   help="no file changed for this long (e.g. 30d; 0 or more)")
    s.add_argument("--min-size", type=_arg(_number(parse_size)), default=0, metavar="SIZE",
                   help="runs holding at least this much (e.g. 1G; 0 or more)")
    s.add_argument("--keep-best", type=_arg(_number(_whole)), default=None, metavar="N",
                   help="keep the best N runs of the group, retire the rest (0 or more: 0 retires every ranked run)")
    s.add_argument("--metric", default=None, help="scalar tag that ranks runs (e.g. val/loss)")
    s.add_argument("--mode", choices=("min", "max"), default="min", help="min: lower is better (default)")
    s.add_argument("--value", choices=("last", "min", "max"), default="last",
                   help="which value of the metric ranks a run (default: the last)")
    s.add_argument("--keep-list", default=None, help="file of run names or globs never to retire (one a line)")
    s.add_argument("--with-nested", action="store_true",
                   help="a run whose directory holds other runs takes them along (otherwise it is left alone)")
    _others_flag(s, "retire")
    s.add_argument("--quiet-period", type=_arg(_number(parse_duration)), default=600.0, metavar="DURATION",
                   help="runs with a file changed this recently are being written: never retired (default 10m; "
                        "0 or more)")
    s.add_argument("--yes", "-y", action="store_true",
                   help="retire without asking; needed without a terminal (otherwise: the plan, exit 2)")
    s.add_argument("--dry-run", "-n", action="store_true", help="only show the plan (exit 0)")
    _common(s)
    s.set_defaults(func=cmd_retire)

    s = _verb(sub, "retired", "list retired runs kept in the vault (restorable)",
              "List the runs retired into the vault, with their size and when; each can be restored.",
              "tb-footprint retired runs\ntb-footprint retired runs --search sweep")
    s.add_argument("logdir", help="the TensorBoard logdir")
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

    try:
        rule = api.retire_rule(runs=args.runs or None, run_glob=args.run_glob, group=args.group,
                               older_than=args.older_than, min_size=args.min_size, keep_best=args.keep_best,
                               metric=args.metric, mode=args.mode, value=args.value, keep_list_file=args.keep_list,
                               include_nested=args.with_nested, include_others_runs=args.include_others_runs)
    except OSError as e:  # --keep-list FILE unreadable
        raise UsageError(f"--keep-list {args.keep_list}: {e.strerror or e}") from None
    except ValueError as e:  # a rule that cannot mean anything
        raise UsageError(str(e)) from None
    plan = api.retire_plan(args.logdir, rule, backup_dir=args.backup_dir, quiet_period=args.quiet_period)
    if plan.unmatched:  # as reduce: a name or glob that matches no run is a usage error, not "nothing to do"
        raise UsageError(plan.unmatched_detail)
    if not args.json:
        print(f"{len(plan.selected)} run(s) to retire, {human_bytes(plan.bytes)}:")
        for i in plan.items:
            mark = "→" if i.selected else "·"
            print(f"  {mark} {i.run}  {human_bytes(i.bytes)}{_metric_note(i)}  — {i.reason}")
    others = sum(1 for i in plan.selected if i.owner_uid is not None)
    rc = _consent(args, "retire", len(plan.selected), f"Retire these {len(plan.selected)} run(s) into the vault"
                  + (f" ({others} of them another user's)" if others else "") + "?")
    if rc is not GO:
        if args.json:
            _dump({"dry_run": True, "plan": plan.to_dict(), "bytes": plan.bytes})
        elif plan.selected and args.dry_run:
            print("nothing moved (dry run): add --yes to retire them")
        return rc
    cancel = api.CancelToken()
    current: List[str] = []  # the run being moved, for what an interrupt says

    def progress(run, _step, _frac):
        current[:] = [run]

    try:
        with _interruptible(cancel):
            rep = api.retire(args.logdir, rule, dry_run=False, backup_dir=args.backup_dir,
                             quiet_period=args.quiet_period, only=[i.run for i in plan.selected], cancel=cancel,
                             progress=progress,
                             on_outcome=None if args.json else (lambda o: print(_retire_line(o), flush=True)))
    except KeyboardInterrupt:
        return _interrupted(args, "retire", [args.logdir], None, current)
    if args.json:
        _dump(rep.to_dict())
    else:
        print(f"retired {sum(1 for o in rep.outcomes if o.status == Outcome.VERIFIED)} run(s), "
              f"{human_bytes(rep.retired_bytes)}; `tb-footprint retired {args.logdir}` lists them")
    return EXIT_OK if rep.ok else EXIT_FAILED


def _retire_line(o) -> str:
    if o.status == Outcome.VERIFIED:
        return (f"✓ {shown(o.run)}: retired, {human_bytes(o.bytes_before)} into the vault (op {o.op_id})"
                + _taken_said(o))
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
        print(f"  {shown(r['run'])}{along}  {human_bytes(r['bytes'])}  {when}  op {r['op_id']}")
    print(f"{len(rows)} retired run(s), {human_bytes(sum(r['bytes'] for r in rows))}; "
          f"restore one with `tb-footprint restore {args.logdir} RUN`")
    return EXIT_OK


class UsageError(Exception):
    """A command line that cannot run as given (exit 2, like argparse's own errors)."""


def _file_url_path(logdir: Optional[str]) -> Optional[str]:
    """A ``file://`` URL's local path (``file:///runs`` and ``file://localhost/runs`` are
    ``/runs``, as TensorBoard reads them); anything else as given."""
    if logdir is None or not logdir.lower().startswith("file://"):
        return logdir
    u = urllib.parse.urlsplit(logdir)
    if u.netloc not in ("", "localhost") or not u.path:
        raise UsageError(f"logdir {logdir}: a file:// URL names a path on this machine (file:///path)")
    return urllib.parse.unquote(u.path)


def _check_logdir(args) -> None:
    """A logdir that does not exist is a usage error, said before anything runs (bucket URLs
    are checked by the storage layer); a ``file://`` URL is taken as its local path."""
    if getattr(args, "logdir", None) is not None:
        args.logdir = _file_url_path(args.logdir)
    if getattr(args, "more_logdirs", None):
        args.more_logdirs = [_file_url_path(x) for x in args.more_logdirs]
    for logdir in [getattr(args, "logdir", None)] + list(getattr(args, "more_logdirs", None) or []):
        if logdir is not None and "://" not in logdir and not os.path.isdir(logdir):
            raise UsageError(f"logdir {logdir} is not a directory")


def _reduce_positionals(args) -> None:
    """``reduce LOGDIR NAME``: a name after the logdir that is no folder here but a run folder of
    the logdir selects that run, as it does for plan, verify, restore and retire."""
    first = args.logdir
    if not first or "://" in first:
        return
    keep = []
    for x in args.more_logdirs:
        if "://" not in x and not os.path.isdir(x) and os.path.isdir(os.path.join(first, x)):
            args.runs = list(args.runs or []) + [x.strip("/")]
        else:
            keep.append(x)
    args.more_logdirs = keep


def _parse(parser: argparse.ArgumentParser, argv: Optional[List[str]]):
    """Parse; an unknown option after a verb is reported with that verb's usage (not the
    top-level one), exit 2."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        verb = _VERBS.get(getattr(args, "command", None))
        dashed = next((x for x in extra if x.startswith("-") and x != "-"), None)
        hint = (f" (a run named {dashed!r} goes after `--`: tb-footprint {args.command} LOGDIR -- {dashed})"
                if verb is not None and dashed and ("run_names" in vars(args) or "more_logdirs" in vars(args))
                else "")
        (verb or parser).error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


_VERBS: dict = {}  # verb name -> its parser (filled by build_parser)


def _error_code(e: BaseException) -> str:
    """The code of a failure that stopped a whole command: its own (``NotPrivate``, a
    ``TransactionError``, ...), else one from the kind of OS error; never taken from the text.
    A full disk or quota is the library's one rule (``api.is_no_space``), not a copy of it."""
    import errno

    from tb_footprint_plugin import api

    code = getattr(e, "code", None)
    if isinstance(code, str) and code:
        return str(code)
    if isinstance(e, OSError):
        if api.is_no_space(e):
            return Failure.NO_SPACE.value
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return Failure.REFUSED.value  # permissions or a read-only filesystem: nothing was written
    return Failure.ERROR.value


EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped by `timeout`, systemd, Slurm or Kubernetes


def _on_sigterm(signum, frame) -> None:
    """SIGTERM (a job's stop signal, its grace period meant for this) is taken as Ctrl-C: the
    run under way is settled (rolled back, or finished past its commit point), and the exit
    code is 143. While a rollback runs (SIGINT ignored) it is ignored too: the grace period's
    SIGKILL, if it comes, leaves what any crash leaves for the next start."""
    import signal

    _TERMINATED.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if handler == signal.SIG_IGN:
        return
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)  # a verb's own (``_interruptible``): cancels the batch, raises
    raise KeyboardInterrupt


_TERMINATED: List[int] = []

EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell shows for `seq 1000000 | head -1`


class _PipeGuard:
    """``sys.stdout`` / ``sys.stderr`` while a verb runs, so that a reader that goes away
    (``tb-footprint scan runs | head -1``) ends nothing: the first write to the closed pipe points
    the stream's file descriptor at /dev/null (Python's documented recipe for SIGPIPE, without
    the signal's default action, which would kill a reduce between two steps) and the verb goes
    on to its end quietly; ``main`` then exits 141. A stream closed before the start (``>&-``, as
    under cron or a service: Python makes it None) takes every write and says nothing, as Python
    does for ``print`` to a None stream (review R17 F1). Everything else is the stream's own."""

    def __init__(self, stream):
        self._stream = stream
        self.closed = False

    def _gone(self) -> None:
        self.closed = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, AttributeError, ValueError):
            pass  # no descriptor to point elsewhere: nothing more is written to it (below)

    def write(self, text: str) -> int:
        if self._stream is None or self.closed:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        if self._stream is None or self.closed:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def fileno(self) -> int:
        if self._stream is None:
            raise io.UnsupportedOperation("the stream was closed before the start")
        return self._stream.fileno()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _hold_standard_descriptors() -> None:
    """Put /dev/null on each of descriptors 0-2 that was closed at the start (``>&-``, as under
    cron or a service), as OpenSSH's ``sanitise_stdfd`` does. Otherwise the first files the verb
    opens take those numbers (the scan cache's temp, a logdir's folder, a journal) and whatever
    writes to "stderr" below Python (a C library's warning, the interpreter's fatal message) goes
    into them: a verb started so with stderr closed was seen to abort (SIGABRT) in CI. Python has
    already made such a stream None, which ``_PipeGuard`` keeps quiet."""
    while True:
        try:
            fd = os.open(os.devnull, os.O_RDWR)
        except OSError:
            return  # no /dev/null (a bare chroot): nothing better to put there
        if fd > 2:
            os.close(fd)
            return


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``tb-footprint``; returns 0 all done (a declined question included), 1 some
    failed, 2 usage error (and a changing verb without --yes and without a terminal), 130
    interrupted (Ctrl-C), 141 its output's reader went away (``| head``; the verb still finished),
    143 stopped by SIGTERM (settled as Ctrl-C is): ``EXIT_CODES``."""
    import signal
    import threading

    _hold_standard_descriptors()
    before = None
    if threading.current_thread() is threading.main_thread():
        before = signal.signal(signal.SIGTERM, _on_sigterm)
    del _TERMINATED[:]
    streams = sys.stdout, sys.stderr
    out, err = sys.stdout, sys.stderr = _PipeGuard(streams[0]), _PipeGuard(streams[1])
    try:
        rc = _main(argv)
        out.flush()  # what is still buffered meets a closed pipe here, not at the interpreter's exit
        err.flush()
    finally:
        sys.stdout, sys.stderr = streams
        if before is not None:
            signal.signal(signal.SIGTERM, before)
            _sigint_back()
    if _TERMINATED and rc == EXIT_INTERRUPTED:
        return EXIT_TERMINATED
    # a closed pipe says itself only where nothing else went wrong: a failure's own code stays
    return EXIT_PIPE_CLOSED if (out.closed or err.closed) and rc == EXIT_OK else rc


def _main(argv: Optional[List[str]]) -> int:
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    # the library is imported once a verb needs it: --help and --version stay fast
    try:
        from tb_footprint_plugin import api
        # the API loads lazily: its engine package with it, here, so a Ctrl-C while it loads is
        # still "while starting" (nothing began); what a verb imports later is its own
        check_failpoints = api.check_failpoints
    except KeyboardInterrupt:
        # Ctrl-C while the library loads (a second or more on a busy machine): no verb has begun,
        # so the user gets the one line every interrupt gets, not a traceback through numpy
        print(f"\ntb-footprint {args.command}: interrupted while starting; nothing was changed", file=sys.stderr)
        return EXIT_INTERRUPTED

    try:
        check_failpoints()  # a misspelt TB_FOOTPRINT_FAILPOINTS is refused before anything runs
        if args.command == "reduce":
            _reduce_positionals(args)
        _merge_names(args)
        _check_selectors(args)
        _check_logdir(args)
        return args.func(args)
    except (UsageError, api.PolicyError, api.SelectionError, api.NotALogdir) as e:
        print(f"tb-footprint {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError, RuntimeError) as e:
        code = _error_code(e)
        print(f"tb-footprint {args.command}: error [{code}]: {e}", file=sys.stderr)
        if getattr(args, "json", False):  # a script gets the refusal as JSON, not an empty stdout
            _dump({"error": {"code": code, "message": str(e), "file": getattr(e, "filename", None)}})
        # a run or operation id that names nothing is a usage error, on every verb
        return EXIT_USAGE if code == Failure.NOT_FOUND else EXIT_FAILED
    except KeyboardInterrupt:
        # a verb that changes things settles its own interrupt; this one read only, or had not begun
        ld = _quote(str(getattr(args, "logdir", None) or "LOGDIR"))
        if args.command in ("reduce", "retire", "restore", "purge", "recover", "demo"):
            said = (f"an operation it began is settled by the next start or `tb-footprint recover {ld}`; "
                    f"`tb-footprint status {ld}` shows the logdir")
        else:
            said = "it changes nothing, nothing was changed"
        print(f"\ntb-footprint {args.command}: interrupted; {said}", file=sys.stderr)
        return EXIT_INTERRUPTED


def console() -> int:
    """``tb-footprint`` as a program (setup.py's console script, ``python -m``): ``main``, then
    everything still alive set aside from the cyclic collector (``gc.freeze``) for the
    interpreter's exit.

    Why: a reduce imports ~480 modules (~60,000 tracked objects: the package, gRPC, TensorBoard's
    app) that the interpreter's last collections at exit walk once more, 10-20% of a fresh 20 MB
    reduce's CPU (issue #28 item 3; ``bench/scale.py``'s whole-process line). Only here, in a
    process about to end: a library caller's objects (a training job's callback, a notebook, a
    sweep loop calling the API) are never frozen, where a cycle that became garbage later would
    never be freed (review R8 F4 on 4f58641, which froze them inside the verification)."""
    import gc

    rc = main()
    gc.freeze()
    return rc


if __name__ == "__main__":
    sys.exit(console())
