"""Issue #27 audit gap 5 (first half): ``BlobStore`` killed with SIGKILL at each step it was only
killed at on a POSIX folder, now on moto S3, the GCS emulator and Azurite, the repack included.

``test_blobstore_sigkill.py`` kills at every step on a POSIX folder but on the object stores only
at ``add.verified`` and ``forget.index_written``. This file runs the others on each object store:
``forget.pack_written`` (a half-dead pack's live blobs copied into a new pack: the repack),
``forget.old_index_deleted``, ``forget.objects_deleted``, ``add.data_written`` and
``add.index_written``, through that module's own test body: the child must die of SIGKILL at the
step (so the step is reached), then every blob an index lists reads back whole, the kept blobs
survive, the killed add or forget done again finishes, and a last sweep leaves exactly the data
objects the live blobs need, with no half-written index object.
"""
import pytest

import test_blobstore_sigkill as base
from tb_footprint_plugin.storage.blobstore import STEPS as BLOBSTORE_STEPS

STEPS = ("forget.pack_written", "forget.old_index_deleted", "forget.objects_deleted",
         "add.data_written", "add.index_written")
CASES = [(k, s) for k in ("s3", "gs", "az") for s in STEPS]
assert set(STEPS) <= set(BLOBSTORE_STEPS)
assert not set(CASES) & set(base.CASES)  # new cases only, nothing run twice
assert {s for k, s in base.CASES if k == "posix"} == set(BLOBSTORE_STEPS)  # every step, once these run


@pytest.mark.parametrize("kind,step", CASES)
def test_sigkill_at_each_blobstore_step_on_an_object_store_loses_nothing(kind, step, tmp_path, objstore_pool):
    base.test_sigkill_at_each_step_leaves_every_listed_blob_whole_and_the_next_run_finishes(
        kind, step, tmp_path, objstore_pool)
