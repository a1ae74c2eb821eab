"""What a reduce's manifest keeps of its run's plan and its policy (``stored_plan``,
``stored_policy``): the compact forms ``catalogue.write_manifest`` records, apart from the
catalogue that reads and lists manifests (split from ``engine/catalogue.py``, at the length limit).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

#: what a manifest leaves out of its run's plan: the actions (``files`` and ``removed_dirs`` list
#: what was done, path by path; the plan's per-category totals and a digest of its actions stay),
#: and what the plan of a run that was reduced says by itself (its run is the manifest's, its
#: removable bytes are before - after); ~40% of a small run's manifest. A journal's plan, which
#: recovery replays, is whole.
_PLAN_LEFT_OUT = ("actions", "run", "removable_bytes")


def stored_plan(plan: Any) -> Any:
    """The run's plan as a manifest keeps it: its actions as per-category totals (``changes``:
    category -> [bytes before, bytes after, files], what the check page shows) and the sha256 of
    their canonical JSON (``actions_sha256``: which actions these were, to compare with a journal
    or a plan); empty details and writers, and no skip, left out."""
    if not isinstance(plan, dict) or not isinstance(plan.get("actions"), list):
        return plan
    from tb_footprint_plugin.plan.summary import category_totals

    out = {k: v for k, v in plan.items() if k not in _PLAN_LEFT_OUT}
    for key in ("fidelity_details", "writers"):
        if key in out and not any(out[key] or []):
            del out[key]
    for key in ("skipped", "code"):
        if out.get(key) is None:
            out.pop(key, None)
    out["changes"] = category_totals(plan["actions"])
    out["actions_sha256"] = hashlib.sha256(
        json.dumps(plan["actions"], sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()
    return out


def stored_policy(policy: Any) -> Any:
    """The policy as a manifest keeps it: a built-in policy exactly as this version defines it is
    kept by its name (``{"name", "builtin": true}``; the manifest's ``tool_version`` says which
    definition), any other (custom rules, a policy file) whole. Its ~800 bytes were stored
    again with every run's manifest and log line."""
    from tb_footprint_plugin.plan.policies import BUILTIN

    if isinstance(policy, dict) and policy.get("name") in BUILTIN:
        try:
            same = BUILTIN[policy["name"]]().to_dict() == policy
        except Exception:  # noqa: BLE001 - a definition that cannot be built: keep the record whole
            same = False
        if same:
            return {"name": policy["name"], "builtin": True}
    return policy
