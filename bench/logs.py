"""bench/logs.py - log search and ingest of kestreld beside grep and a plain file, in the same run,
and the cost of /metrics on a big catalog.

    python bench/logs.py KESTRELD   (make bench-logs; KESTREL_BENCH_LINES=10000000, _JOBS=4,
                                     KESTREL_BENCH_PARTS=metrics,telemetry,logs)

1. Ingest: JOBS jobs each print LINES/JOBS training-log lines (the same generator, seeded); the
   time from submit until kestreld stored every line of all of them (SUCCEEDED and the last line
   readable), as lines/s, beside the generator writing the same lines to a file (the peer: a
   plain append, no index).
2. Search over the LINES stored lines through GET /api/v1/logs/search (limit 100): a rare
   substring (one line), a common one, a regex; each the median of 5, beside grep -F / grep -E
   over the same lines as one text file (grep -c: it reads everything, as a search for a rare
   line must; and grep -m 100, grep's best case for a common one: it stops at the 100th).
3. /metrics with 10,000 jobs in the catalog and 64 nodes x 8 devices: p50/p99 of 200 scrapes,
   beside GET /healthz in the same loop (the floor), and the exposition's size.
"""
import os
import pathlib
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from kestreld_proc import call, start, stop  # noqa: E402  (bench/kestreld_proc.py)

LINES = int(os.environ.get("KESTREL_BENCH_LINES", "10000000"))
JOBS = int(os.environ.get("KESTREL_BENCH_JOBS", "4"))
RARE = "CUDA out of memory. Tried to allocate 20.00 GiB"

GEN = r'''
import random, sys
job, n, rare_at = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = random.Random(job)
out = sys.stdout
w = out.write
for i in range(n):
    if i == rare_at:
        w("RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.15 GiB total)\n")
    elif i % 1000 == 999:
        w(f"Epoch {i // 1000}: val_loss={r.random():.4f} val_accuracy={r.random():.4f} saved checkpoint\n")
    else:
        w(f"step {i:>9} loss={r.random():.4f} lr={r.choice((1e-3, 5e-4, 1e-4)):.0e} "
          f"throughput={r.randrange(800, 1300)} samples/s worker=job{job}\n")
'''


def median_s(fn, n=5):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def ingest_and_search(kestreld, root):
    per = LINES // JOBS
    gen = root / "gen.py"
    gen.write_text(GEN)
    os.chmod(root, 0o755)
    os.chmod(gen, 0o644)
    text = root / "all.log"
    # the peer: the same lines appended to one file
    t = time.perf_counter()
    with open(text, "w") as f:
        for j in range(JOBS):
            subprocess.run([sys.executable, str(gen), str(j), str(per), str(per // 2 if j == 1 else -1)], stdout=f,
                           check=True)
    file_s = time.perf_counter() - t
    proc, url, token = start(kestreld, root / "k", "--gpus", "0", "--max-log-bytes", "16G", "--max-jobs", str(JOBS))
    try:
        t = time.perf_counter()
        ids = [call(url + "/api/v1/jobs", token, "POST",
                    {"argv": [sys.executable, str(gen), str(j), str(per), str(per // 2 if j == 1 else -1)],
                     "name": f"gen{j}"})["id"] for j in range(JOBS)]
        for jid in ids:
            while call(f"{url}/api/v1/jobs/{jid}", token)["state"] not in ("SUCCEEDED", "FAILED"):
                time.sleep(0.2)
        for jid in ids:   # every line stored and readable
            chunk = call(f"{url}/api/v1/jobs/{jid}/logs?offset={per - 1}", token)
            assert chunk["lines"] and int(chunk["lines"][-1]["offset"]) == per - 1, chunk
        stored_s = time.perf_counter() - t

        def queue():
            expo = call(url + "/metrics", token, raw=True).decode()
            return int(float([l for l in expo.splitlines() if l.startswith("kestrel_log_index_queue_lines ")][0].split()[1]))
        backlog = queue()
        while queue():   # and every line in the search index
            time.sleep(0.5)
        ingest_s = time.perf_counter() - t
        stored = sum(1 for _ in open(text))
        print(f"ingest: {stored:,} lines stored in {stored_s:.1f} s ({stored / stored_s:,.0f} lines/s; the indexer was "
              f"{backlog:,} lines behind then), indexed in {ingest_s:.1f} s = {stored / ingest_s:,.0f} lines/s; "
              f"peer (the same generator appending to a file): {file_s:.1f} s = {stored / file_s:,.0f} lines/s; "
              f"ratio {file_s / ingest_s:.2f}")
        db = root / "k" / "data" / "catalog.db"
        print(f"catalog: {db.stat().st_size / 2**20:,.0f} MiB for {text.stat().st_size / 2**20:,.0f} MiB of text")

        def search(q, regex=False, limit=100):
            qs = urllib.parse.urlencode({"q": q, "limit": limit, **({"regex": 1} if regex else {})})
            return call(f"{url}/api/v1/logs/search?{qs}", token)

        cases = [("rare substring", RARE, False, "-F"), ("common substring", "val_loss=0.12", False, "-F"),
                 ("regex", r"loss=0\.99[0-9]+ lr=1e-04", True, "-E")]
        for what, q, regex, flag in cases:
            hits = len(search(q, regex)["hits"])
            ks = median_s(lambda: search(q, regex))
            g_all = median_s(lambda: subprocess.run(["grep", flag, "-c", q, str(text)], capture_output=True))
            g_100 = median_s(lambda: subprocess.run(["grep", flag, "-m", "100", q, str(text)], capture_output=True))
            count = int(subprocess.run(["grep", flag, "-c", q, str(text)], capture_output=True, text=True).stdout)
            print(f"search {what} {q!r}: {hits} hits (of {count:,}) in {ks * 1000:.1f} ms; "
                  f"grep {flag} -c {g_all * 1000:.1f} ms (ratio {g_all / ks:.1f}x), "
                  f"grep {flag} -m 100 {g_100 * 1000:.1f} ms (ratio {g_100 / ks:.1f}x)")
    finally:
        stop(proc)


def metrics_cost(kestreld, root):
    nodes = [a for n in range(64) for a in ("--node", f"n{n:02d}:gpus=8,type=h100,memory=80G,pool=p{n % 4}")]
    proc, url, token = start(kestreld, root / "m", *nodes)
    jid = call(url + "/api/v1/jobs", token, "POST", {"argv": ["true"], "name": "seed"})["id"]
    while call(f"{url}/api/v1/jobs/{jid}", token)["state"] != "SUCCEEDED":
        time.sleep(0.1)
    stop(proc)
    db = sqlite3.connect(root / "m" / "data" / "catalog.db")   # 10,000 jobs in mixed states, as a busy month leaves
    cols = [r[1] for r in db.execute("PRAGMA table_info(jobs)") if r[1] != "id"]
    sel = ", ".join("(abs(random()) % 3) + 3" if c == "state" else "(abs(random()) % 3) + 1" if c == "priority"
                    else "'p' || (abs(random()) % 4)" if c == "pool" else c for c in cols)
    for _ in range(9999):
        db.execute(f"INSERT INTO jobs({', '.join(cols)}) SELECT {sel} FROM jobs WHERE id = ?", (jid,))
    db.commit()
    n_jobs = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    db.close()
    proc, url, token = start(kestreld, root / "m", *nodes)
    try:
        def get(path):
            t = time.perf_counter()
            body = call(url + path, token, raw=True)
            return time.perf_counter() - t, len(body)
        get("/metrics")   # warm: the repository walk happens on the first scrape of a minute
        scrape, floor, size = [], [], 0
        for _ in range(200):
            s, size = get("/metrics")
            scrape.append(s)
            floor.append(get("/healthz")[0])
        q = lambda v, p: sorted(v)[int(len(v) * p)] * 1000
        nlines = call(url + "/metrics", token, raw=True).count(b"\n")
        print(f"/metrics with {n_jobs:,} jobs and 64 nodes x 8 devices ({size / 1024:.0f} KiB, "
              f"{nlines:,} lines): p50 {q(scrape, .5):.2f} ms, "
              f"p99 {q(scrape, .99):.2f} ms (target p50 <= 10 ms); GET /healthz floor p50 {q(floor, .5):.2f} ms, "
              f"p99 {q(floor, .99):.2f} ms; ratio p50 {q(scrape, .5) / q(floor, .5):.1f}x")
    finally:
        stop(proc)


def pass_times(kestreld, stub, root, interval):
    """Scheduling passes beside 8 stand-in GPUs all held by running jobs, sampled every interval s."""
    desc = root / "gpus.txt"
    desc.write_text("".join(f'gpu uuid=GPU-be000000-0000-0000-0000-00000000000{i} name="NVIDIA H100" '
                            f'bus=0000:{16 + i:02x}:00.0 cc=9.0 total=85899345920 free=42949672960 util={40 + i}/10\n'
                            for i in range(8)))
    env = dict(os.environ, KESTREL_NVML_LIBRARY=stub, KESTREL_FAKE_GPU_FILE=str(desc))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    d = root / f"t{interval}"
    d.mkdir()
    log = open(d / "kestreld.log", "w")
    proc = subprocess.Popen([kestreld, "--port", "0", "--data-dir", str(d / "data"), "--port-file", str(d / "port"),
                             "--gpu-sample-interval", str(interval)], stderr=log, env=env)
    while not ((d / "port").exists() and (d / "data" / "admin.token").exists()):
        time.sleep(0.02)
    url, token = f"http://127.0.0.1:{(d / 'port').read_text().strip()}", (d / "data" / "admin.token").read_text().strip()
    try:
        for _ in range(8):
            call(url + "/api/v1/jobs", token, "POST", {"argv": ["sleep", "60"], "gpus": 1})
        for _ in range(200):   # passes: short CPU jobs beside them
            call(url + "/api/v1/jobs", token, "POST", {"argv": ["true"]})
        time.sleep(12)
        expo = call(url + "/metrics", token, raw=True).decode()
        val = lambda name: float([l for l in expo.splitlines() if l.startswith(name + " ")][0].split()[1])
        return (val("kestrel_gpu_sample_duration_seconds_count"), val("kestrel_gpu_sample_duration_seconds_sum"),
                val("kestrel_scheduler_pass_duration_seconds_count"), val("kestrel_scheduler_pass_duration_seconds_sum"))
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def telemetry_cost(kestreld, stub, root):
    """The sampler's tick, and the scheduling pass with it every second beside it off."""
    ticks, tick_s, passes, pass_s = pass_times(kestreld, stub, root, 1)
    _, _, passes0, pass0_s = pass_times(kestreld, stub, root, 3600)
    print(f"GPU telemetry: {ticks:.0f} ticks of 8 devices held by 8 jobs, {tick_s / ticks * 1000:.2f} ms each "
          f"(every 5 s by default: {tick_s / ticks / 5 * 100:.3f}% of one core); scheduling pass "
          f"{pass_s / passes * 1000:.2f} ms on average over {passes:.0f} passes with a tick every second, beside "
          f"{pass0_s / passes0 * 1000:.2f} ms over {passes0:.0f} with the sampler idle (ratio "
          f"{(pass_s / passes) / (pass0_s / passes0):.2f})")


def main():
    kestreld = sys.argv[1]
    stub = str(pathlib.Path(kestreld).resolve().parents[1] / "stubs" / "new" / "libnvidia-ml.so.1")
    root = pathlib.Path(tempfile.mkdtemp(prefix="kestrel-bench-logs-"))
    os.chmod(root, 0o755)   # jobs (other accounts when kestreld is root) run the generator from here
    try:
        parts = os.environ.get("KESTREL_BENCH_PARTS", "metrics,telemetry,logs").split(",")
        if "metrics" in parts:
            metrics_cost(kestreld, root)
        if "telemetry" in parts:
            telemetry_cost(kestreld, stub, root)
        if "logs" in parts:
            ingest_and_search(kestreld, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
