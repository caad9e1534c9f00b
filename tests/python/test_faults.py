"""Faults with the real daemon: a full disk during a push and during a job's log writes gives a
clear error, leaves nothing half-written, and kestreld keeps serving; a kill -9 during a commit
leaves no model name without versions."""
import os
import subprocess
import time

import pytest

from conftest import Daemon


@pytest.fixture
def small_fs(tmp_path):
    """A 24 MiB tmpfs of the test's own (root may mount one; elsewhere the test cannot run)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0711", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_fails_cleanly_and_kestreld_keeps_serving(small_fs, tmp_path):
    d = Daemon(small_fs / "k", "--gpus", "0", "--max-log-bytes", "64M")
    try:
        big = tmp_path / "big.bin"
        big.write_bytes(os.urandom(40 << 20))    # more than the filesystem holds
        r = d.cli("push", "admin/big", str(big), check=False)
        assert r.returncode != 0 and "No space left" in r.stderr, r.stderr
        assert d.api("GET", "/api/v1/models")[1]["names"] == []                 # no version, no name
        leftovers = [p for p in (d.data / "repo").rglob("*") if ".tmp." in p.name]
        assert leftovers == [], leftovers                                        # nothing half-written
        assert d.api("GET", "/healthz")[0] == 200
        # the chunks that did land are no version's: a collection gives their space back
        status, gc = d.api("POST", "/api/v1/repo/gc?grace_s=0")
        assert status == 200 and int(gc["bytes_freed"]) > 0, gc
        small = tmp_path / "small.bin"
        small.write_bytes(os.urandom(1 << 20))
        assert d.cli("push", "admin/small", str(small)).returncode == 0
        # a job that writes more output than the disk holds: the log writes that do not fit fail
        # (said in kestreld's log), the job still ends with its state recorded, kestreld goes on
        jid = d.submit("--", "sh", "-c", "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                       " | head -c 40000000; echo done")
        job = d.wait(jid, timeout=120)
        assert job["state"] == "SUCCEEDED", job
        assert "full" in (d.root / "kestreld.log").read_text()
        assert d.api("GET", "/healthz")[0] == 200
        out = tmp_path / "back.bin"
        assert d.cli("pull", "admin/small", "-o", str(out)).returncode == 0 and out.read_bytes() == small.read_bytes()
    finally:
        d.stop()


def test_kill_9_during_commits_leaves_no_empty_model(daemon, tmp_path):
    d = daemon("--gpus", "0")
    f = tmp_path / "f.bin"
    for round_ in range(20):
        f.write_bytes(os.urandom(256 << 10))
        p = subprocess.Popen([os.environ["KESTREL_CLI"], "push", f"admin/m{round_}", str(f)],
                             env=d.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.002 * (round_ % 10))
        d.proc.kill()
        d.proc.wait()
        p.wait()
        d.restart()
        names = d.api("GET", "/api/v1/models")[1]["names"]
        for n in names:   # every name listed has a version that pulls
            status, body = d.api("GET", f"/api/v1/models/{n}/versions")
            assert status == 200 and body["versions"], (n, body)
            assert d.cli("pull", n, "-o", str(tmp_path / "out")).returncode == 0
