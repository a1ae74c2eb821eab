"""One read of a vault's manifests shared by a command's passes (issue #28): ``status`` lists,
checks and counts them, and the end of a batch counts what a purge would free; each pass used to
read every manifest again. A slim read keeps of each manifest what counting and checking blobs
need, not its verification (the series the check page draws: ~46 KB of a rewritten run's ~52 KB).
"""
from __future__ import annotations

from typing import Callable, Iterable, List, NamedTuple, Optional

from tb_footprint_plugin.engine import manifest, trust
from tb_footprint_plugin.engine.vault import ManifestMemo, Vault


class VaultRead(NamedTuple):
    """One read of a vault's manifests (``Vault.manifests``, every logdir's; the object's
    ``problems`` and ``unread`` go with them)."""

    vault: Vault
    manifests: List[dict]


#: what a slim read leaves out of each well-formed manifest: its verification, plan, policy and
#: retired tree (nothing that says which blobs it claims, whose it is or how it ended)
HEAVY = ("verification", "plan", "policy", "tree")


def manifest_file(root: str, op_id) -> str:
    """How a refusal names a manifest of the vault at ``root`` (its records are in the oplog)."""
    return f"{root}: the manifest of operation {op_id}"


def slim(root: str) -> Callable[[dict], dict]:
    """``Vault.manifests``' projection of a slim read: a manifest the one schema takes, as a full
    read has it without ``HEAVY``; one it refuses, whole (refused again where it is used, named,
    and its blobs kept the same way). Never the schema's reading of it: a slim read answers what
    a full one does (a disk manifest carrying a bucket's ``status``/``purged`` aliases read as
    restored or purged by the one and not the other let a release free a blob another operation
    still claimed — review R3 F1)."""
    def keep(m: dict) -> dict:
        try:
            manifest.read(m, manifest_file(root, m.get("op_id")))
        except trust.Untrusted:
            return m
        return {k: v for k, v in m.items() if k not in HEAVY}
    keep.memo_name = "slim"  # a ``Vault.ManifestMemo`` holds it apart from full reads
    return keep


def read_roots(roots: Iterable[str], slim_read: bool = False,
               memo: Optional[ManifestMemo] = None, where=None) -> List[VaultRead]:
    """The vaults at ``roots`` read once each; ``slim_read``: each manifest projected by ``slim``
    as it is read, so a pass over thousands holds no verification. ``memo``: the command's
    (``Vault.manifests``), so what did not change since its last read is not read again;
    ``where(run, kind)``: only the manifests it takes are listed (``Vault.manifests``)."""
    out = []
    for root in roots:
        v = Vault(root)
        # a plain read passes nothing: what a caller (or a test counting reads) wraps is the bare call
        kw = {"memo": memo} if memo is not None else {}
        if where is not None:
            kw["where"] = where
        out.append(VaultRead(v, v.manifests(slim(v.root), **kw) if slim_read else v.manifests(**kw)))
    return out


__all__ = ["HEAVY", "VaultRead", "manifest_file", "read_roots", "slim"]
