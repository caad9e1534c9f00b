"""The web console's cost: every API call its pages make, with 10,000 jobs and a job of 100,000
metric points in the catalog, beside GET /healthz of the same run; the first paint of the console
and the render of 100,000 points in headless Chromium.

    python bench/console.py KESTRELD   (make bench-console)
"""
import os
import pathlib
import shutil
import sqlite3
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "python"))
from browser import Browser  # noqa: E402  (the test's own Chromium driver)
from kestreld_proc import call, start, stop  # noqa: E402

POINTS = 100_000
JOBS = 10_000


def seed(kestreld, root, nodes):
    """A catalog as a busy team leaves it: 10,000 jobs, 100 waiting, one with 100,000 points."""
    proc, url, token = start(kestreld, root, *nodes)
    blocker = call(url + "/api/v1/jobs", token, "POST", {"argv": ["sleep", "3600"], "name": "blocker"})["id"]
    waiting = call(url + "/api/v1/jobs", token, "POST", {"argv": ["true"], "name": "waits", "after_ok": [blocker],
                                                          "params": [{"key": "lr", "value": "0.01"}]})["id"]
    done = call(url + "/api/v1/jobs", token, "POST", {"argv": ["true"], "name": "done",
                                                       "params": [{"key": "lr", "value": "0.1"}]})["id"]
    while (state := call(f"{url}/api/v1/jobs/{done}", token)["state"]) not in ("SUCCEEDED", "FAILED"):
        time.sleep(0.1)
    if state != "SUCCEEDED":
        raise SystemExit(f"the seed job {state}: " + call(f"{url}/api/v1/jobs/{done}", token)["reason"])
    # the blocker stays: kestreld's restart queues it again and the 100 waiting jobs keep waiting
    stop(proc)
    db = sqlite3.connect(root / "data" / "catalog.db")
    cols = [r[1] for r in db.execute("PRAGMA table_info(jobs)") if r[1] != "id"]
    final = ", ".join("(abs(random()) % 3) + 3" if c == "state" else c for c in cols)
    for i in range(JOBS - 3):
        src = waiting if i < 100 else done
        db.execute(f"INSERT INTO jobs({', '.join(cols)}) SELECT {final if src == done else ', '.join(cols)} "
                   "FROM jobs WHERE id = ?", (src,))
    db.execute("UPDATE jobs SET state = 1 WHERE id = ?", (waiting,))
    big = db.execute("SELECT MAX(id) FROM jobs").fetchone()[0]
    db.execute("UPDATE jobs SET state = 3 WHERE id = ?", (big,))
    db.commit()
    n = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    db.close()
    return n, big


def bare_insert_rate(path, now):
    db = sqlite3.connect(path)
    db.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "CREATE TABLE metrics(job_id INTEGER NOT NULL, name TEXT NOT NULL, step INTEGER NOT NULL,"
                     " value REAL NOT NULL, wall_ms INTEGER NOT NULL);"
                     "CREATE INDEX metrics_job ON metrics(job_id, name, step);")
    t = time.perf_counter()
    for lo in range(1, POINTS + 1, 10000):
        with db:
            db.executemany("INSERT INTO metrics VALUES(1, 'loss', ?, ?, ?)",
                           ((s, 2.0 / (1 + s / 1000), now) for s in range(lo, min(lo + 10000, POINTS + 1))))
    rate = POINTS / (time.perf_counter() - t)
    db.close()
    return rate


def main():
    kestreld = sys.argv[1]
    root = pathlib.Path(tempfile.mkdtemp(prefix="kestrel-bench-console-"))
    os.chmod(root, 0o711)   # kestreld as root runs jobs as an account of their own: it passes through
    nodes = [a for n in range(8) for a in ("--node", f"n{n}:gpus=8,type=h100,memory=80G")]
    try:
        n_jobs, big = seed(kestreld, root, nodes)
        proc, url, token = start(kestreld, root, *nodes)
        try:
            now = int(time.time() * 1000)   # the 100,000 points go in as a job reports them: through the API
            t = time.perf_counter()
            for lo in range(1, POINTS + 1, 10000):
                call(f"{url}/api/v1/jobs/{big}/metrics", token, "POST", {"metrics": [
                    {"name": "loss", "step": s, "value": 2.0 / (1 + s / 1000), "wall_time_ms": now - (POINTS - s) * 10}
                    for s in range(lo, min(lo + 10000, POINTS + 1))]})
            rate = POINTS / (time.perf_counter() - t)
            peer = bare_insert_rate(root / "bare.db", now)
            print(f"ingest: {POINTS:,} points POSTed in batches of 10,000 (each kept, and the chart view kept up): "
                  f"{rate:,.0f} points/s; peer, the same rows into a bare SQLite table with the catalog's index "
                  f"(Python sqlite3, a transaction per 10,000): {peer:,.0f} rows/s; ratio {rate / peer:.2f}")
            jid = call(url + "/api/v1/jobs?page_size=1", token)["jobs"][0]["id"]
            calls = {
                "queue: /api/v1/queue": "/api/v1/queue",
                "queue: /api/v1/jobs?state=RUNNING": "/api/v1/jobs?state=RUNNING&page_size=1000",
                "jobs: /api/v1/jobs?page_size=50&metric=loss": "/api/v1/jobs?page_size=50&metric=loss",
                "jobs: filtered by param, older page": "/api/v1/jobs?page_size=50&metric=loss&param=lr%3D0.1&page_token=5000",
                "job: /api/v1/jobs/ID": f"/api/v1/jobs/{jid}",
                "job: /api/v1/jobs/ID/logs": f"/api/v1/jobs/{jid}/logs",
                "job: /api/v1/jobs/ID/gpu": f"/api/v1/jobs/{jid}/gpu",
                "job: /api/v1/jobs/ID/models": f"/api/v1/jobs/{jid}/models",
                "job: /jobs/ID/metrics?max_points=2000 (of 100,000)": f"/api/v1/jobs/{big}/metrics?max_points=2000",
                "job, 'draw all': /jobs/ID/metrics?name=loss (100,000)": f"/api/v1/jobs/{big}/metrics?name=loss",
                "nodes: /api/v1/nodes": "/api/v1/nodes",
                "models: /api/v1/models": "/api/v1/models",
                "page: /ui/session": "/ui/session",
                "asset: / (index.html)": "/",
                "asset: /ui/uPlot.min.js": "/ui/uPlot.min.js",
            }
            floor = []
            for _ in range(60):
                t = time.perf_counter()
                call(url + "/healthz", token, raw=True)
                floor.append(time.perf_counter() - t)
            f50 = sorted(floor)[len(floor) // 2] * 1000
            print(f"catalog: {n_jobs:,} jobs, job {big} with {POINTS:,} points of 'loss'; GET /healthz p50 {f50:.2f} ms")
            opener = urllib.request.build_opener()
            cookie = None
            req = urllib.request.Request(f"{url}/?token={token}")
            class NoRedirect(urllib.request.HTTPRedirectHandler):
                def redirect_request(self, *a, **k):
                    return None
            try:
                urllib.request.build_opener(NoRedirect).open(req)
            except urllib.error.HTTPError as e:
                cookie = e.headers["Set-Cookie"].split(";")[0]
            worst, full_p50 = 0.0, 0.0
            for label, path in calls.items():
                times, size = [], 0
                full = "draw all" in label
                for _ in range(10 if full else 60):
                    r = urllib.request.Request(url + path, headers={"Cookie": cookie})
                    t = time.perf_counter()
                    with opener.open(r, timeout=60) as resp:
                        size = len(resp.read())
                    times.append(time.perf_counter() - t)
                p50 = sorted(times)[len(times) // 2] * 1000
                if full:
                    full_p50 = p50
                if not label.startswith("asset") and not full:
                    worst = max(worst, p50)
                print(f"  {label:<55} p50 {p50:7.2f} ms  {size / 1024:8.1f} KiB  {p50 / f50:6.1f}x /healthz"
                      f"{'' if p50 <= 20 or full else '  (over the 20 ms target)'}")
            print(f"slowest API call a page makes: p50 {worst:.2f} ms (target <= 20 ms)")
            with Browser(root / "chromium") as b:
                b.login(url, token)
                fcp = b.first_paint_ms(url + "/#/queue")
                print(f"first contentful paint of the console (queue page): {fcp:.0f} ms (target < 1000 ms)")
                render = b.uplot_render_ms(POINTS)
                print(f"uPlot draws {POINTS:,} points: {render:.0f} ms (target < 200 ms)")
                t = time.perf_counter()   # the peer: the page of a job with no metrics, the same way
                b.open(f"{url}/#/job/{jid}")
                b.wait_css("#job-summary")
                small = (time.perf_counter() - t) * 1000
                t = time.perf_counter()
                b.open(f"{url}/#/job/{big}")
                b.wait_css('.chart[data-metric="loss"][data-points]', timeout=60)
                shown = b.css('.chart[data-metric="loss"]').get_attribute("data-points")
                page = (time.perf_counter() - t) * 1000
                print(f"job page of the 100,000-point job, navigation to its chart drawn ({int(shown):,} points "
                      f"sampled): {page:.0f} ms; a job page without metrics: {small:.0f} ms; ratio {page / small:.1f}")
                t = time.perf_counter()
                b.css('.chart[data-metric="loss"] .draw-all').click()
                b.wait_css(f'.chart[data-metric="loss"][data-points="{POINTS}"]', timeout=60)
                drawn = (time.perf_counter() - t) * 1000
                print(f"'draw all': every one of the {POINTS:,} points fetched and drawn: {drawn:.0f} ms; its limit, "
                      f"the same GET p50 {full_p50:.0f} ms + uPlot's draw {render:.0f} ms = {full_p50 + render:.0f} ms; "
                      f"ratio {drawn / (full_p50 + render):.2f}")
        finally:
            stop(proc)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
