"""The scan makes each run's footprint while the walk goes on (issue 28 item 1): it never holds the
walk of the whole logdir beside the footprints, which was the scan's peak at 100,000 runs."""
import os

from tb_footprint_plugin.scan import discovery, scanner
from tb_footprint_plugin.storage import throttle


def _tree(root, n):
    for i in range(n):
        run = os.path.join(root, f"exp{i // 5}", f"run{i:02d}")
        os.makedirs(os.path.join(run, "plugins", "profile", "s1"))
        with open(os.path.join(run, "events.out.tfevents.1.host"), "wb") as f:
            f.write(b"")
        with open(os.path.join(run, "plugins", "profile", "s1", "host.xplane.pb"), "wb") as f:
            f.write(b"x" * (i + 1))
    os.makedirs(os.path.join(root, "a", "b"))  # a run inside a run, and a stray file
    for p in ("a/events.out.tfevents.2.h", "a/b/events.out.tfevents.3.h", "a/notes.txt", "stray.txt"):
        with open(os.path.join(root, p), "wb") as f:
            f.write(b"")
    return str(root)


def test_each_run_is_made_before_the_walk_reaches_the_next_runs_folder(tmp_path, monkeypatch):
    logdir = _tree(tmp_path / "logdir", 20)
    events = []
    real_scandir, real_footprint = throttle.scandir, scanner._run_footprint
    monkeypatch.setattr(throttle, "scandir", lambda p: (events.append(("walk", os.path.relpath(p, logdir))),
                                                       real_scandir(p))[1])
    monkeypatch.setattr(scanner, "_run_footprint", lambda found, *a, **k: (events.append(("made", found.name)),
                                                                            real_footprint(found, *a, **k))[1])
    fp = scanner.scan(logdir, use_cache=False)
    made = [name for kind, name in events if kind == "made"]
    assert sorted(made) == sorted(r.name for r in fp.runs) and len(made) == 23  # 20 + a + a/b + (unattributed)
    walked = [p for kind, p in events if kind == "walk"]
    for name in made:
        if name in ("(unattributed)", "a"):
            continue
        at = events.index(("made", name))
        # made before the walk entered any folder of a run after it, and after its own folders
        later = [p for kind, p in events[at:] if kind == "walk"]
        assert not any(p == name or p.startswith(name + "/") for p in later), name
        assert walked.index(name) < len([e for e in events[:at] if e[0] == "walk"])
    # the first run is made while most of the logdir is still to walk
    first = events.index(("made", made[0]))
    assert len([e for e in events[first:] if e[0] == "walk"]) > len(walked) // 2
    # a run holding a run: the inner one first, the outer one with all its own files
    assert made.index("a/b") < made.index("a")
    a = fp.run("a")
    assert sorted(f.path for f in a.files) == ["a/events.out.tfevents.2.h", "a/notes.txt"]
    assert made[-1] == "(unattributed)" and [f.path for f in fp.run("(unattributed)").files] == ["stray.txt"]


def test_discover_gives_the_same_runs_as_the_streaming_walk(tmp_path):
    logdir = _tree(tmp_path / "logdir", 7)
    warnings = []
    streamed = {r.name: r for r in discovery.walk_runs(logdir, warnings)}
    found = discovery.discover(logdir)
    assert set(found.runs) == set(streamed)
    for name, r in found.runs.items():
        assert [f.rel for f in r.files] == [f.rel for f in streamed[name].files]
        assert [f.rel for f in r.files] == sorted(f.rel for f in r.files)
