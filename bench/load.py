"""bench/load.py - kestreld under 200 concurrent clients for 60 s, all on loopback, beside the floor
measured in the same run (the same clients asking only GET /healthz, which touches nothing).

    python bench/load.py KESTRELD KESTREL_CLI   (make bench-load; KESTREL_BENCH_CLIENTS=200,
                                                 KESTREL_BENCH_SECONDS=60, KESTREL_BENCH_PUSHERS=2,
                                                 KESTREL_BENCH_THINK_MS=200)

The clients are wrk's (Debian's wrk, C and epoll, two threads): an event-driven generator costs the
shared 2 cores little, so the latencies are kestreld's and not the client's (a Python generator of
200 threads measured its own GIL: its /healthz floor had p99 309 ms). Each connection runs the mix
of bench/load.lua: submit a job (half run `true`, half wait in an unknown pool and are cancelled),
read it, read its logs, list jobs. Beside them, PUSHERS loops push a new 4 KiB model version each
through the CLI (a process per push, as users do). The mix runs twice: with no pause between a
client's requests (the server saturated: latency is then clients / throughput, Little's law) and
with THINK_MS (200) between them, a client acting 5 times a second. Figures: requests, errors
(target 0), requests/s, p50 and p99 latency (target p99 <= 100 ms on the 2-core box) for each
and for the floor, the pushes' own count and latency, the daemon's RSS and WAL before and after.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

CLIENTS = int(os.environ.get("KESTREL_BENCH_CLIENTS", "200"))
SECONDS = float(os.environ.get("KESTREL_BENCH_SECONDS", "60"))
PUSHERS = int(os.environ.get("KESTREL_BENCH_PUSHERS", "2"))
THINK_MS = int(os.environ.get("KESTREL_BENCH_THINK_MS", "200"))
HERE = pathlib.Path(__file__).resolve().parent


def start(binary, root):
    data = root / "data"
    port_file = root / "port"
    log = open(root / "kestreld.log", "w")
    proc = subprocess.Popen([binary, "--port", "0", "--data-dir", str(data), "--port-file", str(port_file),
                             "--gpus", "0", "--max-jobs", "16", "--max-queued", "1000000"], stderr=log)
    deadline = time.time() + 20
    while not (port_file.exists() and (data / "admin.token").exists()):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("kestreld did not start: " + (root / "kestreld.log").read_text())
        time.sleep(0.02)
    return proc, int(port_file.read_text()), (data / "admin.token").read_text().strip(), data


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wal_kib(data):
    wal = data / "catalog.db-wal"
    return wal.stat().st_size >> 10 if wal.exists() else 0


def wrk(url, token, mode, seconds, think_ms=0):
    env = dict(os.environ, KESTREL_TOKEN=token, KESTREL_LOAD_MODE=mode, KESTREL_THINK_MS=str(think_ms))
    out = subprocess.run(["wrk", "-t2", f"-c{CLIENTS}", f"-d{seconds:.0f}s", "--timeout", "10s", "-s",
                          str(HERE / "load.lua"), url], env=env, capture_output=True, text=True,
                         timeout=seconds + 60)
    m = re.search(r"KESTREL requests=(\d+) bad=(\d+) socket_errors=(\d+) p50_us=(\d+) p99_us=(\d+) max_us=(\d+)",
                  out.stdout)
    if out.returncode or m is None:
        raise SystemExit("wrk failed: " + out.stdout + out.stderr)
    n, bad, sock, p50, p99, mx = (int(x) for x in m.groups())
    return {"requests": n, "errors": bad + sock, "rps": n / seconds, "p50": p50 / 1000, "p99": p99 / 1000,
            "max": mx / 1000}


class Pusher(threading.Thread):
    """Pushes a new 4 KiB version of admin/load through the CLI, again and again."""

    def __init__(self, cli, url, token, tmp, until, k):
        super().__init__(daemon=True)
        self.cli, self.url, self.token, self.until = cli, url, token, until
        self.file = tmp / f"push{k}.bin"
        self.lat, self.errors = [], 0

    def run(self):
        while time.time() < self.until:
            self.file.write_bytes(os.urandom(4096))
            t0 = time.perf_counter()
            r = subprocess.run([self.cli, "--url", self.url, "--token", self.token, "push", "admin/load",
                                str(self.file)], capture_output=True)
            self.lat.append((time.perf_counter() - t0) * 1000)
            self.errors += r.returncode != 0


def mixed(url, token, cli, root, think_ms):
    """The mix for SECONDS with the pushers beside it: (wrk figures, push latencies, push errors)."""
    pushers = [Pusher(cli, url, token, root, time.time() + SECONDS, k) for k in range(PUSHERS)]
    for p in pushers:
        p.start()
    mix = wrk(url, token, "mix", SECONDS, think_ms)
    for p in pushers:
        p.join()
    return mix, sorted(x for p in pushers for x in p.lat), sum(p.errors for p in pushers)


def main():
    binary, cli = sys.argv[1], sys.argv[2]
    if shutil.which("wrk") is None:
        raise SystemExit("bench-load needs wrk (Debian package wrk: scripts/deps.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="kestrel-load-") as tmp:
        root = pathlib.Path(tmp)
        os.chmod(root, 0o711)
        proc, port, token, data = start(binary, root)
        url = f"http://127.0.0.1:{port}"
        try:
            rss0, wal0 = rss_kib(proc.pid), wal_kib(data)
            floor = wrk(url, token, "floor", min(10.0, SECONDS))
            # paced first: the saturated run leaves thousands of queued `true` jobs still starting
            runs = [(f"mix, {THINK_MS} ms pause ({SECONDS:.0f} s)",) + mixed(url, token, cli, root, THINK_MS),
                    (f"mix, no pause ({SECONDS:.0f} s)",) + mixed(url, token, cli, root, 0)]
            rss1, wal1 = rss_kib(proc.pid), wal_kib(data)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    errors = sum(r[1]["errors"] + r[3] for r in runs)
    print(f"bench-load: {CLIENTS} wrk connections on loopback, {os.cpu_count()} cores shared with kestreld")
    print(f"  {'':36} {'requests':>9} {'errors':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    row = lambda name, n, e, rps, p50, p99: print(f"  {name:36} {n:>9} {e:>7} {rps:>8.0f} {p50:>8.2f} {p99:>8.2f}")
    row("floor (GET /healthz only)", floor["requests"], floor["errors"], floor["rps"], floor["p50"], floor["p99"])
    for name, mix, push, push_errors in runs:
        row(name, mix["requests"], mix["errors"], mix["rps"], mix["p50"], mix["p99"])
        if push:
            row(f"  its pushes ({PUSHERS} CLI loops)", len(push), push_errors, len(push) / SECONDS,
                push[len(push) // 2], push[min(len(push) - 1, int(len(push) * 0.99))])
        print(f"  {'':36} {mix['rps'] / floor['rps']:.3f}x the floor's requests/s" +
              (f"; {CLIENTS} / (req/s) = {CLIENTS / max(mix['rps'], 1) * 1000:.0f} ms a request waits (Little's law)"
               if "no pause" in name else ""))
    print(f"  kestreld RSS {rss0 >> 10} -> {rss1 >> 10} MiB, WAL {wal0} -> {wal1} KiB (kept under 64 MiB)")
    print(f"  targets: 0 errors ({'met' if errors == 0 else 'MISSED'}); p99 <= 100 ms: "
          + ", ".join(f"{name}: {'met' if mix['p99'] <= 100 else 'MISSED'}" for name, mix, _, _ in runs))


if __name__ == "__main__":
    main()
