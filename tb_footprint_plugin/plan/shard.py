"""Which runs one worker of a sharded batch takes: a stable partition of the runs, balanced by bytes.

Every worker of a Slurm array or a Kubernetes Indexed Job computes the partition on its own,
from its own scan, without talking to the others. The assignment therefore has to come out
the same from scans taken at different moments.

The trade-off, and the choice made here:

* Pure hashing of run names (rendezvous / consistent hashing) is perfectly stable — a run's
  shard depends on its name only — but balances the *number* of runs, not their bytes: one
  shard can draw several of the few huge runs a logdir usually has. It also scatters each
  worker's runs over every folder of the logdir.
* Greedy bin-packing (largest first, each run to the lightest shard; what earlier versions
  did) balances bytes to within one run, but a run whose size moved between two workers' scans
  can shift every later placement, and it too interleaves every worker's runs over every
  folder: on a bucket a worker's batch of 250 runs then spans 250 × N runs of the logdir, and
  its two checking listings (``engine.bucket_state.listing_of_runs``) every folder, for every
  worker (issue #28: 866 listing pages for 4 workers at 10,000 runs, against 240 for one).

``partition`` cuts the runs **in key order** into contiguous parts of equal weight. Keys are
sorted by ``sorted`` on the ``str`` keys (code-point order: a bucket's listing order, as UTF-8
bytes sort as their code points, and for ``key(logdir, run)`` = ``logdir\\0run`` each logdir's runs together, since ``\\0``
sorts before any other character, and within one logdir the order of its run names, the order
a bucket reduce batches them in). A folder's runs share its name as a prefix, so they are
neighbours in this order: each worker takes a few folders whole, and the folders at its two
cut points shared with its neighbours. Each run goes to the shard whose ``total/N`` slice holds
the middle of the run's span on the line of cumulative weights.

The weights are chosen to stay put: each run's weight is its **original** size (for a run some
worker already reduced, the size before that reduction, from the change log, also for one it
left with nothing the scan counts while that reduction stands, on a disk while its folder
stays — so a reduction never moves runs for the workers that scan after it), rounded down to
four significant bits (1/8 of an octave, so records appended to a run rarely change its
weight). Nothing depends on the mapping's order, nor on a hash. A run whose weight changed by
``d`` between two workers' scans (or a run of weight ``d`` created between them) moves only the
runs within ``d`` of a cut point, each to a neighbouring shard: never every later placement.

Bound: with ``N`` shards, every shard's rounded weight is at most ``total/N + largest run``
(of rounded weights: half a run past each end of its slice), so in bytes at most
``9/8 · (total/N + largest run)`` (the rounding costs at most 1/8). All weights zero: each run
weighs one, so the runs are cut into ``N`` parts of equal count.

Every worker of one batch must run one version: an older worker (greedy packing) and a newer
one compute different partitions, so some run falls to two shards or to none, as below.

If the inputs still differ between two workers (a run created between their scans), some
run may fall to two shards or to none: never reduced twice (the per-run lock and the change
log see to that, a second worker skips it with a code), and one that fell to none is
picked up by a rerun of any shard, since the partition is computed again from the settled logdir.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from tb_footprint_plugin.codes import Outcome
# how far a restore line's time may be from the clock of the worker reading it: a bucket refuses
# a request signed further off; a disk shared by hosts keeps them closer
from tb_footprint_plugin.storage.store import CLOCK_SKEW

Shard = Tuple[int, int]  # (index, count), 0 <= index < count


class ShardError(ValueError):
    """A shard spec or a scheduler's environment that does not name a valid shard."""


def parse_shard(spec: str) -> Shard:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``."""
    m = _SPEC.match(spec)  # ASCII digits only: int() would also take "1_0" or full-width digits
    if m is None:
        raise ShardError(f"shard {spec!r}: expected I/N, e.g. 0/4 (index from 0)")
    return check_shard(int(m.group(1)), int(m.group(2)), f"shard {spec!r}")


def check_shard(i: int, n: int, what: str = "shard") -> Shard:
    if n < 1 or not 0 <= i < n:
        raise ShardError(f"{what}: index {i} of {n} shards is out of range (0 <= index < count)")
    return i, n


_SPEC = re.compile(r"^([0-9]+)/([0-9]+)$")
_INT = re.compile(r"^\s*-?[0-9]+\s*$")


def _int(env: Mapping[str, str], name: str) -> Optional[int]:
    v = env.get(name)
    if v is None or v == "":
        return None
    if not _INT.match(v):
        raise ShardError(f"{name}={v!r} is not an integer")
    return int(v)


def shard_from_env(env: Mapping[str, str], count: Optional[int] = None) -> Optional[Shard]:
    """The shard a scheduler gave this process, or None outside an array job.

    Slurm, a whole array: ``SLURM_ARRAY_TASK_ID`` relative to ``SLURM_ARRAY_TASK_MIN``
    (``--array=1-8`` starts at 1) and ``SLURM_ARRAY_TASK_STEP``, out of ``SLURM_ARRAY_TASK_COUNT``.
    Slurm with the shard count given (``count``, or ``TB_FOOTPRINT_SHARD_COUNT``): the task id is
    the shard index itself — what a resubmission of some indices of the first array needs
    (``sbatch --array=3,7`` gives tasks 3 and 7 a count of 2 and a minimum of 3).
    Kubernetes Indexed Job: ``JOB_COMPLETION_INDEX`` out of ``count`` or
    ``TB_FOOTPRINT_SHARD_COUNT`` (the manifest sets it to the Job's ``completions``)."""
    task = _int(env, "SLURM_ARRAY_TASK_ID")
    if task is not None:
        given = count if count is not None else _int(env, "TB_FOOTPRINT_SHARD_COUNT")
        if given is not None:
            if not 0 <= task < given:
                raise ShardError(f"Slurm array task {task} is no shard of {given}: with a shard count, array "
                                 f"indices are the shards themselves, 0 to {given - 1}")
            return check_shard(task, given, f"Slurm array task {task} of {given} shards")
        n = _int(env, "SLURM_ARRAY_TASK_COUNT")
        if n is None:
            raise ShardError("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not; pass --shard-count")
        lo = _int(env, "SLURM_ARRAY_TASK_MIN") or 0
        step = _int(env, "SLURM_ARRAY_TASK_STEP") or 1
        if (task - lo) % step:
            raise ShardError(f"SLURM_ARRAY_TASK_ID={task} is not on the array's step {step} from {lo}")
        if not 0 <= (task - lo) // step < n:
            raise ShardError(f"Slurm array task {task} (min {lo}, step {step}) is outside an array of {n}; "
                             "submitting only some indices again? give the first array's size: "
                             "--shard-count N (SHARDS=N with examples/slurm_reduce.sbatch)")
        return check_shard((task - lo) // step, n, f"Slurm array task {task} (min {lo}, step {step}) of {n}")
    idx = _int(env, "JOB_COMPLETION_INDEX")
    if idx is not None:
        n = count if count is not None else _int(env, "TB_FOOTPRINT_SHARD_COUNT")
        if n is None:
            raise ShardError("JOB_COMPLETION_INDEX is set but the shard count is not: pass --shard-count or set "
                             "TB_FOOTPRINT_SHARD_COUNT to the Job's completions")
        return check_shard(idx, n, f"Kubernetes completion index {idx} of {n}")
    return None


def weight(nbytes: int) -> int:
    """``nbytes`` rounded down to four significant bits (w <= nbytes < 9/8 w)."""
    if nbytes <= 0:
        return 0
    drop = max(0, nbytes.bit_length() - 4)
    return (nbytes >> drop) << drop


def partition(sizes: Mapping[str, int], count: int) -> Dict[str, int]:
    """Each key (a run, or ``logdir\\0run`` over several logdirs) -> its shard in ``range(count)``:
    the keys in ``sorted`` order cut into ``count`` contiguous parts of equal rounded weight (a
    key to the shard whose ``total/count`` slice holds the middle of its weight), so shard ``i``'s
    keys all sort before shard ``i + 1``'s.

    Depends only on the mapping's content, never on its order (see the module docstring)."""
    check_shard(0, count, "shard count")
    keys = sorted(sizes)
    weights = [weight(sizes[k]) for k in keys]
    total = sum(weights)
    if total == 0:  # nothing to balance by bytes: by count
        weights, total = [1] * len(keys), len(keys)
    out: Dict[str, int] = {}
    before = 0  # the weight of the keys before this one
    for k, w in zip(keys, weights):
        # the middle of the key's span, (before + w/2), in the slice [i, i+1) * total/count
        out[k] = min(count - 1, count * (2 * before + w) // (2 * total))
        before += w
    return out


def select(sizes: Mapping[str, int], shard: Shard) -> List[str]:
    """The keys shard ``shard`` takes, sorted."""
    i, n = check_shard(*shard)
    return sorted(k for k, s in partition(sizes, n).items() if s == i)


def original_sizes(current: Mapping[str, int], history: Iterable[dict],
                   still_there: Optional[Callable[[str], bool]] = None,
                   listed_at: Optional[float] = None) -> Dict[str, int]:
    """Each run's size before any reduction: its current size, or the ``before`` of its first
    verified reduction in the change log (oldest first; an in-flight journal's entry last).

    A run the scan no longer finds counts too, with that size, while a reduction of it stands
    (no restore line names it since: ``of_op``) and ``still_there(run)`` says so: a reduction
    left it nothing the scan counts (a run of profile data only), and a worker that scanned before
    that counted it. The store says what ``still_there`` looks at (a disk: the run's folder; a
    bucket, which keeps no empty folder: nothing). A restore dated after ``listed_at`` (when the
    scan's walk or listing began) less ``CLOCK_SKEW`` may have put the run back after the scan
    passed it: it takes nothing out, so such a run weighs what a worker that lists it back counts.
    Entries of other runs are ignored."""
    first: Dict[str, int] = {}
    reduced: Dict[str, set] = {}  # run -> its reductions standing (an op id, or the entry's place)
    restored = set()
    for n, e in enumerate(history):
        if not isinstance(e, dict) or not isinstance(e.get("run"), str):
            continue
        run, op = e["run"], e.get("op_id") if isinstance(e.get("op_id"), str) else n
        if e.get("kind") == "restore":
            when = e.get("time")
            if e.get("outcome") == Outcome.RESTORED and isinstance(e.get("of_op"), str) and (
                    listed_at is None or (isinstance(when, (int, float)) and not isinstance(when, bool)
                                          and when <= listed_at - CLOCK_SKEW)):
                restored.add((run, e["of_op"]))
            continue
        if e.get("kind") != "reduce" or e.get("outcome") != Outcome.VERIFIED:
            continue
        before = e.get("before")
        if (run in current or still_there is not None) and isinstance(before, int) \
                and not isinstance(before, bool) and before >= 0:
            first.setdefault(run, before)
            reduced.setdefault(run, set()).add(op)
    out = {r: max(b, first.get(r, 0)) for r, b in current.items()}
    if still_there is not None:
        # a line is untrusted: one naming another run's reduction restores nothing here
        out.update((r, b) for r, b in first.items()
                   if r not in current and any((r, op) not in restored for op in reduced[r]) and still_there(r))
    return out


class Sizes(dict):
    """The partition's input (``key(logdir, run)`` -> the run's original bytes) and ``absent``:
    the keys of runs the scan did not find (``original_sizes``: emptied by a reduction that
    stands, on a disk their folder there). They weigh in the partition as for a worker that scanned
    before; no shard takes them (nothing is left there to reduce)."""

    def __init__(self, *args, absent: Iterable[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.absent = set(absent)


def key(logdir: str, run: str) -> str:
    """The partition key of a run when several logdirs are sharded together."""
    return f"{logdir}\0{run}"


def label(shard: Optional[Shard]) -> Optional[str]:
    return None if shard is None else f"{shard[0]}/{shard[1]}"


__all__ = ["CLOCK_SKEW", "Shard", "ShardError", "Sizes", "parse_shard", "check_shard", "shard_from_env", "partition",
           "select", "original_sizes", "weight", "key", "label"]
