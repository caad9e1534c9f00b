"""A kestreld for a benchmark: started on an ephemeral loopback port in a folder of its own, called
with its admin token, stopped. Shared by bench/logs.py and bench/console.py."""
import json
import subprocess
import time
import urllib.request


def start(binary, root, *flags):
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    port_file = root / "port"
    port_file.unlink(missing_ok=True)
    log = open(root / "kestreld.log", "a")
    proc = subprocess.Popen([binary, "--port", "0", "--data-dir", str(data), "--port-file", str(port_file), *flags],
                            stderr=log)
    deadline = time.time() + 60
    while not (port_file.exists() and (data / "admin.token").exists()):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("kestreld did not start: " + (root / "kestreld.log").read_text())
        time.sleep(0.02)
    return proc, f"http://127.0.0.1:{port_file.read_text().strip()}", (data / "admin.token").read_text().strip()


def call(url, token, method="GET", body=None, raw=False):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()
    return data if raw else json.loads(data)


def stop(proc):
    proc.terminate()
    proc.wait(timeout=120)
