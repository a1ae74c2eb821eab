"""The public verbs, shared by the CLI and the TensorBoard plugin:
``scan``, ``plan``, ``reduce_logdir``, ``verify``, ``restore``, ``purge``, ``status``, ``history``.

Every verb that can change something first settles unfinished operations (crash recovery).
Failures come back as values (per-run outcomes with reasons); only bad arguments raise.

The verbs live in modules by verb group, each importing only the groups below it
(``tests/test_layering.py``): ``common`` (the local context, shared counts) →
``settle`` (recovery, what is unfinished, Ctrl-C) → ``reports`` (what verbs return and front ends
show) → ``records`` (operations, status, disk numbers, history) → ``survey`` (plan, run selection,
shards) → ``reduce`` (one driver for every store) → ``backups`` (verify, restore, purge, samples) →
``retirement``. This package re-exports every public name the one-module ``api`` had, so
``from tb_footprint_plugin import api; api.X`` keeps working for the front ends; a test that
replaces a name the API calls patches the verb group's module that looks it up.

Each verb opens the logdir's engine with ``engine.front.open_engine`` (local or bucket, chosen
there once) and calls it; no verb group picks an engine by the logdir's URL itself.
"""
# The names below are this package's public surface (the front ends use ``api.<name>``), so
# each import is a re-export, not a use.
from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery, Refusal, Skip
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.engine.catalogue import (find_manifest, hiding_damage, is_kept, journal_blobs,
                                                  known_vaults, operation_summary, own_manifests, remember_vault,
                                                  restorable_ops, summarize_operations, vault_problems)
from tb_footprint_plugin.engine import health, lease, trust, usage
from tb_footprint_plugin.engine.faults import check_env as check_failpoints
from tb_footprint_plugin.engine.checks import recheck
from tb_footprint_plugin.engine.context import (CancelToken, Context, is_no_space, NoSpace, RunOutcome,
                                                TransactionError, writing)
from tb_footprint_plugin.engine.history import configure_writer, history_csv, read_history
from tb_footprint_plugin.engine.journal import pending_journals, RunLock, RunLocked
from tb_footprint_plugin.engine.ledger import (Ledger, ledger_path, ledger_paths, mark_recovered, merged,
                                               with_restores)
from tb_footprint_plugin.engine.purge import freeable_bytes, purge_backups, PurgeReport
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.upkeep import recover_all
from tb_footprint_plugin.engine.restore import restore_op
from tb_footprint_plugin.engine.retire import is_restorable_retirement, retire_run, retirements, unretire
from tb_footprint_plugin.engine.transaction import reduce_run
from tb_footprint_plugin.engine.vault import (compact_operation, DEFAULT_VAULT_FORMAT, note_compaction,
                                              refuse_unless_ours, Vault, VAULT_FORMATS)
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.left_alone import apply_open_writers, leave_alone
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD, LOCAL_VAULT_NOTE, make_plan, SelectionError
from tb_footprint_plugin.plan.retire import plan_retire, read_keep_list, RetirePlan, RetireRule
from tb_footprint_plugin.plan import select as selecting, shard as sharding
from tb_footprint_plugin.plan.cost import format_cost
from tb_footprint_plugin.plan.policies import BUILTIN, custom_policy, get_policy, list_policies, PolicyError
from tb_footprint_plugin.plan.shard import parse_shard, shard_from_env, ShardError
from tb_footprint_plugin.plan.summary import (category_changes, dashboards_note, dashboards_summary, labels_for,
                                              overview, plan_run_view)
from tb_footprint_plugin.scan import categories, passes
from tb_footprint_plugin.scan.model import LogdirFootprint, UNATTRIBUTED
from tb_footprint_plugin.scan.discovery import discover
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.storage import scratch, throttle
from tb_footprint_plugin.storage.openfiles import find_writers
from tb_footprint_plugin.storage.files import is_regular, matches as file_matches
from tb_footprint_plugin.storage.paths import (contained, is_within, real_within, state_dir, state_dirs_in,
                                               UnsafePath)
from tb_footprint_plugin.storage.remote import is_bucket_url, is_remote, RemoteError

from tb_footprint_plugin.api.common import DEFAULT_BACKENDS, RunProgress
from tb_footprint_plugin.api.settle import (adopt_moved_state, Interrupted, interrupted_state, pending_operations,
                                            recover_logdir, settle_interrupted, unfinished)
from tb_footprint_plugin.api.reports import reduce_summary, ReduceReport, restore_summary
from tb_footprint_plugin.api.records import (bring_back, disk_numbers, history, history_page, kept_blobs, operation,
                                              operations, status)
from tb_footprint_plugin.api.survey import (check_logdir, confirmed_digests, hold_to_confirmed, ledger_skips,
                                            NotALogdir, plan, plan_digest, select_runs, selection_by_logdir,
                                            shard_plan, shard_sizes)
from tb_footprint_plugin.api.reduce import reduce_logdir, reduce_logdirs
from tb_footprint_plugin.api.backups import (NotRestorable, purge, restorable, restore, restore_target, sample,
                                             SampleUnavailable, vault_lifecycle, verify)
from tb_footprint_plugin.api.retirement import retire, retire_plan, retire_rule, retired, RetireReport

__all__ = [
    "scan", "plan", "reduce_logdir", "reduce_logdirs", "selection_by_logdir", "shard_plan", "shard_sizes",
    "ShardError", "verify", "restore", "purge", "status", "history", "history_page", "UNATTRIBUTED", "recover_logdir", "adopt_moved_state",
    "unfinished", "pending_operations", "operation", "operations", "ReduceReport", "PurgeReport",
    "CancelToken", "summarize_operations", "operation_summary", "plan_run_view", "category_changes",
    "dashboards_note", "dashboards_summary", "labels_for", "sample", "SampleUnavailable", "custom_policy",
    "history_csv", "overview", "disk_numbers", "restorable", "PolicyError", "SelectionError",
    "reduce_summary", "restore_summary", "restore_target", "NotRestorable", "retire", "retire_plan",
    "retire_rule", "retired", "RetireReport", "RetireRule", "select_runs", "check_logdir", "NotALogdir",
    "interrupted_state", "settle_interrupted", "Interrupted", "ledger_skips", "vault_lifecycle",
    "plan_digest", "confirmed_digests", "hold_to_confirmed", "is_no_space", "kept_blobs", "bring_back",
]
