"""Upgrades keep data: a data dir written by the first wave's kestreld opens in this one (catalog
migrated by PRAGMA user_version, files tightened to 0600, every old token still valid)."""
import json
import os
import pathlib
import sqlite3
import stat
import tarfile

import pytest

from conftest import Daemon

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "wave1-data.tar.gz"


@pytest.fixture
def old_dir(tmp_path):
    root = tmp_path / "old"
    root.mkdir()
    with tarfile.open(FIXTURE) as t:
        t.extractall(root)
    (root / "data").chmod(0o700)
    return root


def test_a_wave1_data_dir_opens_and_keeps_everything(old_dir, tmp_path):
    db = old_dir / "data" / "catalog.db"
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 0
    d = Daemon(old_dir, "--gpus", "0")
    try:
        alice = (old_dir / "alice.token").read_text().strip()
        # the old admin token is still an admin's; alice's still hers (write scope), team kept
        status, body = d.api("GET", "/api/v1/users/alice")
        assert status == 200 and body["team"] == "vision"
        status, jobs = d.api("GET", "/api/v1/jobs", token=alice)
        assert status == 200 and [j["spec"]["name"] for j in jobs["jobs"]] == ["old"]
        jid = jobs["jobs"][0]["id"]
        assert "hello-from-wave1" in d.cli("logs", jid).stdout
        # its old lines are in the search index (migration 5 indexed them), its pool on /metrics
        hits = d.cli("-o", "json", "logs", "--grep", "hello-from-wave1", env=d.env(KESTREL_TOKEN=alice)).stdout
        assert [json.loads(l)["job_id"] for l in hits.splitlines()] == [int(jid)]
        import urllib.request
        req = urllib.request.Request(d.url + "/metrics", headers={"Authorization": f"Bearer {d.token}"})
        expo = urllib.request.urlopen(req, timeout=30).read().decode()
        assert 'kestrel_jobs{state="succeeded",pool="",class="normal"} 1' in expo
        tokens = d.api("GET", "/api/v1/tokens")[1]["tokens"]
        assert {t["user"]: t["scope"] for t in tokens} == {"admin": "admin", "alice": "write"}
        # her model, pulled and verified; she still writes her namespace, and nobody else does
        out = tmp_path / "m.bin"
        d.cli("pull", "alice/m@production", "-o", str(out), env=d.env(KESTREL_TOKEN=alice))
        import hashlib
        assert hashlib.sha256(out.read_bytes()).hexdigest() == (old_dir / "model.sha").read_text().strip()
        assert d.cli("push", "alice/m", str(out), env=d.env(KESTREL_TOKEN=alice)).returncode == 0
        bob = d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]
        assert d.cli("push", "alice/m", str(out), env=d.env(KESTREL_TOKEN=bob), check=False).returncode != 0
        # the old job's dir (0755 then) is closed; alice's new jobs run as her identity when root
        assert stat.S_IMODE((old_dir / "data" / "jobs" / jid).stat().st_mode) == 0o700
        new = json.loads(d.cli("-o", "json", "submit", "--", "sh", "-c", "id -un",
                               env=d.env(KESTREL_TOKEN=alice)).stdout)["id"]
        assert d.wait(new)["state"] == "SUCCEEDED"
        if os.geteuid() == 0:
            assert "kestrel-alice" in d.cli("logs", new).stdout
    finally:
        assert d.stop() == 0
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 5
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE((old_dir / "data" / "repo").stat().st_mode) == 0o700


def test_a_newer_catalog_is_refused(old_dir):
    db = old_dir / "data" / "catalog.db"
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA user_version = 99")
    with pytest.raises(RuntimeError, match="newer than this kestreld"):
        Daemon(old_dir, "--gpus", "0")
