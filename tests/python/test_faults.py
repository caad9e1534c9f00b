"""Faults with the real daemon: a full disk during a push (its store, or the push's temp space) and
during a job's log writes gives a clear error, leaves nothing half-written, and kestreld keeps
serving; a kill -9 during a commit leaves no model name without versions, and a kill loop amid
pushes and jobs loses nothing; a second kestreld on a data dir in use is refused and changes
nothing there."""
import hashlib
import http.server
import os
import shutil
import stat
import re
import pathlib
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import Daemon, KESTREL_CLI, no_process, processes


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
        # a job that writes more output than the disk holds: its output is stored down to half the
        # disk's floor, dropped after (its log says so, where a batch of it did not take the disk's last
        # bytes before: kestreld's log then says the disk is full), the job still ends with its state
        # recorded, kestreld goes on
        jid = d.submit("--", "sh", "-c", "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                       " | head -c 40000000; echo done")
        job = d.wait(jid, timeout=120)
        assert job["state"] == "SUCCEEDED", job
        assert "the job's output is dropped while the data disk" in d.cli("logs", str(jid)).stdout or \
            "full" in (d.root / "kestreld.log").read_text()
        assert d.api("GET", "/healthz")[0] == 200
        out = tmp_path / "back.bin"
        assert d.cli("pull", "admin/small", "-o", str(out)).returncode == 0 and out.read_bytes() == small.read_bytes()
    finally:
        d.stop()


def test_one_jobs_files_cannot_take_the_data_disk_from_everyone(small_fs):
    """alice's job wrote until the data disk was full, and held it: every other user's token, submit
    and job end failed after it (a hostile test). On a disk below its floor the job whose files take
    the most is stopped within seconds, fails with the reason, and its files are removed before its
    end is recorded; bob's job beside it, with little, runs on, and bob submits again. A job past
    --max-job-disk fails the same way on a disk with room."""
    fill = "head -c 67108864 /dev/zero > big 2>/dev/null; echo full; sleep 600"
    d = Daemon(small_fs / "a", "--gpus", "0", "--max-jobs", "4")
    try:
        alice = d.env(KESTREL_TOKEN=d.api("POST", "/api/v1/tokens", {"user": "alice"})[1]["token"])
        bob = d.env(KESTREL_TOKEN=d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"])
        quiet = d.submit("--", "sh", "-c", "echo small > f; echo up; sleep 600", env=bob)
        d.wait_for_line(quiet, "up")
        big = d.submit("--", "sh", "-c", fill, env=alice)
        job = d.wait(big, timeout=60)
        assert job["state"] == "FAILED" and "the data disk had" in job["reason"] and \
            "this job's files took the most" in job["reason"], job
        assert list((d.data / "jobs" / str(big)).iterdir()) == []
        assert d.job(quiet)["state"] == "RUNNING"
        assert (d.data / "jobs" / str(quiet) / "work" / "f").exists()
        again = d.submit("--", "echo", "after", env=bob)
        assert d.wait(again)["state"] == "SUCCEEDED"
        assert d.api("POST", "/api/v1/tokens", {"user": "carol"})[0] == 201
        d.cli("cancel", str(quiet))
    finally:
        d.stop()
    shutil.rmtree(small_fs / "a")
    d = Daemon(small_fs / "b", "--gpus", "0", "--max-job-disk", "4M")
    try:
        alice_token = d.api("POST", "/api/v1/tokens", {"user": "alice"})[1]["token"]
        alice = d.env(KESTREL_TOKEN=alice_token)
        big = d.submit("--", "sh", "-c", fill.replace("67108864", "6291456"), env=alice)
        job = d.wait(big, timeout=60)
        assert job["state"] == "FAILED" and "its files took 6 MiB, past kestreld's --max-job-disk 4 MiB" in \
            job["reason"], job
        assert list((d.data / "jobs" / str(big)).iterdir()) == []
        # nor did a file deleted and held open, or one nested past the walk's depth, escape the bound
        # (a second hostile test)
        held = d.submit("--", "sh", "-c", "exec 3>big; head -c 6291456 /dev/zero >&3; rm big; sleep 600", env=alice)
        job = d.wait(held, timeout=60)
        assert job["state"] == "FAILED" and "its files took 6 MiB" in job["reason"], job
        mapped = ("import ctypes, os, time\n"
                  "fd = os.open('big', os.O_RDWR | os.O_CREAT, 0o600)\n"
                  "os.write(fd, b'x' * 6291456)\n"
                  "libc = ctypes.CDLL(None)\n"
                  "libc.mmap.restype = ctypes.c_void_p\n"
                  "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,"
                  " ctypes.c_long]\n"
                  "assert libc.mmap(None, 6291456, 3, 1, fd, 0) not in (None, ctypes.c_void_p(-1).value)\n"
                  "os.close(fd)\n"
                  "os.unlink('big')\n"
                  "time.sleep(600)\n")
        # nor one written to /tmp: a job's /tmp and /var/tmp are its own, in its dir (a hostile test filled
        # the disk through the host's, and another user's job was stopped for it)
        # (not where the data dir is itself below /tmp or /var/tmp, as a worktree in /var/tmp is: the job
        # keeps the host's there, or its own dir would be hidden from it; nor where no mount namespace
        # may be made: it runs with the host's)
        real = os.path.realpath(d.data)
        private = subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0   # as kestreld
        if private and not any(real == t or real.startswith(t + "/") for t in ("/tmp", "/var/tmp")):
            marker = f"kestrel-test-{os.getpid()}"
            in_tmp = d.submit("--", "sh", "-c", f"head -c 6291456 /dev/zero > /tmp/{marker}; sleep 600", env=alice)
            job = d.wait(in_tmp, timeout=60)
            assert job["state"] == "FAILED" and "its files took 6 MiB" in job["reason"], job
            assert not os.path.exists(f"/tmp/{marker}") and not os.path.exists(f"/var/tmp/{marker}")
        held = d.submit("--", "/usr/bin/python3", "-c", mapped, env=alice)   # mapped, its descriptor closed
        job = d.wait(held, timeout=60)
        assert job["state"] == "FAILED" and "its files took 6 MiB" in job["reason"], job
        deep = d.submit("--", "sh", "-c", "mkdir -p $(printf 'a/%.0s' $(seq 300)); sleep 600", env=alice)
        job = d.wait(deep, timeout=60)
        assert job["state"] == "FAILED" and "its files nest deeper than 256 folders" in job["reason"], job
        small = d.submit("--", "sh", "-c", "head -c 1048576 /dev/zero > f; sleep 4", env=alice)
        assert d.wait(small)["state"] == "SUCCEEDED"
        # a finished job's dir is root's: the account's later jobs cannot write there, unmeasured (a
        # hostile test filled the disk through one, and another user's job was stopped for it)
        jobdir = d.data / "jobs" / str(small)
        assert jobdir.stat().st_uid == 0 and stat.S_IMODE(jobdir.stat().st_mode) == 0o700
        sneak = d.submit("--", "sh", "-c", f"echo x > {jobdir}/work/f2 || echo refused", env=alice)
        assert d.wait(sneak)["state"] == "SUCCEEDED" and "refused" in d.cli("logs", str(sneak)).stdout
        again = d.api("POST", f"/api/v1/jobs/{small}/rerun", {}, token=alice_token)
        assert again[0] in (200, 201) and d.wait(small)["state"] == "SUCCEEDED", again   # handed back to it
    finally:
        d.stop()


def test_below_the_disks_floor_jobs_output_and_metrics_are_not_stored(small_fs):
    """Each job's log has --max-log-bytes and its metrics --max-metric-points, but a user's many jobs
    together could fill the catalog's disk, and then no one's job could end or token be made. Below the
    data disk's floor (a fiftieth) a job's output is dropped, its log saying so once, and a metric
    report is 507; so are a new job, a priority's change and a model's settings (a hostile test filled
    the disk to its last byte with submitted and cancelled jobs). All this below half the floor: one
    user's chunks stop at the whole floor, and others still submit (the next test). Job ends and
    tokens go on. With room again, all are stored."""
    d = Daemon(small_fs / "k", "--gpus", "0")
    try:
        jid = d.submit("--", "sh", "-c", "while [ ! -e go ]; do sleep 0.1; done; for i in 1 2 3; do echo lost-$i; done")
        queued = d.submit("--pool", "nowhere", "--", "true")
        d.wait_state(jid, "RUNNING")
        free = os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
        ballast = small_fs / "ballast"
        ballast.write_bytes(b"\0" * (free - (160 << 10)))   # 160 KiB left: the floor of 24 MiB is 491 KiB, its half 245
        (d.data / "jobs" / str(jid) / "work" / "go").write_text("")
        assert d.wait(jid, timeout=60)["state"] == "SUCCEEDED"
        out = d.cli("logs", str(jid)).stdout
        assert "lost-" not in out and out.count("the job's output is dropped while the data disk") == 1, out
        metric = {"metrics": [{"name": "loss", "step": 1, "value": 1}]}
        for method, path, body in (("POST", f"/api/v1/jobs/{jid}/metrics", metric),
                                   ("POST", "/api/v1/jobs", {"argv": ["true"]}),
                                   ("POST", f"/api/v1/jobs/{queued}/priority", {"priority": "high"}),
                                   ("POST", "/api/v1/models/admin/m/settings", {"visibility": "private"})):
            status, answer = d.api(method, path, body)
            assert status == 507 and "floor" in answer["message"], (path, status, answer)
        assert d.api("POST", "/api/v1/tokens", {"user": "carol"})[0] == 201
        ballast.unlink()
        again = d.submit("--", "echo", "kept")
        assert d.wait(again)["state"] == "SUCCEEDED" and "kept" in d.cli("logs", str(again)).stdout
        assert d.api("POST", f"/api/v1/jobs/{jid}/metrics", metric)[0] == 200
        assert d.api("POST", f"/api/v1/jobs/{queued}/priority", {"priority": "high"})[0] == 200
    finally:
        d.stop()


def test_a_full_store_is_a_packs_answer_whatever_follows_it(small_fs, tmp_path):
    """A pack of one run has its chunks written on the run's helper thread, up to 15 behind the thread
    that receives and checks the next ones (4 under a small --max-upload-memory), which writes some of
    them itself when the helper is that far behind, or at the pack's end. The first write the
    full disk refuses is the pack's answer, 507 'No space left', though the pack then ends in the
    middle of a chunk, which the receiving thread finds first (alone, a 400): the store's failure comes
    first in the pack. Nothing half-written is left, and kestreld goes on."""
    d = Daemon(small_fs / "k", "--gpus", "0")
    try:
        room = os.statvfs(small_fs)
        fill = room.f_bavail * room.f_frsize - (15 << 19)   # 7.5 MiB left: the 8th chunk, the last, fails
        (small_fs / "filler").write_bytes(b"\0" * max(0, fill))
        chunks = [os.urandom(1 << 20) for _ in range(8)]
        body = b"".join(hashlib.sha256(c).digest() + struct.pack(">I", len(c)) + c for c in chunks)
        body += hashlib.sha256(b"next").digest() + struct.pack(">I", 1000) + b"cut"   # ends mid-chunk
        req = urllib.request.Request(f"{d.url}/api/v1/chunks/pack?run={'ab' * 16}&at=0", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {d.token}",
                                              "Content-Type": "application/octet-stream"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, answer = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, answer = e.code, e.read()
        assert status == 507 and b"No space left" in answer, (status, answer)
        leftovers = [p for p in (d.data / "repo").rglob("*") if ".tmp." in p.name]
        assert leftovers == [], leftovers
        (small_fs / "filler").unlink()
        assert d.api("GET", "/healthz")[0] == 200
    finally:
        d.stop()


def test_one_users_chunks_leave_the_disk_room_for_everyone_elses_jobs(small_fs, tmp_path):
    """bob's packs, never committed, filled the data disk: every other user's submit and token then
    failed, 'database or disk is full' (a hostile test). Chunks stop a fiftieth of the disk short of
    full (507, as a full disk), and alice still gets a token, submits, and her job's end is recorded."""
    d = Daemon(small_fs / "k", "--gpus", "0")
    try:
        bob = d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]

        def pack(sizes):
            chunks = [os.urandom(n) for n in sizes]
            body = b"".join(hashlib.sha256(c).digest() + struct.pack(">I", len(c)) + c for c in chunks)
            req = urllib.request.Request(f"{d.url}/api/v1/chunks/pack", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {bob}",
                                                  "Content-Type": "application/octet-stream"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        (tmp_path / "x").write_bytes(b"x")   # a chunk stored before the disk fills (see below)
        d.cli("push", "admin/x", str(tmp_path / "x"))
        answers = []
        for big in (True, False):   # 1 MiB chunks until refused, then 4 KiB ones: the floor holds for both
            for _ in range(4096):
                status, answer = pack([1 << 20] * 2 if big else [4096] * 16)
                if status != 200:
                    break
            answers.append((status, answer))
        status, body = d.api("POST", "/api/v1/tokens", {"user": "alice"})
        assert status == 201, body
        jid = d.submit("--", "true", env=d.env(KESTREL_TOKEN=body["token"]))
        assert d.wait(jid)["state"] == "SUCCEEDED"
        assert d.api("GET", "/healthz")[0] == 200
        for status, answer in answers:
            assert status == 507 and b"keeps its last" in answer and b"No space left" in answer, (status, answer)
        # nor does a commit's manifest of chunks stored already go below it (a second hostile test: a
        # directory of 2,500 alike files took the disk to 396 KiB, 20,000 filled it)
        same = tmp_path / "same"
        same.mkdir()
        for i in range(2500):
            (same / f"f{i:05d}").write_bytes(b"x")
        r = d.cli("push", "admin/same", str(same), check=False)
        assert r.returncode != 0 and "the version: the data disk keeps its last" in r.stderr, r.stderr
        assert d.api("GET", "/api/v1/models/admin/same/versions")[0] == 404
    finally:
        d.stop()


def test_kill_9_during_pushes_and_jobs_loses_nothing(daemon, tmp_path):
    """20 rounds of kill -9 while a push commits and jobs start, run and end: every push that said
    it succeeded is still there and pulls, no model name is left without a version, no partial
    version is listed, and every job submitted reaches an end (none is left RUNNING)."""
    d = daemon("--gpus", "0", "--max-jobs", "4")
    f = tmp_path / "f.bin"
    committed, jobs = {}, []
    for round_ in range(20):
        data = os.urandom(256 << 10)
        f.write_bytes(data)
        jobs += [d.submit("--", "sh", "-c", f"sleep 0.{round_ % 4}; echo round {round_}") for _ in range(2)]
        if round_ == 10:   # one kill certainly lands while a job runs, whatever the machine's speed
            jobs.append(d.submit("--", "sh", "-c", "sleep 3; echo long"))
            d.wait_state(jobs[-1], "RUNNING")
        if round_ == 0:    # and one certainly before a push has begun
            d.proc.kill()
        p = subprocess.Popen([os.environ["KESTREL_CLI"], "push", f"admin/m{round_}", str(f)],
                             env=d.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if round_ == 19:   # and one certainly after a commit
            p.wait()
        time.sleep(0.008 * round_)   # 0 to 150 ms: before, during and after the commit
        d.proc.kill()
        d.proc.wait()
        if p.wait() == 0:
            committed[f"admin/m{round_}"] = data
        d.restart()
        names = d.api("GET", "/api/v1/models")[1]["names"]
        for n in names:   # every name listed has a version that pulls
            status, body = d.api("GET", f"/api/v1/models/{n}/versions")
            assert status == 200 and body["versions"], (n, body)
            assert d.cli("pull", n, "-o", str(tmp_path / "out")).returncode == 0
        for n, want in committed.items():   # and every push that reported success is one of them
            assert n in names, (n, names)
            d.cli("pull", n, "-o", str(tmp_path / "got"))
            assert (tmp_path / "got").read_bytes() == want, n
    for jid in jobs:   # a job killed with its daemon is requeued and runs again, or ends: never stuck
        j = d.wait(jid, timeout=120)
        assert j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), j
    listed = {j["id"] for j in d.api("GET", "/api/v1/jobs?page_size=1000")[1]["jobs"]}
    assert set(jobs) <= listed
    assert not [j for j in d.api("GET", "/api/v1/jobs?state=RUNNING")[1].get("jobs", [])]
    assert committed and len(committed) < 20, "the kills should land both before and after some commits"
    restarts = [d.api("GET", f"/api/v1/jobs/{x}")[1]["restart_count"] for x in jobs]
    assert max(restarts) > 0, "some kill should land while a job runs"


def test_a_second_kestreld_on_the_same_data_dir_is_refused_and_changes_nothing(daemon, tmp_path):
    """Two daemons on one data dir would each take the other's running jobs for orphans. The second
    is refused, naming the first's pid, before it touches anything: the first's job keeps running
    (not requeued), the lock file still names the first, no port file is written. A kill -9 frees
    the lock (a job still running from before does not hold it): a restart after a crash needs no
    cleaning up."""
    d = daemon("--gpus", "0")
    jid = d.submit("--", "sleep", "60")
    d.wait_state(jid, "RUNNING")
    second = subprocess.run([os.environ["KESTRELD"], "--port", "0", "--data-dir", str(d.data), "--port-file",
                             str(tmp_path / "port2")], capture_output=True, text=True, timeout=30)
    assert second.returncode == 1, second
    assert f"{d.data} is in use by another kestreld (pid {d.proc.pid})" in second.stderr, second.stderr
    assert not (tmp_path / "port2").exists()
    job = d.job(jid)   # a second daemon that ran would have taken it for an orphan and requeued it
    assert job["state"] == "RUNNING" and job["restart_count"] == 0, job
    assert (d.data / "kestreld.lock").read_text().strip() == str(d.proc.pid)
    assert (d.data / "kestreld.lock").stat().st_mode & 0o777 == 0o600   # no one else may write it
    d.proc.kill()   # the job's sleep outlives its daemon: it must not hold the lock
    d.proc.wait()
    # ... but a child of the killed daemon between its fork and its exec does, for a moment (seen
    # once in test_faults' kill -9 rounds): a lock held by no live process named in the file is
    # waited for (here 1 s), not taken for another kestreld
    holder = subprocess.Popen(["flock", "-x", str(d.data / "kestreld.lock"), "sleep", "1"])
    time.sleep(0.3)
    assert holder.poll() is None
    d.restart()
    holder.wait()
    assert (d.data / "kestreld.lock").read_text().strip() == str(d.proc.pid)
    assert d.api("GET", f"/api/v1/jobs/{jid}")[0] == 200
    d.cli("cancel", str(jid))


def _catalog_process(d, jid, pid=None, start=None):
    """The catalog's record of job jid's process group (pid, start time), rewritten where given (the
    daemon is down)."""
    import sqlite3
    db = sqlite3.connect(d.data / "catalog.db")
    try:
        if pid is not None:
            db.execute("UPDATE jobs SET pid = ? WHERE id = ?", (pid, jid))
        if start is not None:
            db.execute("UPDATE jobs SET pid_start = ? WHERE id = ?", (start, jid))
        db.commit()
        return db.execute("SELECT pid, pid_start FROM jobs WHERE id = ?", (jid,)).fetchone()
    finally:
        db.close()


def _command_line(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:   # gone (maybe between two looks)
        return b""


def test_a_job_left_by_a_killed_daemon_is_stopped_even_as_an_older_daemon_recorded_it(daemon):
    """A kestreld before 2026-12-05 recorded every start time as 0 (it read the wrong field of
    /proc/PID/stat). The next daemon knows its job's group by the job's KESTREL_CHECKPOINT_DIR and
    stops it before running the job again."""
    d = daemon("--gpus", "0")
    jid = d.submit("--", "sh", "-c", "echo run $KESTREL_RESTART_COUNT; sleep 79")
    d.wait_for_line(jid, "run 0")
    old = processes("^sleep 79$")
    d.proc.kill()
    d.proc.wait()
    pid, start = _catalog_process(d, jid)
    # its leader's start time, as /proc says it (field 22; field 21 is always 0)
    assert pid > 1 and start == int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    _catalog_process(d, jid, start=0)
    d.restart()
    deadline = time.time() + 10
    while any(_command_line(p) for p in [pid, *old]):   # gone, or a zombie (no command line) until reaped
        assert time.time() < deadline, "the old run outlived the restart"
        time.sleep(0.1)
    # by its cgroup where kestreld has them (job_cgroup.c), else by its marker (exec_reap.c)
    assert re.search(rf"job {jid}: stopped \d+ process(es)? its run left|job-{jid}: stopped \d+ process(es)? left by the "
                     "daemon before", (d.root / "kestreld.log").read_text())
    assert d.wait_state(jid, "RUNNING")["restart_count"] == 1
    d.cli("cancel", str(jid))


def test_a_run_whose_pids_were_never_recorded_is_stopped_all_the_same(daemon):
    """kestreld killed between starting a run and recording its pids (the catalog's pid still 0, a
    gang's ranks file empty: a hostile test hit it with a kill -9 5-60 ms after a start): the next
    daemon finds what the run left by the job's KESTREL_CHECKPOINT_DIR, background children
    included, and stops it before the job runs again."""
    d = daemon("--gpus", "2")
    script = ('echo run $RANK $KESTREL_RESTART_COUNT; '
              'if [ $KESTREL_RESTART_COUNT = 0 ]; then sleep 87 & sleep 89; else sleep 60; fi')
    jid = d.submit("--replicas", "2", "--", "sh", "-c", script)
    processes("^sleep 8[79]$", 4)
    d.proc.kill()
    d.proc.wait()
    _catalog_process(d, jid, pid=0, start=0)   # as if it died before writing them
    (d.data / "gangs" / str(jid)).write_text("")
    d.restart()
    assert no_process("^sleep 8[79]$"), "the first run's processes outlived the restart"
    assert d.wait_state(jid, "RUNNING")["restart_count"] == 1
    d.cli("cancel", str(jid))


def test_a_restart_leaves_alone_a_process_that_took_the_pid_of_a_job_gone(daemon):
    """A job's process ended while kestreld was down, and its pid went to another program (here
    faked by writing that program's pid into the catalog): the next daemon stops nothing of it (the
    start time differs and nothing of the job is in its group). Before 2026-12-05 every live process
    passed for the job's and its group was killed."""
    d = daemon("--gpus", "0")
    jid = d.submit("--", "sleep", "81")
    d.wait_state(jid, "RUNNING")
    d.proc.kill()
    d.proc.wait()
    subprocess.run(["pkill", "-f", "^sleep 81$"])
    other = subprocess.Popen(["sleep", "83"], start_new_session=True)   # a group of its own, as a job's
    try:
        _catalog_process(d, jid, pid=other.pid)
        d.restart()
        assert d.wait_state(jid, "RUNNING")["restart_count"] == 1   # recovered (before it serves) and run again
        assert other.poll() is None, "kestreld killed a process that was not its job's"
        assert f"process group {other.pid} lives, but neither" in (d.root / "kestreld.log").read_text()
    finally:
        other.kill()
        other.wait()
    d.cli("cancel", str(jid))


def test_a_pull_onto_a_full_disk_fails_cleanly(daemon, small_fs, tmp_path):
    """The pull's placer thread writes what arrives: a disk that fills up under it is the error the
    caller sees (a file and a directory), and nothing half-written is left where the pull wrote."""
    d = daemon("--gpus", "0")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(32 << 20))    # more than the filesystem holds
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(2):
        (tree / f"part{i}.bin").write_bytes(os.urandom(16 << 20))
    d.cli("push", "admin/big", str(big))
    d.cli("push", "admin/tree", str(tree))
    env = d.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    for ref, dest in (("admin/big", small_fs / "big.bin"), ("admin/tree", small_fs / "tree")):
        r = d.cli("pull", ref, "--dest", str(dest), check=False, env=env)
        assert r.returncode != 0 and "No space left" in r.stderr, r.stderr
        assert list(small_fs.iterdir()) == [], list(small_fs.iterdir())   # no temp file, no half directory
    r = d.cli("pull", "admin/big", "--dest", str(tmp_path / "back.bin"), env=env)
    assert (tmp_path / "back.bin").read_bytes() == big.read_bytes()


def test_two_kestrelds_started_at_once_on_one_data_dir(tmp_path):
    """Started at the same instant: exactly one runs, and the other names its pid (the pid is read
    again while the winner has not written it yet)."""
    for round_ in range(5):
        data = tmp_path / f"data{round_}"
        procs = [subprocess.Popen([os.environ["KESTRELD"], "--port", "0", "--gpus", "0", "--data-dir", str(data),
                                   "--port-file", str(tmp_path / f"port{round_}.{i}")],
                                  stderr=subprocess.PIPE, text=True) for i in range(2)]
        deadline = time.time() + 30
        while all(p.poll() is None for p in procs) and time.time() < deadline:
            time.sleep(0.01)
        lost = [p for p in procs if p.poll() is not None]
        won = [p for p in procs if p.poll() is None]
        try:
            assert len(lost) == 1 and len(won) == 1, [p.returncode for p in procs]
            err = lost[0].communicate(timeout=10)[1]
            assert lost[0].returncode == 1 and f"in use by another kestreld (pid {won[0].pid})" in err, err
        finally:
            for p in won:
                p.terminate()
                p.wait(timeout=30)


def test_a_pull_that_fills_the_disk_takes_back_what_only_the_pull_cache_holds(small_fs, daemon, tmp_path):
    """The pull cache keeps a hard link to each pulled file; once the user removes the file, the
    cache alone holds its bytes (up to KESTREL_CACHE_MAX, 10 GiB). A pull that then ran out of space
    on that disk failed though the cache held what it needed (a hostile round). Such packs now go
    and the pull runs once more; a pack whose file is still there (no space to win) stays."""
    d = daemon()
    a, b, kept = tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "k.bin"
    a.write_bytes(os.urandom(10 << 20))
    b.write_bytes(os.urandom(16 << 20))
    kept.write_bytes(os.urandom(1 << 20))
    env = d.env(KESTREL_CACHE_DIR=str(small_fs / "cache"))
    for name, src in (("admin/a", a), ("admin/b", b), ("admin/k", kept)):
        d.cli("push", name, str(src), env=env)
    d.cli("pull", "admin/k", str(small_fs / "k.bin"), env=env)    # stays where it was pulled
    d.cli("pull", "admin/a", str(small_fs / "a.bin"), env=env)
    (small_fs / "a.bin").unlink()                                  # now only the cache holds its 10 MiB
    r = d.cli("pull", "admin/b", str(small_fs / "b.bin"), env=env, check=False)   # 16 MiB: 24 - 11 = 13 free
    assert r.returncode == 0, r.stderr
    assert (small_fs / "b.bin").read_bytes() == b.read_bytes()
    assert (small_fs / "k.bin").stat().st_nlink == 2               # its pack was not taken
    assert not list((small_fs / "cache").glob("**/*.kestrel-tmp*")) and not list(small_fs.glob("*.kestrel-tmp*"))


def test_a_push_or_pull_whose_temp_space_fills_fails_cleanly(daemon, tmp_path):
    """A push keeps its chunk and file lists in an unlinked temp file in TMPDIR (lib/repo/chunk_spool.h),
    not in memory. Where TMPDIR fills up, the push says so and commits nothing, and the space comes
    back at once (the file has no name); with room, the same push goes through. A pull's manifest
    goes there too, with the same outcome."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0777", "tmpfs", str(tmp)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        tree = tmp_path / "tree"
        for i in range(3000):   # about 110 bytes of records a file: 330 KB, more than 64 KB
            (tree / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
            (tree / f"d{i % 10}" / f"f{i:04d}").write_bytes(b"%d" % i)
        d = daemon("--gpus", "0")
        r = d.cli("push", "admin/tree", str(tree), check=False, env=d.env(TMPDIR=str(tmp)))
        assert r.returncode != 0 and "push's temp list" in r.stderr and "No space left" in r.stderr, r.stderr
        assert d.api("GET", "/api/v1/models")[1]["names"] == []     # no version, no name
        assert list(tmp.iterdir()) == [] and os.statvfs(tmp).f_bfree == os.statvfs(tmp).f_blocks   # nothing kept
        assert "pushed admin/tree@1" in d.cli("push", "admin/tree", str(tree)).stdout
        # a pull keeps the manifest in TMPDIR too (lib/repo/manifest_file.h): where it does not fit,
        # the pull says so and leaves nothing at dest or beside it; with room, it goes through
        out = tmp_path / "out"
        r = d.cli("pull", "admin/tree", str(out), check=False, env=d.env(TMPDIR=str(tmp)))
        assert r.returncode != 0 and "manifest of admin/tree in a temp file" in r.stderr and "No space left" in r.stderr, r.stderr
        assert not out.exists() and not [p.name for p in tmp_path.iterdir() if ".kestrel-" in p.name]
        assert list(tmp.iterdir()) == [] and os.statvfs(tmp).f_bfree == os.statvfs(tmp).f_blocks
        d.cli("pull", "admin/tree", str(out))
        assert subprocess.run(["diff", "-r", str(tree), str(out)]).returncode == 0
    finally:
        subprocess.run(["umount", "-l", str(tmp)], check=False)


class _Huge(http.server.BaseHTTPRequestHandler):
    """Answers every GET 200 with a Content-Length far past any kestreld's, sends a little, then waits."""
    protocol_version = "HTTP/1.1"
    declared = 0
    gets = []

    def do_GET(self):
        type(self).gets.append(self.path)
        ctype = "application/x-protobuf" if "/versions/" in self.path else "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(self.declared))
        self.end_headers()
        try:
            self.wfile.write(b"\x0a\x06team/x" if ctype.endswith("protobuf") else b"{")
            self.wfile.flush()
            time.sleep(20)   # a client that believed the length would wait here
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("what", ["manifest", "listing"])
def test_an_answer_larger_than_any_kestreld_sends_is_refused_at_once(tmp_path, what):
    """Every answer the client takes has a bound (lib/http.c): a pull's manifest, written to a temp
    file, 4 GiB and 64 MiB (kestreld's largest --max-manifest and what it adds); an answer held in
    memory, 1 GiB. A server that declares more is refused as soon as it says so, with what was wrong,
    and not asked again; the pull leaves nothing at dest and its temp file goes with it."""
    _Huge.declared = (5 << 30) if what == "manifest" else (2 << 30)
    _Huge.gets = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Huge)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KESTREL_")}
        env.update(KESTREL_URL=f"http://127.0.0.1:{srv.server_address[1]}", KESTREL_TOKEN="t", HOME=str(tmp_path),
                   KESTREL_CACHE_DIR="", TMPDIR=str(tmp_path))
        args = ["pull", "team/x", str(tmp_path / "out")] if what == "manifest" else ["models"]
        t0 = time.monotonic()
        r = subprocess.run([KESTREL_CLI, *args], env=env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        srv.shutdown()
        srv.server_close()
    limit = "4160 MiB" if what == "manifest" else "1024 MiB"
    assert r.returncode != 0 and f"is larger than {limit}" in r.stderr, r.stderr
    assert took < 10, took            # not the 20 s the server would hold a believer for, nor a retry
    assert len(_Huge.gets) == 1, _Huge.gets
    assert [p.name for p in tmp_path.iterdir()] == []   # no dest, no temp file
