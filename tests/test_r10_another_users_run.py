"""Review R10 F8: in a team logdir whose runs are group/other-writable (setgid 2775 + umask 002 is the
common shape; here a+w), Bob's reduce took ALICE's run into his private (0700) vault: only Bob could ever
restore it, and his purge would delete her only copy. FAILSAFE "Shared logdirs": "Each user's reduce and
restore act on that user's runs with that user's vault". Now the plan leaves it alone (``others_run``,
naming its owner) unless Bob asks (``include_others_runs``: see test_trust_users and
test_others_runs_left_alone)."""
from test_trust_users import reduced, snapshot, users, world, tmp_path, shared  # noqa: F401 (fixtures)


def test_bob_does_not_reduce_alices_writable_run(users, shared):
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    alice.sh(f"chmod -R a+w '{shared / 'alice-run'}'")
    before = snapshot(shared / "alice-run")
    out = bob.tool("reduce", shared, "alice-run")
    print("bob's reduce of alice's run:", out)
    r = reduced(out)
    if r["status"] == "verified":
        back = alice.tool("restore", shared, "alice-run")
        print("alice's restore:", back)
    assert r["status"] != "verified", "Bob reduced Alice's run into his own private vault"
    assert r["status"] == "skipped" and r["code"] == "others_run", r
    assert r["reason"].startswith(f"owned by {alice.name} (uid {alice.uid}): its owner reduces it"), r
    assert snapshot(shared / "alice-run") == before
