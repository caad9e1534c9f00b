"""Stopping a transfer: a progress callback that raises, Ctrl-C in Python, and SIGINT or SIGTERM to
the kestrel CLI, each against the real kestreld. A stopped push leaves no version, a stopped pull
nothing beside dest; what stopped it comes back as itself."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import KESTREL_CLI

kestrel = pytest.importorskip("kestrel")


def test_a_progress_callback_that_raises_stops_a_pull_with_its_exception(kestreld, tmp_path, monkeypatch):
    """Chunks are placed on a thread of the pull's own while the next ones arrive: a callback that
    stops the pull still stops it with its own exception (not the placer's), and leaves nothing."""
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "m.bin"
    src.write_bytes(os.urandom(256 << 20))   # reports come every 100 ms: several before the end
    c = kestrel.Client(kestreld.url, kestreld.token)
    c.push("team/stopped", str(src))
    seen = []

    def progress(p):
        seen.append(p.bytes_done)
        if 0 < p.bytes_done < p.bytes_total:
            raise LookupError("enough")

    out = tmp_path / "out.bin"
    with pytest.raises(LookupError, match="enough"):
        c.pull("team/stopped", str(out), progress=progress)
    assert 0 < seen[-1] < src.stat().st_size
    assert not out.exists() and not [p for p in tmp_path.iterdir() if "kestrel-tmp" in p.name]
    c.pull("team/stopped", str(out))
    assert out.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_cli_pull_and_leaves_nothing(kestreld, tmp_path, sig):
    """kestrel pull stopped by Ctrl-C or SIGTERM while bytes move (a file, and a directory): the pull
    stops at its next progress report, removes its temp file or directory, and the CLI ends by that
    signal (a shell sees 130 or 143). Before, the temp was left beside dest, the size of what came.
    (A signal after the last report cannot stop it: dest is complete, printed, then the signal ends
    kestrel all the same.)"""
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(2):
        (tree / f"part{i}.bin").write_bytes(os.urandom(128 << 20))
    subprocess.run([KESTREL_CLI, "push", "team/sig", str(tree)], env=env, check=True, capture_output=True)
    subprocess.run([KESTREL_CLI, "push", "team/sigfile", str(tree / "part0.bin")], env=env, check=True,
                   capture_output=True)
    out = tmp_path / "out"
    out.mkdir()
    for ref in ("team/sigfile", "team/sig"):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        dest = out / ref.split("/")[1]
        p = subprocess.Popen([KESTREL_CLI, "pull", ref, "--dest", str(dest)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while not [q for q in out.iterdir() if ".kestrel-tmp." in q.name] and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
        p.send_signal(sig)
        printed, err = p.communicate(timeout=60)
        assert p.returncode == -sig, (p.returncode, err)
        if "stopped by" in err:   # as good as always: the pull takes about a second
            assert "nothing half-written is left" in err, err
            assert list(out.iterdir()) == [], list(out.iterdir())
        else:   # the signal came after the last report: dest is complete and said, then kestrel ends by it
            assert printed.strip() == str(dest) and list(out.iterdir()) == [dest], (printed, err)


def test_ctrl_c_cancels_a_transfer_and_raises_keyboard_interrupt(kestreld, tmp_path):
    """SIGINT (Ctrl-C, a kernel interrupt) during a push stops it through the progress callback;
    KeyboardInterrupt comes back as itself and no version is created."""
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(256 << 20))
    script = tmp_path / "push.py"
    script.write_text(
        "import sys, kestrel\n"
        "c = kestrel.Client(sys.argv[1], sys.argv[2])\n"
        "seen = []\n"
        "def progress(p):\n"
        "    seen.append(p)\n"                     # before the print: the interrupt may land inside it
        "    if len(seen) == 1:\n"
        "        print('started', flush=True)\n"
        "try:\n"
        "    c.push('team/interrupted', sys.argv[3], progress=progress)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after', seen[-1].bytes_done, 'of', seen[-1].bytes_total, flush=True)\n"
        "    sys.exit(130)\n"
        "except BaseException as e:\n"
        "    print('other', type(e).__name__, e, flush=True)\n"
        "    sys.exit(3)\n")
    p = subprocess.Popen([sys.executable, str(script), kestreld.url, kestreld.token, str(src)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    assert p.stdout.readline().strip() == "started"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, out + err
    done, total = (int(w) for w in out.split()[2::2])
    assert done < total                                  # it stopped before the end
    assert kestreld.api("GET", "/api/v1/models/team/interrupted/versions")[0] == 404


def pushed_source(d, tmp_path, name, what, file_bytes, files, file_each):
    """A file of file_bytes, or a directory of `files` files of file_each bytes, pushed as name."""
    src = tmp_path / "src"
    if what == "file":
        src.write_bytes(os.urandom(file_bytes))
    else:
        (src / "d").mkdir(parents=True)
        for i in range(files):
            (src / "d" / f"f{i}").write_bytes(os.urandom(file_each))
    c = kestrel.Client(d.url, d.token)
    c.push(name, str(src))
    return c, src


@pytest.mark.parametrize("what", ["file", "directory"])
def test_what_a_killed_pull_left_is_removed_by_the_next_pull(kestreld, tmp_path, monkeypatch, what):
    """kill -9 leaves DEST.kestrel-tmp.v2.XXXXXX; the next pull to DEST removes those 5 minutes old
    (10 here; an hour before, which kept a killed pull's gigabytes that long) that no live pull holds (each pull locks its temp), and nothing else: not a fresh one, not one a
    process holds, not the older form (its client took no lock), not a link or a FIFO named so (nor
    what a link points at), not another destination's, not another name."""
    import fcntl
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    c, src = pushed_source(kestreld, tmp_path, "team/swept", what, 3 << 20, 1, 5000)
    work = tmp_path / "work"
    work.mkdir()
    old = time.time() - 600
    (work / "out.kestrel-tmp.v2.Aa1Bb2").write_bytes(b"half a file")        # stale: removed
    stale_dir = work / "out.kestrel-tmp.v2.Cc3Dd4"                           # stale directory: removed
    (stale_dir / "x" / "y").mkdir(parents=True)
    (stale_dir / "x" / "y" / "z").write_bytes(b"z")
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    os.symlink(target, stale_dir / "x" / "link")                            # removed as a link, not followed
    kept = ["out.kestrel-tmp.v2.Ee5Ff6", "out.kestrel-tmp.v2.Gg7Hh8", "out.kestrel-tmp.v2.Ii9Jj0",
            "out.kestrel-tmp.v2.Rr7Ss8", "out.kestrel-tmp.Tt9Uu0", "other.kestrel-tmp.v2.Kk1Ll2",
            "out.kestrel-tmp.v2.Mm3Nn4O", "out.kestrel-old.Pp5Qq6"]
    (work / kept[0]).write_bytes(b"fresh")                                  # written a moment ago: a live pull
    (work / kept[1]).write_bytes(b"held")                                    # locked: a live pull
    os.symlink(target, work / kept[2])                                       # a link named like a temp
    os.mkfifo(work / kept[3])                                                # a FIFO named like a temp
    for name in kept[4:]:
        (work / name).write_bytes(b"not ours to judge")
    for p in [work / "out.kestrel-tmp.v2.Aa1Bb2", stale_dir, *(work / k for k in kept[1:])]:
        os.utime(p, (old, old), follow_symlinks=False)
    holder = open(work / kept[1], "rb")
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        c.pull("team/swept", str(work / "out"))
    finally:
        holder.close()
    assert sorted(p.name for p in work.iterdir()) == sorted(["out"] + kept)
    assert target.read_bytes() == b"keep me"
    assert subprocess.run(["diff", "-r", str(src), str(work / "out")]).returncode == 0


@pytest.mark.parametrize("what", ["file", "directory"])
def test_what_a_pull_killed_then_run_again_left_goes_with_a_pull_into_dest(kestreld, tmp_path, what):
    """kill -9 mid-pull, then the same pull at once: the killed one's temp, younger than 5 minutes,
    stays beside DEST, and the later pulls to DEST go inside it (DEST now exists), so none swept it (a
    hostile test: 190 MB left for good). A pull into DEST now sweeps DEST's own temps too, by the same
    rules (5 minutes old, held by no process)."""
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    src = tmp_path / "src"
    if what == "file":
        src.write_bytes(os.urandom(192 << 20))
    else:
        src.mkdir()
        for i in range(3):
            (src / f"part{i}.bin").write_bytes(os.urandom(64 << 20))
    subprocess.run([KESTREL_CLI, "push", "team/killed", str(src)], env=env, check=True, capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    p = subprocess.Popen([KESTREL_CLI, "pull", "team/killed", str(work / "out")], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not [q for q in work.iterdir() if ".kestrel-tmp.v2." in q.name] and time.time() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    p.kill()
    p.wait()
    left = [q for q in work.iterdir()]
    assert len(left) == 1 and ".kestrel-tmp.v2." in left[0].name, left   # what kill -9 leaves
    subprocess.run([KESTREL_CLI, "pull", "team/killed", str(work / "out")], env=env, check=True, capture_output=True)
    assert sorted(q.name for q in work.iterdir()) == sorted(["out", left[0].name])   # young: kept
    old = time.time() - 600
    os.utime(left[0], (old, old))
    # the same pull once more: a file's replaces DEST, sweeping beside it as always; a directory's goes
    # inside DEST, as out/src, and now sweeps beside DEST too
    subprocess.run([KESTREL_CLI, "pull", "team/killed", str(work / "out")], env=env, check=True, capture_output=True)
    assert sorted(q.name for q in work.iterdir()) == ["out"]
    got = work / "out" if what == "file" else work / "out" / "src"
    assert subprocess.run(["diff", "-r", str(src), str(got)]).returncode == 0


@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_live_pulls_temp_is_never_swept(kestreld, tmp_path, monkeypatch, what):
    """While a pull runs, its temp aged by hand, a second pull to the same DEST (another process) leaves
    it alone: the first pull holds its lock; both complete. The pull is 256 MiB so that its progress,
    reported every 100 ms, is seen while the temp exists: 96 MiB once went by between two reports."""
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    c, src = pushed_source(kestreld, tmp_path, "team/live", what, 256 << 20, 16, 16 << 20)
    work = tmp_path / "work"
    work.mkdir()
    seen = []

    def progress(p):
        temps = [t for t in work.iterdir() if ".kestrel-tmp.v2." in t.name]
        if seen or not temps or p.bytes_done >= p.bytes_total:
            return
        old = time.time() - 7200
        os.utime(temps[0], (old, old))
        env = {k: v for k, v in os.environ.items() if not k.startswith("KESTREL_")}
        env.update(KESTREL_URL=kestreld.url, KESTREL_TOKEN=kestreld.token, KESTREL_CACHE_MAX="0")
        second = subprocess.run([KESTREL_CLI, "pull", "team/live", str(work / "out")], env=env,
                                capture_output=True, text=True, timeout=120)
        seen.append((temps[0].name, temps[0].exists(), second.returncode, second.stderr))

    c.pull("team/live", str(work / "out"), progress=progress)
    assert seen and seen[0][1] and seen[0][2] == 0, seen     # the first pull's temp survived the second pull
    assert subprocess.run(["diff", "-r", str(src), str(work / "out")]).returncode == 0
    assert [p.name for p in work.iterdir()] == ["out"]


@pytest.mark.parametrize("cmd,hang_on", [("push", b"POST /api/v1/chunks/missing"), ("push", b"POST /api/v1/chunks/pack"),
                                         ("pull", b"GET /api/v1/models/team/hung/versions/"),
                                         ("pull", b"POST /api/v1/chunks/fetch?")])
def test_the_first_signal_stops_a_transfer_whose_server_stopped_answering(kestreld, tmp_path, cmd, hang_on):
    """A kestreld that stops answering mid-transfer (hung, or a network that drops everything): the
    first Ctrl-C stops the push or pull at once, though no byte moves and no request ends (each would
    wait a minute for its timeout); the CLI ends by the signal, no version made, nothing left."""
    from faultproxy import FaultProxy, interrupt_cli
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(64 << 20))
    if cmd == "pull":
        subprocess.run([KESTREL_CLI, "push", "team/hung", str(src)], env=env, check=True, capture_output=True)
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)   # the pull fetches every chunk
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "hang", hang_on=hang_on)
    out = tmp_path / "out"
    out.mkdir()
    argv = [KESTREL_CLI, "push", "team/hung2", str(src)] if cmd == "push" else \
           [KESTREL_CLI, "pull", "team/hung", "--dest", str(out / "big.bin")]
    try:   # 0.3 s: well inside the request that now waits
        rc, err = interrupt_cli(argv, dict(env, KESTREL_URL=proxy.url), lambda: proxy.damaged, settle=0.3)
    finally:
        proxy.close()
    assert rc == -signal.SIGINT, (rc, err)
    assert "stopped by" in err and "nothing half-written is left" in err, err
    assert list(out.iterdir()) == []
    assert kestreld.api("GET", "/api/v1/models/team/hung2/versions")[0] == 404


def test_the_first_signal_stops_a_push_whose_commit_is_unanswered_saying_its_version_may_be_made(kestreld, tmp_path):
    """The server stops answering once the commit went out whole: Ctrl-C stops the push at once (it
    waited for the minute of its timeout, then sent the commit again: a commit had no stop), and it
    says that the version may have been made, since it cannot know (here the proxy dropped it)."""
    from faultproxy import FaultProxy, interrupt_cli
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(8 << 20))
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "hang",
                       hang_on=b"POST /api/v1/models/team/hung3/versions?settle=later ")
    try:   # 0.5 s: the commit, sent whole, now waits
        rc, err = interrupt_cli([KESTREL_CLI, "push", "team/hung3", str(src)], dict(env, KESTREL_URL=proxy.url),
                                lambda: proxy.damaged, settle=0.5)
    finally:
        proxy.close()
    assert rc == -signal.SIGINT, (rc, err)
    assert "stopped by Interrupt; stopped while the commit of team/hung3 was unanswered: its version may have " \
           "been made all the same" in err, err
    assert kestreld.api("GET", "/api/v1/models/team/hung3/versions")[0] == 404   # the proxy dropped it


def tree_of(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_directory_pull_killed_as_it_replaces_dest_leaves_the_old_tree_or_the_new(kestreld, tmp_path):
    """A pull over an existing directory, killed (SIGKILL, injected by strace) at each rename or removal
    it makes in turn: dest is the old tree or the new one, never missing (the new tree goes in and the
    old one out in one exchange; before, a kill between moving the old one aside and the new one in
    left no dest), and the next pull puts the new one in place."""
    if subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "true"], capture_output=True).returncode != 0:
        pytest.skip("strace cannot trace here (ptrace refused)")
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    src = tmp_path / "dir"
    for i in range(30):
        (src / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 3}" / f"f{i}").write_bytes(os.urandom(3000 + i))
    subprocess.run([KESTREL_CLI, "push", "team/tree", str(src)], env=env, check=True, capture_output=True)
    old = tree_of(src)
    for i in range(0, 30, 2):
        (src / f"d{i % 3}" / f"f{i}").write_bytes(os.urandom(2000 + i))
    (src / "added").write_bytes(b"new")
    subprocess.run([KESTREL_CLI, "push", "team/tree", str(src)], env=env, check=True, capture_output=True)
    new = tree_of(src)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "dir"   # an existing --dest folder takes the pulled tree under the pushed folder's name

    def pull(version, *strace):
        return subprocess.run([*strace, KESTREL_CLI, "pull", f"team/tree@{version}", "--dest", str(out), "--replace"], env=env,
                              capture_output=True, text=True, timeout=120)

    assert pull(1).returncode == 0 and tree_of(dest) == old
    calls = "rename,renameat,renameat2,unlink,unlinkat,rmdir"
    kills = 0
    for call in calls.split(","):
        for k in range(1, 5):
            p = pull(2, "strace", "-f", "-qq", "-o", "/dev/null", "-e", f"trace={calls}",
                     "-e", f"inject={call}:signal=KILL:when={k}")
            assert dest.is_dir(), (call, k, p.stderr)
            assert tree_of(dest) in (old, new), (call, k)
            if p.returncode == 0:   # this call is made fewer than k times
                assert tree_of(dest) == new
                break
            kills += 1
            assert pull(1).returncode == 0 and tree_of(dest) == old   # the old tree again, for the next kill
    assert kills >= 3   # the exchange, and the removals of the old tree, were each hit
    assert pull(2).returncode == 0 and tree_of(dest) == new
