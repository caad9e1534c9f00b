"""bench/load.py - kestreld under 200 concurrent clients for 60 s, all on loopback, beside the floor
measured in the same run (the same clients asking only GET /healthz, which touches nothing).

    python bench/load.py KESTRELD KESTREL_CLI      (make bench-load; KESTREL_BENCH_CLIENTS=200,
                                                   KESTREL_BENCH_SECONDS=60)

Each client keeps one connection and loops over a mix: submit a job (half run `true`, half wait in
an unknown pool and are cancelled), poll it, read its logs, list jobs, push a small model version
(every 20th round, through the CLI). Figures: requests, errors (target 0), requests/s, p50 and
p99 latency (target p99 <= 100 ms on the 2-core box) for the mix and for the floor, and the
daemon's RSS and WAL size before and after (both bounded).
"""
import http.client
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

CLIENTS = int(os.environ.get("KESTREL_BENCH_CLIENTS", "200"))
SECONDS = float(os.environ.get("KESTREL_BENCH_SECONDS", "60"))


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


class Client(threading.Thread):
    def __init__(self, port, token, until, mix, cli, url, tmp):
        super().__init__(daemon=True)
        self.port, self.hdr, self.until, self.mix = port, {"Authorization": f"Bearer {token}",
                                                           "Content-Type": "application/json"}, until, mix
        self.cli, self.url, self.token, self.tmp = cli, url, token, tmp
        self.lat, self.errors = [], 0

    def call(self, conn, method, path, body=None):
        t0 = time.perf_counter()
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None, self.hdr)
            r = conn.getresponse()
            data = r.read()
            ok = r.status < 300
        except (OSError, http.client.HTTPException):
            ok, data = False, b""
            conn.close()
        self.lat.append((time.perf_counter() - t0) * 1000)
        if not ok:
            self.errors += 1
        return json.loads(data) if ok and data else {}

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        i = 0
        while time.time() < self.until:
            if not self.mix:
                self.call(conn, "GET", "/healthz")
                continue
            i += 1
            queued = i % 2 == 0
            job = self.call(conn, "POST", "/api/v1/jobs", {"argv": ["true"], **({"pool": "nowhere"} if queued else {})})
            jid = job.get("id")
            if jid:
                self.call(conn, "GET", f"/api/v1/jobs/{jid}")
                self.call(conn, "GET", f"/api/v1/jobs/{jid}/logs")
                if queued:
                    self.call(conn, "POST", f"/api/v1/jobs/{jid}/cancel")
            self.call(conn, "GET", "/api/v1/jobs?page_size=20")
            if i % 20 == 0:
                f = self.tmp / f"{self.name}.bin"
                f.write_bytes(os.urandom(4096))
                t0 = time.perf_counter()
                r = subprocess.run([self.cli, "--url", self.url, "--token", self.token, "push", "admin/load", str(f)],
                                   capture_output=True)
                self.lat.append((time.perf_counter() - t0) * 1000)
                self.errors += r.returncode != 0


def phase(port, token, mix, cli, url, tmp, seconds):
    until = time.time() + seconds
    clients = [Client(port, token, until, mix, cli, url, tmp) for _ in range(CLIENTS)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    lat = sorted(x for c in clients for x in c.lat)
    errors = sum(c.errors for c in clients)
    n = len(lat)
    return {"requests": n, "errors": errors, "rps": n / seconds,
            "p50": lat[n // 2] if n else 0, "p99": lat[min(n - 1, int(n * 0.99))] if n else 0}


def main():
    binary, cli = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="kestrel-load-") as tmp:
        root = pathlib.Path(tmp)
        os.chmod(root, 0o711)
        proc, port, token, data = start(binary, root)
        url = f"http://127.0.0.1:{port}"
        try:
            rss0, wal0 = rss_kib(proc.pid), wal_kib(data)
            floor = phase(port, token, False, cli, url, root, min(10.0, SECONDS))
            mix = phase(port, token, True, cli, url, root, SECONDS)
            rss1, wal1 = rss_kib(proc.pid), wal_kib(data)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(f"bench-load: {CLIENTS} clients on loopback, 2-core box")
    print(f"  {'':28} {'requests':>9} {'errors':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, r in (("floor (GET /healthz only)", floor), (f"mix for {SECONDS:.0f} s", mix)):
        print(f"  {name:28} {r['requests']:>9} {r['errors']:>7} {r['rps']:>8.0f} {r['p50']:>8.2f} {r['p99']:>8.2f}")
    print(f"  mix / floor: {mix['rps'] / floor['rps']:.2f}x the requests/s, p99 {mix['p99'] / max(floor['p99'], 0.01):.1f}x")
    print(f"  kestreld RSS {rss0 >> 10} -> {rss1 >> 10} MiB, WAL {wal0} -> {wal1} KiB (kept under 64 MiB)")
    print(f"  targets: 0 errors ({'met' if mix['errors'] == 0 else 'MISSED'}), "
          f"p99 <= 100 ms ({'met' if mix['p99'] <= 100 else 'MISSED'})")


if __name__ == "__main__":
    main()
