"""Review R10 F6: identity.json deleted by hand in a logdir whose backups are in an external
--backup-dir V. Adoption (``trust.bind``) took the id back from the state folder's own manifests only;
V's are not there, so the next changing verb adopted a NEW id and every manifest in V (carrying the
old id) stopped being this logdir's: its reductions hidden from restore. Now a manifest in a vault the
state records counts when the state's own change log names its operation (``trust.adoptable_ids``;
a vault's manifests alone never do: R10 F9, tests/test_new_logdir_at_old_path_takes_no_id.py)."""
import os

from conftest import copy_real, user_files
from tb_footprint_plugin import api


def test_identity_deleted_with_an_external_vault_keeps_the_backups(tmp_path):
    vault = str(tmp_path / "V")
    logdir = tmp_path / "L"
    copy_real("jax/profiled", logdir / "a")
    copy_real("jax/profiled", logdir / "b")
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), vault, policy="archive", dry_run=False, quiet_period=0, runs=["a"])
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    os.remove(logdir / ".tb-footprint" / "identity.json")  # deleted by hand (a tidy, a sync)
    api.recover_logdir(str(logdir), backup_dir=vault)  # any start
    rep = api.reduce_logdir(str(logdir), vault, policy="archive", dry_run=False, quiet_period=0, runs=["b"])
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    outs = api.restore(str(logdir), backup_dir=vault)
    assert sorted(o.run for o in outs if o.status == "restored") == ["a", "b"], [o.to_dict() for o in outs]
    assert user_files(logdir) == before
