"""bench/slurm.py - kestreld on Slurm against raw sbatch and against kestreld's local executor,
all measured in this run on one private cluster (scripts/slurm-local.sh, its own port base).

    python bench/slurm.py KESTRELD                  (make bench-slurm; KESTREL_BENCH_JOBS=200)

Figures:
  submit -> RUNNING latency (median, max over 10 sequential jobs; the job stamps its own start)
      kestreld, local executor | kestreld, Slurm pool | raw sbatch        ratio Slurm pool / sbatch
  submissions/s: N sequential submissions accepted (HTTP 201 / sbatch returned)
  N tiny jobs submitted and all ended (jobs/s)                            ratio Slurm pool / sbatch
"""
import json
import os
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
N = int(os.environ.get("KESTREL_BENCH_JOBS", "200"))
LAT_RUNS = 10


class Kestreld:
    def __init__(self, binary, root, *flags, env=None):
        self.data = root / "data"
        port_file = root / "port"
        self.log = open(root / "kestreld.log", "w")
        self.proc = subprocess.Popen([binary, "--port", "0", "--data-dir", str(self.data), "--port-file",
                                      str(port_file), *flags], stderr=self.log, env=env)
        deadline = time.time() + 20
        while not (port_file.exists() and (self.data / "admin.token").exists()):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("kestreld did not start: " + (root / "kestreld.log").read_text())
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        self.token = (self.data / "admin.token").read_text().strip()

    def call(self, method, path, body=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def submit(self, argv, pool=""):
        spec = {"argv": argv}
        if pool:
            spec["pool"] = pool
        return int(self.call("POST", "/api/v1/jobs", spec)["id"])

    def idle(self):
        """No job queued or running: two listing calls, not one call per job (the bench must not load
        the daemon it measures)."""
        return not any(self.call("GET", f"/api/v1/jobs?state={s}&page_size=1").get("jobs")
                       for s in ("QUEUED", "RUNNING"))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def stamp(path):
    return ["sh", "-c", f"date +%s.%N > {path}"]


def wait_file(path, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.stat().st_size:
            return float(path.read_text())
        time.sleep(0.005)
    raise RuntimeError(f"{path} never appeared")


def latency(submit, tmp, tag):
    out = []
    for i in range(LAT_RUNS):
        f = tmp / f"{tag}-{i}"
        t0 = time.time()
        submit(stamp(f))
        out.append(wait_file(f) - t0)
    return statistics.median(out), max(out)


def sbatch(argv, env):
    r = subprocess.run(["sbatch", "--parsable", "-p", "poolb", "-o", "/dev/null", "--wrap", shlex.join(argv)],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(r.stderr)
    return r.stdout.strip()


def squeue_empty(env):
    return subprocess.run(["squeue", "-h", "-p", "poolb"], capture_output=True, text=True, env=env).stdout.strip() == ""


def throughput(submit, all_ended):
    t0 = time.perf_counter()
    ids = [submit(["true"]) for _ in range(N)]
    accepted = time.perf_counter() - t0
    while not all_ended(ids):
        time.sleep(0.05)
    return N / accepted, N / (time.perf_counter() - t0)


def main():
    kestreld = sys.argv[1]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="kestrel-bench-slurm-"))
    cluster = tmp / "cluster"
    senv = dict(os.environ, SLURM_LOCAL_DIR=str(cluster), SLURM_LOCAL_PORT_BASE="17800")
    script = str(ROOT / "scripts" / "slurm-local.sh")
    subprocess.run([script, "start"], check=True, env=senv)
    env = dict(os.environ, SLURM_CONF=str(cluster / "etc" / "slurm.conf"))
    results = {}
    try:
        d = Kestreld(kestreld, tmp, "--slurm-pool", "poolb", "--slurm-poll-ms", "100", "--max-jobs", "16", env=env)
        try:
            results["lat_local"] = latency(lambda a: d.submit(a), tmp, "local")
            results["lat_kslurm"] = latency(lambda a: d.submit(a, "poolb"), tmp, "kslurm")
            results["lat_sbatch"] = latency(lambda a: sbatch(a, env), tmp, "sbatch")
            results["tp_local"] = throughput(lambda a: d.submit(a), lambda ids: d.idle())
            results["tp_kslurm"] = throughput(lambda a: d.submit(a, "poolb"), lambda ids: d.idle())
            results["tp_sbatch"] = throughput(lambda a: sbatch(a, env), lambda ids: squeue_empty(env))
        finally:
            d.stop()
    finally:
        subprocess.run([script, "stop"], env=senv)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nsubmit -> RUNNING, median / max of {LAT_RUNS} sequential jobs (the job stamps its start):")
    for k, name in (("lat_local", "kestreld, local executor"), ("lat_kslurm", "kestreld, Slurm pool"),
                    ("lat_sbatch", "raw sbatch")):
        med, mx = results[k]
        print(f"  {name:28s} {med * 1000:8.0f} ms {mx * 1000:8.0f} ms")
    print(f"  kestreld on Slurm / raw sbatch: median {results['lat_kslurm'][0] / results['lat_sbatch'][0]:.2f}x")
    print(f"\n{N} sequential submissions (accepted/s) and the same {N} tiny jobs run to their end (jobs/s):")
    for k, name in (("tp_local", "kestreld, local executor"), ("tp_kslurm", "kestreld, Slurm pool"),
                    ("tp_sbatch", "raw sbatch")):
        acc, done = results[k]
        print(f"  {name:28s} {acc:8.0f}/s   {done:6.1f} jobs/s")
    print(f"  kestreld on Slurm / raw sbatch: accepted {results['tp_kslurm'][0] / results['tp_sbatch'][0]:.1f}x, "
          f"end to end {results['tp_kslurm'][1] / results['tp_sbatch'][1]:.2f}x")


if __name__ == "__main__":
    main()
