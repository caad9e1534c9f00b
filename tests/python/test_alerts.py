"""kestreld's own alerts against the real daemon: per-job GPU telemetry on the stand-in NVML (its
utilisation changed under a running job), the idle-GPU event, log policies (built-in, server and
per job: label, alert, no-retry, exclude-node, retry-larger), retries, NaN loss, and the signed
webhook against a real local receiver that fails before it accepts."""
import hashlib
import hmac
import http.server
import json
import os
import pathlib
import threading
import time

from conftest import KESTRELD, write_replacing

STUB = str(pathlib.Path(KESTRELD).parents[1] / "stubs" / "new" / "libnvidia-ml.so.1")
GPU = ('gpu uuid=GPU-7e1e0000-0000-0000-0000-00000000000{i} name="NVIDIA H200" bus=0000:2{i}:00.0 cc=9.0 '
       'total=150323855360 free={free} util={util}/5 temp=50 power=300000\n')


def write_gpus(path, util, used_gib=(1, 1)):
    write_replacing(path, "".join(GPU.format(i=i, util=u, free=150323855360 - used_gib[i] * (1 << 30))
                                  for i, u in enumerate(util)))


def uuid(i):
    return f"GPU-7e1e0000-0000-0000-0000-00000000000{i}"


def token_for(d, user):
    status, body = d.api("POST", "/api/v1/tokens", {"user": user})
    assert status in (200, 201), body
    return body["token"]


def events(d, jid):
    return [e["reason"] for e in d.job(jid).get("events", [])]


def wait_for(pred, timeout=30, what=""):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out: {what}")


def test_gpu_telemetry_per_job_and_the_idle_gpu_alert(daemon, tmp_path):
    gpus = tmp_path / "gpus.txt"
    write_gpus(gpus, [2, 2])
    env = dict(os.environ, KESTREL_NVML_LIBRARY=STUB, KESTREL_FAKE_GPU_FILE=str(gpus))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    d = daemon("--gpu-sample-interval", "1", "--idle-gpu-after", "3", "--grace-period", "2", env=env)
    alice = token_for(d, "alice")
    idle = d.submit("--gpus", "1", "--", "sleep", "30", env=d.env(KESTREL_TOKEN=alice))
    d.wait_state(idle, "RUNNING")
    held = d.job(idle)["devices"][0]
    other = [i for i in range(2) if uuid(i) != held][0]
    # the idle job's device stays at 2%, the busy one's goes 30% -> 80% with memory growing
    utils = [2, 2]
    utils[other] = 30
    write_gpus(gpus, utils, (1, 1))
    busy = d.submit("--gpus", "1", "--", "sleep", "30")
    d.wait_state(busy, "RUNNING")

    def usage():   # the busy job's telemetry, as the CLI shows it
        return json.loads(d.cli("-o", "json", "metrics", "--gpu", str(busy)).stdout)

    def ended_at_80():   # its telemetry once the series has 4 samples or more and ends at 80%
        t = usage()
        return len(t["samples"]) >= 4 and t["samples"][-1]["utilization"] == 80 and t

    # two samples at 30% before it goes to 80%: the sampler's pace on a loaded machine, not a sleep
    wait_for(lambda: [s["utilization"] for s in usage()["samples"]].count(30) >= 2, 30, "samples at 30%")
    utils[other] = 80
    used = [1, 1]
    used[other] = 40
    write_gpus(gpus, utils, tuple(used))
    wait_for(lambda: any("idle GPU" in r for r in events(d, idle)), 20, "the idle-GPU event")
    assert not any("idle GPU" in r for r in events(d, busy))
    alerts = json.loads(d.cli("-o", "json", "alerts", env=d.env(KESTREL_TOKEN=alice)).stdout)["alerts"]   # the API's
    assert [(int(a["job_id"]), a["kind"]) for a in alerts] == [(int(idle), "idle-gpu")]
    assert held in alerts[0]["message"]
    t = wait_for(ended_at_80, 30, "samples at 80%")
    (u,) = t["usage"]
    assert u["uuid"] == uuid(other) and u["max_utilization"] == 80 and 30 < u["mean_utilization"] < 80
    assert u["peak_memory_bytes"] == 40 << 30
    series = [s["utilization"] for s in t["samples"]]
    assert series[0] == 30 and series[-1] == 80 and series == sorted(series) and len(series) >= 4
    assert "mean" in d.cli("status", str(busy)).stdout
    try:
        import kestrel
    except ImportError:   # the sanitizer build has no binding
        kestrel = None
    if kestrel:
        with kestrel.Client(d.url, d.token) as c:
            assert c.job(int(busy)).gpu_usage[0]["max_utilization"] == 80
            assert c.job(int(busy)).gpu_telemetry()["samples"][-1]["utilization"] == 80
        with kestrel.Client(d.url, alice) as c:
            assert [a["kind"] for a in c.alerts()] == ["idle-gpu"]
            j = c.submit(["sh", "-c", "echo 'loss: nan'; exit 1"], retries=3,
                         log_policies={"mine": ("exit now", "alert")})
            assert j.wait(timeout=60).state == "FAILED" and "nan-loss" in j.reason
    # only who may see the job sees its telemetry
    status, _ = d.api("GET", f"/api/v1/jobs/{busy}/gpu", token=alice)
    assert status == 404
    d.cli("cancel", str(idle))
    d.cli("cancel", str(busy))


class Receiver(http.server.BaseHTTPRequestHandler):
    fail_first = 2
    got = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        cls = type(self)
        if cls.fail_first > 0:
            cls.fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        cls.got.append((self.headers.get("X-Kestrel-Signature", ""), body, time.time()))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_log_policies_retries_and_the_signed_webhook(daemon, tmp_path):
    srv = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    secret = tmp_path / "hook.secret"
    secret.write_text("s3cret-0123456789abcdef\n")
    os.chmod(secret, 0o600)
    d = daemon("--node", "small:gpus=1,memory=16G", "--node", "big:gpus=1,memory=80G", "--grace-period", "2",
               "--webhook", f"http://127.0.0.1:{srv.server_port}/hook", "--webhook-secret-file", str(secret),
               "--log-policy", "disk:label,alert,no-retry=No space left on device")
    try:
        # retry-larger (built-in cuda-oom): out of memory on the 16G device, retried on the 80G one
        oom = d.submit("--gpus", "1", "--min-gpu-memory", "8G", "--", "sh", "-c",
                       '[ "$KESTREL_RESTART_COUNT" = 0 ] && { echo "torch.OutOfMemoryError: CUDA out of memory" >&2; '
                       'exit 1; }; echo fine')
        j = d.wait(oom)
        assert j["state"] == "SUCCEEDED" and j["node"] == "big", j
        assert any("retry-larger" in r and "16384 MiB" in r for r in events(d, oom)), events(d, oom)
        assert j["spec"]["labels"] == [{"key": "log-policy/cuda-oom", "value": "matched"}] or \
            {"key": "log-policy/cuda-oom", "value": "matched"} in j["spec"].get("labels", [])
        # --retries with exclude-node (built-in ecc): the retry avoids the node
        ecc = d.submit("--gpus", "1", "--retries", "2", "--", "sh", "-c",
                       '[ "$KESTREL_RESTART_COUNT" = 0 ] && { echo "CUDA error: uncorrectable ECC error encountered"; '
                       'exit 1; }; echo ok')
        j = d.wait(ecc)
        assert j["state"] == "SUCCEEDED", j
        first = [r for r in events(d, ecc) if r.startswith("started on node")][0].split()[3]
        assert j["node"] != first and j["spec"]["exclude_nodes"] == [first], j
        # a server policy with no-retry: --retries does not bring it back
        disk = d.submit("--retries", "3", "--", "sh", "-c", "echo 'OSError: [Errno 28] No space left on device'; exit 1")
        j = d.wait(disk)
        assert j["state"] == "FAILED" and "not retried: log policy disk" in j["reason"], j
        # plain retries: twice, then FAILED
        flaky = d.submit("--retries", "2", "--", "sh", "-c", "exit 7")
        j = d.wait(flaky)
        assert j["state"] == "FAILED" and j["restart_count"] == 2, j
        assert sum("retry" in r for r in events(d, flaky)) == 2
        # a job's own policy; and a NaN loss reported as a metric
        own = d.submit("--log-policy", "diverged:alert=grad norm [0-9]{4,}", "--", "sh", "-c",
                       r"printf 'grad norm 123456 \033[2J \302\233x\n'; sleep 1")
        assert d.wait(own)["state"] == "SUCCEEDED"
        log = (d.root / "kestreld.log").read_bytes()   # the alert quotes the line: not its escapes
        assert b"grad norm 123456 ?[2J ??x" in log and b"\033" not in log and b"\xc2\x9b" not in log
        nan = d.submit("--", "sleep", "20")
        d.wait_state(nan, "RUNNING")
        status, _ = d.api("POST", f"/api/v1/jobs/{nan}/metrics",
                          {"metrics": [{"name": "loss", "step": 3, "value": "NaN"}]})
        assert status == 200
        d.cli("cancel", str(nan))
        # bad policies are refused with the reason
        p = d.cli("submit", "--log-policy", "x:explode=boom", "--", "true", check=False)
        assert p.returncode != 0 and "unknown action" in p.stderr
        p = d.cli("submit", "--log-policy", "x:alert=(unclosed", "--", "true", check=False)
        assert p.returncode != 0 and "regex" in p.stderr

        kinds = sorted((a["kind"], int(a["job_id"])) for a in
                       json.loads(d.cli("-o", "json", "alerts").stdout)["alerts"])
        assert kinds == sorted([("log-policy", int(oom)), ("log-policy", int(ecc)), ("log-policy", int(disk)),
                                ("log-policy", int(own)), ("nan-loss", int(nan))]), kinds
        # the receiver refused the first two POSTs: delivered later, each signed
        wait_for(lambda: len(Receiver.got) >= 5, 60, "webhook deliveries")
        key = b"s3cret-0123456789abcdef"
        for sig, body, _ in Receiver.got:
            fields = dict(f.split("=", 1) for f in sig.split(","))
            want = hmac.new(key, fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(fields["v1"], want), sig
            assert abs(int(fields["t"]) - time.time()) < 120
        bodies = [json.loads(b) for _, b, _ in Receiver.got]
        assert {b["kind"] for b in bodies} == {"log-policy", "nan-loss"}
        assert all(b["job_id"] and b["message"] and b["severity"] for b in bodies)
        wait_for(lambda: all(a["delivery"] == 1   # 1: delivered to the webhook
                             for a in json.loads(d.cli("-o", "json", "alerts").stdout)["alerts"]), 30, "all delivered")
        # another user sees none of these
        bob = token_for(d, "bob")
        assert json.loads(d.cli("-o", "json", "alerts", env=d.env(KESTREL_TOKEN=bob)).stdout) == {"alerts": []}
    finally:
        srv.shutdown()
