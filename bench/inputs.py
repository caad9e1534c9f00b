"""bench/inputs.py - what a job's inputs cost, beside a peer measured in the same run.

    python bench/inputs.py KESTRELD KESTREL_CLI        (make bench-inputs; KESTREL_BENCH_FILES=5000)

Environments: a job with a new --requirements file (REQUIREMENTS, default "six tqdm packaging"),
then a second job with the same file: submit -> RUNNING of each, beside `python -m venv` + `pip
install -r` of the same file run directly with an empty pip cache, in the same run.

Code upload: a project of FILES source files (~30 MB) submitted with `kestrel submit --code`, then
again after one file changed. Figures: time, the chunk bytes the server lacked, and the bytes that
crossed loopback both ways (/sys/class/net/lo counters: requests, manifests and replies included),
beside `tar c DIR | gzip -1` of the same directory, the bytes a tarball upload would send every
time. The second submit should send about one file, not the tree.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

FILES = int(os.environ.get("KESTREL_BENCH_FILES", "5000"))
REQUIREMENTS = os.environ.get("KESTREL_BENCH_REQUIREMENTS", "six tqdm packaging").split()


def lo_bytes():
    base = pathlib.Path("/sys/class/net/lo/statistics")
    return int((base / "tx_bytes").read_text()) if base.exists() else 0


def start(binary, root):
    data, port_file = root / "data", root / "port"
    log = open(root / "kestreld.log", "w")
    proc = subprocess.Popen([binary, "--port", "0", "--data-dir", str(data), "--port-file", str(port_file),
                             "--gpus", "0"], stderr=log)
    deadline = time.time() + 20
    while not (port_file.exists() and (data / "admin.token").exists()):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("kestreld did not start: " + (root / "kestreld.log").read_text())
        time.sleep(0.02)
    return proc, int(port_file.read_text()), (data / "admin.token").read_text().strip()


def project(root):
    proj = root / "proj"
    for i in range(FILES):
        d = proj / f"pkg{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        body = "".join(f"def f_{i}_{k}(x):\n    return x * {k} + {i}  # {os.urandom(8).hex()}\n" for k in range(60))
        (d / f"mod{i:05d}.py").write_text(body)
    (proj / "train.py").write_text("print('ok')\n")
    return proj


def submit(cli, env, proj):
    before, t0 = lo_bytes(), time.perf_counter()
    r = subprocess.run([cli, "submit", "--code", str(proj), "--", "true"], env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit("submit failed: " + r.stderr)
    m = re.search(r"\((\d+) bytes, (\d+) of them new\)", r.stderr)
    return dt, int(m.group(2)), lo_bytes() - before, int(m.group(1))


def to_running(cli, env, args):
    """Seconds from submit to RUNNING (the job's own start time against the submit time)."""
    import json
    r = subprocess.run([cli, "-o", "json", "submit", *args], env=env, capture_output=True, text=True, check=True)
    jid = json.loads(r.stdout)["id"]
    w = subprocess.run([cli, "-o", "json", "wait", "--timeout", "900", jid], env=env, capture_output=True, text=True)
    job = json.loads(w.stdout)
    if job["state"] != "SUCCEEDED":
        raise SystemExit(f"job {jid} {job['state']}: {job['reason']}")
    return (int(job["start_time_ms"]) - int(job["submit_time_ms"])) / 1000


def direct_venv(root, req):
    t0 = time.perf_counter()
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(root / "direct")], check=True)
    subprocess.run([str(root / "direct" / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "-r",
                    str(req), "cffi"], check=True, env=dict(os.environ, PIP_CACHE_DIR=str(root / "direct-cache")))
    return time.perf_counter() - t0


def main():
    binary, cli = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="kestrel-inputs-") as tmp:
        root = pathlib.Path(tmp)
        os.chmod(root, 0o711)
        proc, port, token = start(binary, root)
        env = dict(os.environ, KESTREL_URL=f"http://127.0.0.1:{port}", KESTREL_TOKEN=token)
        try:
            req = root / "requirements.txt"
            req.write_text("\n".join(REQUIREMENTS) + "\n")
            cold = to_running(cli, env, ["--requirements", str(req), "--", "python", "-c", "import six"])
            warm = to_running(cli, env, ["--requirements", str(req), "--", "python", "-c", "import six"])
            direct = direct_venv(root, req)
            proj = project(root)
            t0 = time.perf_counter()
            tgz = subprocess.run(f"tar -C '{proj}' -c . | gzip -1 | wc -c", shell=True, capture_output=True,
                                 text=True, check=True)
            tar_s, tar_bytes = time.perf_counter() - t0, int(tgz.stdout)
            first = submit(cli, env, proj)
            edited = proj / "pkg007" / "mod00700.py"
            edited.write_text(edited.read_text() + "# one more line\n")
            second = submit(cli, env, proj)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    mb = lambda b: b / 1e6
    print(f"bench-inputs: environment of {' '.join(REQUIREMENTS)} (+ cffi), submit -> RUNNING")
    print(f"  first job (kestreld builds the venv)   {cold:8.2f} s")
    print(f"  second job, same requirements (reuse)  {warm * 1000:8.0f} ms")
    print(f"  peer: python -m venv + pip install -r  {direct:8.2f} s (empty pip cache, run directly)")
    print(f"  the second job waits {warm * 1000:.0f} ms instead of {direct:.1f} s; the first build costs "
          f"{cold / max(direct, 1e-3):.2f}x the direct one (the job's log has pip's output)")
    print(f"code upload of {FILES} files ({mb(first[3]):.1f} MB), kestreld on loopback")
    print(f"  {'':34} {'seconds':>8} {'new chunk MB':>13} {'on the wire MB':>15}")
    print(f"  {'first submit --code':34} {first[0]:>8.2f} {mb(first[1]):>13.3f} {mb(first[2]):>15.3f}")
    print(f"  {'after editing one file':34} {second[0]:>8.2f} {mb(second[1]):>13.3f} {mb(second[2]):>15.3f}")
    print(f"  {'peer: tar c | gzip -1 (each time)':34} {tar_s:>8.2f} {'':>13} {mb(tar_bytes):>15.3f}")
    print(f"  re-submit sends {second[2] / max(tar_bytes, 1):.3f}x the tarball's bytes "
          f"({second[1]} new chunk bytes for a 16-byte edit), in {second[0] / max(tar_s, 1e-9):.2f}x the tarball's time")


if __name__ == "__main__":
    main()
