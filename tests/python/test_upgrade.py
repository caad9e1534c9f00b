"""Upgrades keep data: a data dir written by the first wave's kestreld opens in this one (catalog
migrated by PRAGMA user_version, files tightened to 0600, every old token still valid)."""
import json
import os
import pathlib
import sqlite3
import stat
import tarfile
import time

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
        assert [int(h["job_id"]) for l in hits.splitlines() for h in json.loads(l)["hits"]] == [int(jid)]
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
        # its versions list with their chunk counts (no N.listing then: read from the manifest, written now)
        listed = json.loads(d.cli("-o", "json", "models", "alice/m", env=d.env(KESTREL_TOKEN=alice)).stdout)
        assert listed["versions"] and all(int(v["chunk_count"]) > 0 for v in listed["versions"]), listed
        vdir = old_dir / "data" / "repo" / "models" / "alice" / "m" / "versions"
        assert {p.stem for p in vdir.glob("*.listing")} == {p.stem for p in vdir.glob("*.json")}
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
        assert c.execute("PRAGMA user_version").fetchone()[0] == 7
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE((old_dir / "data" / "repo").stat().st_mode) == 0o700
    # the store was migrated once to format 2: every manifest is Manifest's proto3 JSON now
    repo = old_dir / "data" / "repo"
    assert (repo / "format").read_text() == "2\n"
    manifests = list((repo / "models").rglob("versions/*.json"))
    assert manifests
    for m in manifests:
        doc = json.loads(m.read_text())
        assert doc["name"] and all(set(c) == {"digest", "size"} for c in doc["chunks"]), m


def test_a_newer_catalog_is_refused(old_dir):
    db = old_dir / "data" / "catalog.db"
    with sqlite3.connect(db) as c:   # a newer schema: a table gone, a column gone
        c.execute("PRAGMA user_version = 99")
        c.execute("DROP TABLE IF EXISTS metrics")
    with sqlite3.connect(db) as c:
        tables = sorted(r[0] for r in c.execute("SELECT name FROM sqlite_master"))
    with pytest.raises(RuntimeError, match="newer than this kestreld"):
        Daemon(old_dir, "--gpus", "0")
    with sqlite3.connect(db) as c:   # refused before anything was written: the schema not laid over it
        assert sorted(r[0] for r in c.execute("SELECT name FROM sqlite_master")) == tables
        assert c.execute("PRAGMA user_version").fetchone()[0] == 99


def test_a_data_dir_of_the_last_landed_kestreld_opens_with_search_metrics_and_policies(tmp_path):
    """tests/fixtures/v4-data.tar.gz: written by the landed kestreld before observability (catalog
    version 4): its job's old lines become searchable, its pool shows on /metrics, its params stay."""
    import urllib.request
    root = tmp_path / "v4"
    root.mkdir()
    with tarfile.open(ROOT / "tests" / "fixtures" / "v4-data.tar.gz") as t:
        t.extractall(root)
    db = root / "data" / "catalog.db"
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 4
    d = Daemon(root, "--gpus", "0")
    try:
        alice = (root / "alice.token").read_text().strip()
        jobs = d.api("GET", "/api/v1/jobs", token=alice)[1]["jobs"]
        assert [(j["spec"]["name"], j["spec"]["params"]) for j in jobs] == [("old", [{"key": "lr", "value": "0.01"}])]
        jid = int(jobs[0]["id"])
        deadline = time.time() + 20   # the migration queued the old lines; the indexer takes them in
        while True:
            hits = [h for l in d.cli("-o", "json", "logs", "--grep", "out of memory", check=False,
                                     env=d.env(KESTREL_TOKEN=alice)).stdout.splitlines() for h in json.loads(l)["hits"]]
            if hits or time.time() > deadline:
                break
            time.sleep(0.2)
        assert [(int(h["job_id"]), h["text"]) for h in hits] == [(jid, "RuntimeError: CUDA out of memory. "
                                                                         "Tried to allocate 1 GiB")]
        req = urllib.request.Request(d.url + "/metrics", headers={"Authorization": f"Bearer {d.token}"})
        assert 'kestrel_jobs{state="succeeded",pool="",class="normal"} 1' in urllib.request.urlopen(req).read().decode()
        assert json.loads(d.cli("-o", "json", "alerts", env=d.env(KESTREL_TOKEN=alice)).stdout) == {"alerts": []}
        out = tmp_path / "m.bin"
        d.cli("pull", "alice/m@production", "-o", str(out), env=d.env(KESTREL_TOKEN=alice))
        import hashlib
        assert hashlib.sha256(out.read_bytes()).hexdigest() == (root / "model.sha").read_text().strip()
        # a new job there meets the built-in policies
        new = json.loads(d.cli("-o", "json", "submit", "--", "sh", "-c", "echo 'loss: nan'; exit 1",
                               env=d.env(KESTREL_TOKEN=alice)).stdout)["id"]
        assert "nan-loss" in d.wait(new)["reason"]
    finally:
        assert d.stop() == 0
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 7
        # each log's budget counted as now: a line's bytes and 48 (migration 7)
        counted = dict(c.execute("SELECT job_id, bytes FROM log_stats"))
        true = dict(c.execute("SELECT job_id, SUM(length(CAST(text AS BLOB)) + 48 + 6 * (length(CAST(text AS BLOB))"
                              " - length(text))) FROM logs GROUP BY job_id"))
        assert counted[jid] == true[jid] > 0, (counted, true)


def test_a_data_dir_of_the_last_landed_kestreld_opens_with_chart_views_and_the_console(tmp_path):
    """tests/fixtures/v5-data.tar.gz: written by the landed kestreld before the console (catalog
    version 5), with a job of alice's holding 5,000 points of loss and 10 of val_loss: migration 6
    builds each series' chart view, and her old token logs in to the console."""
    import http.client
    root = tmp_path / "v5"
    root.mkdir()
    with tarfile.open(ROOT / "tests" / "fixtures" / "v5-data.tar.gz") as t:
        t.extractall(root)
    db = root / "data" / "catalog.db"
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 5
    d = Daemon(root, "--gpus", "0")
    try:
        alice = (root / "alice.token").read_text().strip()
        jid = d.api("GET", "/api/v1/jobs", token=alice)[1]["jobs"][0]["id"]
        status, full = d.api("GET", f"/api/v1/jobs/{jid}/metrics", token=alice)
        assert status == 200 and len(full["metrics"]) == 5010
        status, b = d.api("GET", f"/api/v1/jobs/{jid}/metrics?max_points=2000", token=alice)
        assert status == 200, b
        series = {s["name"]: (int(s["points"]), int(s["shown"])) for s in b["series"]}
        assert series["val_loss"] == (10, 10)
        points, shown = series["loss"]
        assert points == 5000 and 1000 <= shown <= 2001, series
        loss = [m for m in b["metrics"] if m["name"] == "loss"]
        steps = [int(m["step"]) for m in loss]
        assert steps[0] == 1 and steps[-1] == 5000 and steps == sorted(steps)   # spread over the run, newest kept
        assert abs(loss[-1]["value"] - 1 / 5000) < 1e-12
        # new points keep the view bounded
        pts = [{"name": "loss", "step": s, "value": 1.0 / s, "wall_time_ms": 0} for s in range(5001, 9001)]
        assert d.api("POST", f"/api/v1/jobs/{jid}/metrics", {"metrics": pts})[0] == 200
        b = d.api("GET", f"/api/v1/jobs/{jid}/metrics?max_points=2000&name=loss", token=alice)[1]
        assert int(b["series"][0]["points"]) == 9000 and 1000 <= int(b["series"][0]["shown"]) <= 2001
        assert int(b["metrics"][-1]["step"]) == 9000
        # the old token logs in to the console
        host, port = d.url.split("//")[1].split(":")
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        c.request("GET", "/?token=" + alice)
        r = c.getresponse()
        assert r.status == 303 and "kestrel_session=" in r.getheader("Set-Cookie")
    finally:
        assert d.stop() == 0
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 7
