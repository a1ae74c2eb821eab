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

The re-exports are lazy (PEP 562): ``_WHERE`` maps each name to the module that defines it, and
the first ``api.X`` (or ``from tb_footprint_plugin.api import X``) imports that module only. A CLI
process runs one verb, so it pays for that verb's chain, not for every engine, the planner and
numpy (``import tb_footprint_plugin.api`` was 0.3–0.8 s of CPU in every CLI process;
``tests/test_startup_imports.py`` keeps the light verbs light).

Each verb opens the logdir's engine with ``engine.front.open_engine`` (local or bucket, chosen
there once) and calls it; no verb group picks an engine by the logdir's URL itself.
"""
from __future__ import annotations

from tb_footprint_plugin.lazy import exports

#: module (below the package) -> the public names it defines; ``alias=name`` where the API
#: exposes a name under another one
_NAMES: dict[str, str] = {
    "codes": "Failure Finding Outcome Recovery Refusal Skip",
    "fmt": "human_bytes",
    "engine.catalogue": ("find_manifest hiding_damage is_kept journal_blobs known_vaults operation_summary "
                         "own_manifests remember_vault restorable_ops summarize_operations vault_problems"),
    "engine.faults": "check_failpoints=check_env",
    "engine.checks": "recheck",
    "engine.context": "CancelToken Context is_no_space NoSpace RunOutcome TransactionError writing",
    "engine.history": "configure_writer history_csv read_history",
    "engine.journal": "pending_journals RunLock RunLocked",
    "engine.ledger": "Ledger ledger_path ledger_paths mark_recovered merged with_restores",
    "engine.purge": "freeable_bytes purge_backups PurgeReport",
    "engine.recovery": "RecoveryOutcome",
    "engine.upkeep": "recover_all",
    "engine.restore": "restore_op",
    "engine.retire": "is_restorable_retirement retire_run retirements unretire",
    "engine.transaction": "reduce_run",
    "engine.vault": ("compact_operation DEFAULT_VAULT_FORMAT note_compaction refuse_unless_ours Vault "
                     "VAULT_FORMATS"),
    "plan.model": "Plan",
    "plan.left_alone": "apply_open_writers leave_alone",
    "plan.planner": "DEFAULT_QUIET_PERIOD LOCAL_VAULT_NOTE make_plan SelectionError",
    "plan.retire": "plan_retire read_keep_list RetirePlan RetireRule",
    "plan.cost": "format_cost",
    "plan.policies": "BUILTIN custom_policy get_policy list_policies PolicyError",
    "plan.shard": "parse_shard shard_from_env ShardError",
    "plan.summary": "category_changes dashboards_note dashboards_summary labels_for overview plan_run_view",
    "scan.model": "LogdirFootprint UNATTRIBUTED",
    "scan.discovery": "discover",
    "scan.scanner": "scan",
    "storage.openfiles": "find_writers",
    "storage.files": "is_regular file_matches=matches",
    "storage.paths": "contained is_within real_within state_dir state_dirs_in UnsafePath",
    "storage.remote": "is_bucket_url is_remote RemoteError",
    "api.common": "DEFAULT_BACKENDS RunProgress",
    "api.settle": ("adopt_moved_state Interrupted interrupted_state pending_operations recover_logdir "
                   "settle_interrupted unfinished"),
    "api.reports": "reduce_summary ReduceReport restore_summary",
    "api.records": "bring_back disk_numbers history history_page kept_blobs operation operations status",
    "api.survey": ("check_logdir confirmed_digests hold_to_confirmed ledger_skips NotALogdir plan plan_digest "
                   "select_runs selection_by_logdir shard_plan shard_sizes"),
    "api.reduce": "reduce_logdir reduce_logdirs",
    "api.backups": ("forget_missing NotRestorable purge restorable restore restore_refusal restore_target sample "
                    "SampleUnavailable vault_lifecycle verify"),
    "api.retirement": "retire retire_plan retire_rule retired RetireReport",
}
#: names that are modules themselves: the verb groups, and the few modules front ends use whole
_MODULES: dict[str, str] = {
    "common": "api.common", "settle": "api.settle", "reports": "api.reports", "records": "api.records",
    "survey": "api.survey", "reduce": "api.reduce", "backups": "api.backups", "retirement": "api.retirement",
    "health": "engine.health", "lease": "engine.lease", "trust": "engine.trust", "usage": "engine.usage",
    "selecting": "plan.select", "sharding": "plan.shard",
    "categories": "scan.categories", "passes": "scan.passes",
    "scratch": "storage.scratch", "throttle": "storage.throttle",
}


def _table() -> dict[str, tuple[str, str | None]]:
    out: dict[str, tuple[str, str | None]] = {name: ("tb_footprint_plugin." + m, None)
                                                 for name, m in _MODULES.items()}
    for module, names in _NAMES.items():
        for entry in names.split():
            alias, _, name = entry.partition("=")
            out[alias] = ("tb_footprint_plugin." + module, name or alias)
    return out


#: public name -> (module, its name there; None when the name is the module itself)
_WHERE = _table()


__getattr__, __dir__ = exports(__name__, _WHERE, globals())


__all__ = [
    "scan", "plan", "reduce_logdir", "reduce_logdirs", "selection_by_logdir", "shard_plan", "shard_sizes",
    "ShardError", "verify", "restore", "purge", "status", "history", "history_page", "UNATTRIBUTED", "recover_logdir", "adopt_moved_state",
    "unfinished", "pending_operations", "operation", "operations", "ReduceReport", "PurgeReport",
    "CancelToken", "summarize_operations", "operation_summary", "plan_run_view", "category_changes",
    "dashboards_note", "dashboards_summary", "labels_for", "sample", "SampleUnavailable", "custom_policy",
    "history_csv", "overview", "disk_numbers", "restorable", "restore_refusal", "PolicyError", "SelectionError",
    "reduce_summary", "restore_summary", "restore_target", "NotRestorable", "retire", "retire_plan",
    "retire_rule", "retired", "RetireReport", "RetireRule", "select_runs", "check_logdir", "NotALogdir",
    "interrupted_state", "settle_interrupted", "Interrupted", "ledger_skips", "vault_lifecycle",
    "plan_digest", "confirmed_digests", "hold_to_confirmed", "is_no_space", "kept_blobs", "bring_back",
    "forget_missing",
]
