"""kestrel admin backup DIR: a consistent online copy while jobs run and pushes land; kestreld
starts on the copy and every version in it pulls back verified."""
import hashlib
import json
import os
import threading
import time

from conftest import Daemon


def test_an_online_backup_serves_every_version(daemon, tmp_path):
    d = daemon("--gpus", "0")
    src = tmp_path / "src"
    src.mkdir()
    pushed, stop, errors = {}, threading.Event(), []

    def pusher():   # pushes land while the backup runs
        i = 0
        while not stop.is_set() and i < 200:
            f = src / f"m{i}.bin"
            f.write_bytes(os.urandom(20000 + i))
            r = d.cli("push", "admin/stream", str(f), check=False)
            if r.returncode:
                errors.append(r.stderr)
            else:
                # "pushed admin/stream@N (SIZE, NEW new)"
                pushed[int(r.stdout.split("@")[1].split()[0])] = hashlib.sha256(f.read_bytes()).hexdigest()
            i += 1

    job = d.submit("--", "sh", "-c", "for i in $(seq 50); do echo line $i; sleep 0.05; done")
    t = threading.Thread(target=pusher)
    t.start()
    deadline = time.time() + 60
    while len(pushed) < 5 and not errors:
        assert time.time() < deadline, "the pushes never landed"
        time.sleep(0.02)
    (tmp_path / "c").mkdir()
    backup = tmp_path / "c" / "data"          # where a Daemon rooted at c keeps its data
    out = d.cli("admin", "backup", str(backup))
    assert "backed up into" in out.stdout
    stop.set()
    t.join()
    assert not errors, errors
    # refused: a second backup into the same place, a relative path, a non-admin
    assert d.cli("admin", "backup", str(backup), check=False).returncode == 1
    status, _ = d.api("POST", "/api/v1/admin/backup", {"dir": "relative"})
    assert status == 400
    for inside in (d.data / "repo" / "models" / "zz", d.data / "copy"):   # it would copy itself
        status, body = d.api("POST", "/api/v1/admin/backup", {"dir": str(inside)})
        assert status == 400 and "inside the data dir" in body["message"] and not inside.exists(), body
    assert "zz" not in d.cli("models").stdout
    alice = d.api("POST", "/api/v1/tokens", {"user": "alice"})[1]["token"]
    status, _ = d.api("POST", "/api/v1/admin/backup", {"dir": str(tmp_path / "x")}, token=alice)
    assert status == 403 and not (tmp_path / "x").exists()
    d.wait(job)

    copy = Daemon(tmp_path / "c", "--gpus", "0")
    try:
        status, body = copy.api("GET", "/api/v1/models/admin/stream/versions")
        versions = [int(v["version"]) for v in body["versions"]]
        assert status == 200 and len(versions) >= 5
        for v in versions:   # every version in the copy is whole
            dst = tmp_path / f"pulled{v}"
            copy.cli("pull", f"admin/stream@{v}", "-o", str(dst))
            assert hashlib.sha256(dst.read_bytes()).hexdigest() == pushed[v]
        status, body = copy.api("GET", f"/api/v1/jobs/{job}")   # the catalog came along: a job running then
        assert status == 200 and body["spec"]["argv"][0] == "sh"    # is requeued on the copy, as after a crash
    finally:
        assert copy.stop() == 0


def test_a_copy_started_on_the_same_host_leaves_the_live_jobs_alone(daemon, tmp_path):
    """The copy's catalog holds the live daemon's pids and start times; it must not stop those runs
    (a hostile test: the copy killed them, and the live daemon failed them)."""
    d = daemon("--gpus", "0")
    job = d.submit("--", "sh", "-c", "echo started; sleep 60")
    d.wait_state(job, "RUNNING")
    deadline = time.time() + 20
    while "started" not in d.cli("logs", str(job)).stdout:
        assert time.time() < deadline
        time.sleep(0.05)
    (tmp_path / "c").mkdir()
    d.cli("admin", "backup", str(tmp_path / "c" / "data"))
    copy = Daemon(tmp_path / "c", "--gpus", "0")
    try:
        deadline = time.time() + 5
        while "job of another kestreld" not in (tmp_path / "c" / "kestreld.log").read_text():
            assert time.time() < deadline, (tmp_path / "c" / "kestreld.log").read_text()
            time.sleep(0.05)
        time.sleep(1)   # a run killed would be FAILED by now ("killed by signal 9")
        assert d.job(job)["state"] == "RUNNING", d.job(job)
    finally:
        copy.cli("cancel", str(job), check=False)
        assert copy.stop() == 0
        d.cli("cancel", str(job))


def test_a_repository_without_its_catalog_is_refused_not_opened_to_all(daemon, tmp_path):
    """Who may read a model is in the catalog: a repository restored without it would have made every
    private model readable by every user (a hostile test). kestreld refuses to start, and says why."""
    import pytest
    d = daemon("--gpus", "0")
    f = tmp_path / "secret.bin"
    f.write_bytes(os.urandom(3000))
    d.cli("push", "admin/secret", str(f))
    d.cli("model", "set", "admin/secret", "--visibility", "private")
    assert d.stop() == 0
    for p in d.data.glob("catalog.db*"):
        p.unlink()
    (d.data / "admin.token").unlink()
    with pytest.raises(RuntimeError, match="catalog.db is missing"):
        Daemon(d.root, "--gpus", "0")
    assert not (d.data / "catalog.db").exists() and (d.data / "repo" / "models" / "admin").is_dir()
    (d.data / "catalog.db").write_bytes(b"")   # a copy cut short: SQLite would make a new one of it
    with pytest.raises(RuntimeError, match="catalog.db is missing or empty"):
        Daemon(d.root, "--gpus", "0")
    assert (d.data / "catalog.db").stat().st_size == 0
