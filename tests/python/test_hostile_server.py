"""The client (libkestrel, the CLI, the Python binding) against a server that misbehaves: one that
answers a long poll at once, sends a log line twice or backwards, or streams lines without end. A
real kestreld does none of this; a proxy or a hostile host may. Each case was found by a hostile
test of the client."""
import json
import os
import resource
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

KESTREL_CLI = os.environ["KESTREL_CLI"]


class Fake:
    """A fake kestreld on a loopback port: answer(path) gives the JSON body for each GET."""

    def __init__(self, answer):
        self.requests = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                fake.requests += 1
                body = answer(self.path)
                body = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def cli(self, *args, timeout):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KESTREL_")}
        env.update(KESTREL_URL=self.url, KESTREL_TOKEN="t" * 40)
        try:
            return subprocess.run([KESTREL_CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return e

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    made = []

    def make(answer):
        made.append(Fake(answer))
        return made[-1]
    yield make
    for f in made:
        f.close()


def test_a_long_poll_answered_at_once_is_asked_again_slowly(fake):
    """`logs -f` and `wait` against a server that ignores wait_ms made 62,588 and ~38,000 requests
    in 8 and 5 s. The client now waits 10 ms, doubling to 1 s, after an early answer with nothing new."""
    f = fake(lambda path: {"lines": [], "next_offset": "0", "eof": False} if "/logs" in path
             else {"id": "1", "state": "RUNNING"})
    f.cli("logs", "-f", "1", timeout=4)
    assert 3 <= f.requests <= 40, f.requests
    f.requests = 0
    r = f.cli("wait", "--timeout", "4", "1", timeout=30)
    assert r.returncode != 0 and "did not finish" in r.stderr, (r.returncode, r.stderr)
    assert 3 <= f.requests <= 40, f.requests


def test_a_log_that_goes_backwards_is_refused(fake):
    """A server that sent line 0 again and again made `kestrel logs` print it forever (21,592 times
    in 3 s); offset 2^63-1 overflowed the next offset. The log only goes forward."""
    for line in ({"offset": "0", "text": "again"}, {"offset": "-5", "text": "neg"},
                 {"offset": "9223372036854775807", "text": "max"}):
        f = fake(lambda path, line=line: {"lines": [line], "next_offset": "0", "eof": False})
        r = f.cli("logs", "1", timeout=20)
        assert r.returncode != 0 and "where line" in r.stderr and "or later was asked for" in r.stderr, r.stderr
        assert r.stdout.count(line["text"]) <= 1, r.stdout[:200]


def test_a_followed_log_comes_back_to_python_while_lines_keep_coming(fake):
    """Job.logs(follow=True) yielded nothing while a job printed without pause (the C call's
    deadline was checked only when a poll brought no line), and held every line in memory."""
    kestrel = pytest.importorskip("kestrel")   # not in sanitizer builds (the binding cannot load there)

    def chatty(path):
        if "/logs" not in path:
            return {"id": "1", "state": "RUNNING"}
        off = int(path.split("offset=")[1].split("&")[0])
        time.sleep(0.05)
        return {"lines": [{"offset": str(off + i), "text": f"line {off + i}"} for i in range(100)],
                "next_offset": str(off + 100), "eof": False}
    f = fake(chatty)
    c = kestrel.Client(f.url, "t" * 40)
    t0 = time.time()
    for n, line in enumerate(c.job(1).logs(follow=True)):
        if n == 0:
            first = time.time() - t0
        if n >= 250:
            break
    assert first < 5, first
    c.close()


def test_an_answer_that_decodes_to_gigabytes_is_refused(fake):
    """A 16 MiB list of empty jobs took `kestrel jobs` to 2 GB (a 1 GiB one, the answer's bound, would
    have taken 128 GB). An answer may take 64 MiB and 8 times its bytes to decode; past that it is
    refused, said so, before it is decoded."""
    body = {"jobs": [{}] * (4 << 20)}
    f = fake(lambda path: body)
    r = f.cli("jobs", timeout=120)
    assert r.returncode != 0 and "oversized" in r.stderr and "to decode" in r.stderr, r.stderr[:500]
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 600 * 1024   # KiB


def test_json_output_is_the_servers_json_checked_and_escaped(fake):
    """`-o json` printed a hostile server's bytes as they came: OSC 52 (the clipboard), ESC[2J, a
    C1 CSI and bytes after the value reached the terminal. The reply is parsed (one value, nothing
    after it) and written again with every control character and bidirectional mark escaped."""
    weird = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\u009b31m\u202eevil\x7f"
    f = fake(lambda path: {"jobs": [{"id": "1", "reason": weird}]})
    r = f.cli("-o", "json", "jobs", timeout=30)
    assert r.returncode == 0, r.stderr
    assert not any(c in r.stdout for c in "\x1b\x07\x7f\u009b\u202e"), repr(r.stdout)
    assert json.loads(r.stdout)["jobs"][0]["reason"] == weird
    f = fake(lambda path: b'{"jobs": []} trailing \xff')
    r = f.cli("-o", "json", "jobs", timeout=30)
    assert r.returncode != 0 and r.stdout == "" and "not one JSON value" in r.stderr, (r.stdout, r.stderr)
