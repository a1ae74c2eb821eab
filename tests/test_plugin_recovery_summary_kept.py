"""The tab's recovery summary counts every outcome a recovery gives (W2's notes, r26): a
``backups_kept`` reduction was counted nowhere (the summary said "nothing to recover" or left it
out), and a journal left because an original was not in place, or a backup was gone past the
commit point, was counted among the planted or copied journals ("malformed, or written for another
logdir"). Now each is said as what it is."""
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import trust
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome, backups_kept, refused
from tb_footprint_plugin.plugin import plugin


def _summary(monkeypatch, tmp_path, outs):
    asked = []

    def recover_logdir(logdir, backup_dir=None, *, thorough=True):
        asked.append(thorough)
        return outs

    monkeypatch.setattr(api, "recover_logdir", recover_logdir)
    monkeypatch.setattr(api, "unfinished", lambda logdir, backup_dir=None: {
        "unfinished_operations": [], "problems": [], "settle_command": None})
    rec = plugin.Recovery(str(tmp_path), None, enabled=True)
    rec._run()
    assert rec.state == "done"
    # a start's steps: a remote vault's index is looked through by the verb, not at each TensorBoard start
    assert asked == [False]
    return rec.detail


def test_backups_kept_is_counted_and_said(monkeypatch, tmp_path):
    detail = _summary(monkeypatch, tmp_path, [backups_kept("op1", "r", ["r/x.tfevents"])])
    assert detail != "nothing to recover"
    assert "1 reduction(s) found a file not as their journal recorded it" in detail and "restore" in detail, detail


def test_a_journal_left_for_an_original_is_not_called_planted(monkeypatch, tmp_path):
    outs = [refused("op1", "r", "x: not in place", Finding.ORIGINAL_NOT_IN_PLACE),
            refused("op2", "r", "y: copy gone", Finding.BACKUP_DAMAGED),
            refused("op3", "r", "z: outside", trust.PATH_OUTSIDE)]
    detail = _summary(monkeypatch, tmp_path, outs)
    assert "2 journal(s) left as they are, nothing deleted" in detail, detail
    assert "1 journal(s) refused and left as they are (malformed" in detail, detail
    assert isinstance(outs[0], RecoveryOutcome) and outs[0].action == Recovery.REFUSED
