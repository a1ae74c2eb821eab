"""A bucket logdir's operations recorded in its own state when their vault lies elsewhere (review
R11 G11's rest).

A logdir given another prefix as its vault (``--backup-dir s3://b/vault``) keeps its manifests
there, each naming the logdir's URL: nothing under the logdir said which were its. Moved away
(``aws s3 mv``), it saw them as another logdir's; a new logdir made at its old URL took them for
its own (listed, restored them into itself, purged the moved one's only copies). Each operation
of such a logdir now leaves a small create-only object in the logdir's own state,
``<logdir>/.tb-footprint/ops/<op_id>.json`` (its op id, vault and time), written before its
manifest, and the manifest says so (``RECORDED``: true): the state moves along with the logdir,
so whose a recorded manifest is follows where its record stands (``bucket_moved.whose``). A
vault under the logdir's own state (the default, or a local blob folder's manifests) needs none:
its manifests move along themselves, and no request is added there.

A record is untrusted input like every state object: anyone who may write a logdir's prefix can
plant one. It only ever makes an operation this logdir's when the URL its manifest names holds
no record of it (``bucket_moved``): a logdir that stands where its manifests say keeps them.
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Set

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_state import BucketVault, now_s, vault_url
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME, is_op_id
from tb_footprint_plugin.storage.remote import map_ordered
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

#: a manifest's key saying its operation's record was written in its logdir's own state first
RECORDED = "recorded"
#: the folder of the records, in a logdir's own state
OPS = "ops"


def needs_records(vault: BucketVault) -> bool:
    """Whether the operations of ``vault``'s logdir are recorded in its own state: only when the
    vault's manifests lie outside that state (another prefix or bucket)."""
    own = vault.logdir.path(STATE_DIR_NAME)
    return not (vault.root == own or vault.root.startswith(own + "/"))


def record_path(root: str, op_id: str) -> str:
    """The store path of operation ``op_id``'s record in the state of the logdir at ``root``."""
    return f"{root}/{STATE_DIR_NAME}/{OPS}/{op_id}.json"


def recorded(ostore: ObjectStore, vault: BucketVault, op_ids: Iterable[str]) -> Dict[str, bool]:
    """Each of ``op_ids`` recorded in the logdir's own state (create-only; one already there is
    kept), a few at once, when ``vault`` needs records (``needs_records``); the mark its manifests
    then carry (``{RECORDED: True}``), ``{}`` when it needs none (no request). Written before the
    manifests: a crash between leaves a record naming no manifest, which names nothing of
    anyone's. ``StoreFailure`` when one could not be written (its manifest must not be)."""
    if not needs_records(vault):
        return {}
    st = BucketState.of(ostore)
    where = vault_url(ostore, vault.root)

    def put(op_id: str) -> None:
        try:
            st.create(record_path(ostore.root, op_id), {"op_id": op_id, "vault": where, "at": now_s()})
        except StoreFailure as e:
            if e.code != StoreError.ALREADY_EXISTS:
                raise

    for _ in map_ordered(put, list(op_ids)):
        pass
    return {RECORDED: True}


def create_manifest(ostore: ObjectStore, vault: BucketVault, op_id: str, doc: dict) -> str:
    """Operation ``op_id``'s manifest ``doc`` (in the bucket's form) created in ``vault``
    (create-only), its record written first when the vault needs one (``recorded``) and ``doc``
    marked so in place (the caller's later writes of it keep the mark); the manifest's version.
    The one way every bucket manifest is made."""
    doc.update(recorded(ostore, vault, [op_id]))
    return BucketState.of(ostore).create(vault.manifest(op_id), doc)


def forget_record(ostore: ObjectStore, vault: BucketVault, op_id: str) -> None:
    """Operation ``op_id``'s record deleted, after its manifest was (a rollback): one left by a
    crash between names no manifest, nothing of anyone's. Nothing without records."""
    if needs_records(vault):
        try:
            BucketState.of(ostore).delete([record_path(ostore.root, op_id)])
        except (StoreFailure, ValueError, OSError):
            pass  # left: it names no manifest any more, nothing of anyone's


def state_op_ids(ostore: ObjectStore, root: str, folder: str, seen: dict) -> Optional[Set[str]]:
    """The op ids that ``<op_id>.json`` objects name directly in ``folder`` of the state of the
    logdir at store path ``root`` (``ops``: its records; ``manifests``: its own vault's), one
    listing per prefix, folder and reading (kept in ``seen``); None when it cannot be listed (the
    failure's words kept in ``seen``: ``listing_failure``)."""
    key = f"{folder}:{root}"
    if key not in seen:
        try:
            found = BucketState.of(ostore).listing(f"{root}/{STATE_DIR_NAME}/{folder}", missing_ok=True)
            seen[key] = {k[:-len(".json")] for k in found if k.endswith(".json") and "/" not in k
                         and is_op_id(k[:-len(".json")])}
        except (StoreFailure, ValueError, OSError) as e:
            seen[key], seen[f"why:{key}"] = None, str(e)[:300]  # its message names the object
    return seen[key]


def listing_failure(seen: dict, folder: str, root: str) -> Optional[str]:
    """Why ``state_op_ids`` could not list ``folder`` at ``root`` in this reading (None: it could)."""
    return seen.get(f"why:{folder}:{root}")


def records_at(ostore: ObjectStore, root: str, seen: Dict[str, Optional[Set[str]]]) -> Optional[Set[str]]:
    """The op ids recorded in the state of the logdir at store path ``root`` (``state_op_ids`` of
    its ``ops`` folder)."""
    return state_op_ids(ostore, root, OPS, seen)


def is_recorded(m: dict) -> bool:
    """Whether manifest ``m`` says its operation was recorded in its logdir's state (``RECORDED``;
    anything but absent counts: a manifest naming a record must be judged by it)."""
    return RECORDED in m and m[RECORDED] is not None


__all__ = ["OPS", "RECORDED", "create_manifest", "forget_record", "is_recorded", "listing_failure", "needs_records",
           "record_path", "recorded", "records_at", "state_op_ids"]
