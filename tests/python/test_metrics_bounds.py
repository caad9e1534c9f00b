"""A job's metrics against the real kestreld: what a job may hold, when a user may report, and a
read past what one answer holds said as such (hostile tests)."""


def test_a_jobs_metrics_have_bounds_and_a_time(daemon):
    """A user's job stored metric points without end, in names without end, and for jobs long ended (a
    hostile test: 600,000 points in 10 s took the catalog from 27 MB to 673 MB). Now a job holds at
    most --max-metric-points points in --max-metric-series names (a report past either: 413, none of
    it stored), and a user reports while the job runs (and 5 minutes after); an admin may backfill."""
    d = daemon("--gpus", "0", "--max-metric-points", "100", "--max-metric-series", "3")
    status, body = d.api("POST", "/api/v1/tokens", {"user": "mallory"})
    mal = body["token"]
    run = d.submit("--", "sleep", "60", env=d.env(KESTREL_TOKEN=mal))
    d.wait_state(run, "RUNNING")
    post = lambda jid, pts, tok=mal: d.api("POST", f"/api/v1/jobs/{jid}/metrics", {"metrics": pts}, token=tok)  # noqa: E731
    points = lambda name, n, at=0: [{"name": name, "step": at + i, "value": 0.5} for i in range(n)]  # noqa: E731
    assert post(run, points("loss", 80))[0] == 200
    status, body = post(run, points("loss", 30, 80))
    assert status == 413 and "--max-metric-points" in body["message"], body
    assert post(run, points("acc", 10) + points("lr", 5))[0] == 200                        # 95 in 3 names
    status, body = post(run, points("extra", 1))
    assert status == 413 and "--max-metric-series" in body["message"], body
    got = d.api("GET", f"/api/v1/jobs/{run}/metrics", token=mal)[1]["metrics"]
    assert len(got) == 95 and {m["name"] for m in got} == {"loss", "acc", "lr"}           # nothing of the refused
    queued = d.submit("--pool", "nowhere", "--", "true", env=d.env(KESTREL_TOKEN=mal))   # never runs
    status, body = post(queued, points("loss", 1))
    assert status == 409 and "not running" in body["message"], body
    assert post(queued, points("loss", 1), tok=d.token)[0] == 200                         # an admin's backfill
    d.cli("cancel", str(run))


def test_a_whole_read_of_more_than_100000_points_says_so(daemon):
    """GET .../metrics without max_points answers at most 100,000 points: past them it stopped in
    silence, and kestrel metrics showed a run that ended early (a hostile test). more_points says so,
    and the CLI with it; a name of fewer points comes whole."""
    d = daemon("--gpus", "0")
    jid = d.submit("--", "true")
    d.wait(jid)
    for at in range(0, 100010, 10000):
        pts = [{"name": "loss", "step": s, "value": 1.0} for s in range(at, min(at + 10000, 100010))]
        assert d.api("POST", f"/api/v1/jobs/{jid}/metrics", {"metrics": pts})[0] == 200   # an admin's backfill
    d.api("POST", f"/api/v1/jobs/{jid}/metrics", {"metrics": [{"name": "acc", "step": 1, "value": 1.0}]})
    status, b = d.api("GET", f"/api/v1/jobs/{jid}/metrics")
    assert status == 200 and len(b["metrics"]) == 100000 and b.get("more_points") is True, len(b["metrics"])
    status, b = d.api("GET", f"/api/v1/jobs/{jid}/metrics?name=acc")
    assert status == 200 and len(b["metrics"]) == 1 and not b.get("more_points")
    p = d.cli("metrics", "--flat", str(jid))
    assert "holds more points than the 100,000 shown" in p.stderr, p.stderr[-500:]
