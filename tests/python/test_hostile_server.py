"""The client (libkestrel, the CLI, the Python binding) against a server that misbehaves: one that
answers a long poll at once, sends a log line twice or backwards, or streams lines without end. A
real kestreld does none of this; a proxy or a hostile host may. Each case was found by a hostile
test of the client."""
import hashlib
import json
import struct
import os
import shutil
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

            def do_GET(self, data=None):
                fake.requests += 1
                body = answer(self.path) if data is None else answer(self.path, data)
                ctype, status = "application/json", 200
                if isinstance(body, tuple) and len(body) == 3:   # (status, content type, body)
                    status, ctype, body = body
                elif isinstance(body, tuple):   # (content type, bytes)
                    ctype, body = body
                body = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.do_GET(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def cli(self, *args, timeout, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KESTREL_")}
        env.update(KESTREL_URL=self.url, KESTREL_TOKEN="t" * 40, **extra)
        try:
            return subprocess.run([KESTREL_CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return e

    def cli_rss(self, *args):
        """Run the CLI alone; its exit status, stderr and peak memory in KiB (its own, from wait4)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KESTREL_")}
        env.update(KESTREL_URL=self.url, KESTREL_TOKEN="t" * 40)
        with open(os.devnull, "w") as null, subprocess.Popen([KESTREL_CLI, *args], stdout=null, stderr=subprocess.PIPE,
                                                              env=env) as p:
            err = p.stderr.read().decode(errors="replace")
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            return p.returncode, err, usage.ru_maxrss

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
    rc, err, rss = f.cli_rss("jobs")
    assert rc != 0 and "oversized" in err and "to decode" in err, err[:500]
    assert rss < 600 * 1024, rss   # KiB
    # nor as an error's words: an answer of 4xx/5xx brings its first 64 KiB (a review: decoded whole)
    f = fake(lambda path: (500, "application/json", body))
    rc, err, rss = f.cli_rss("jobs")
    assert rc != 0 and rss < 200 * 1024, (rc, rss, err[:300])


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


def test_a_reason_of_several_lines_stays_under_its_label(fake):
    """A newline in a server's reason made a line of its own in `kestrel status` ("fake: line"), and a
    job with no times was "ended after 20793d 16h". Later lines of a reason are indented under it."""
    job = {"id": "1", "state": "FAILED", "reason": "x\nfake: line",
           "events": [{"to_state": "FAILED", "reason": "y\nowner: mallory"}]}
    f = fake(lambda path: job if "/jobs/1" in path else {"jobs": [job]})
    out = f.cli("status", "1", timeout=30).stdout
    assert not any(line.lstrip().startswith(("fake", "owner: mallory")) and not line.startswith(" " * 10)
                   for line in out.splitlines()), out
    assert "             fake: line" in out, out
    out = f.cli("jobs", timeout=30).stdout
    assert "20793d" not in out and "ended after" not in out, out


def pb_field(num, value):
    """One protobuf field: an int (varint) or bytes/str (length-delimited)."""
    def varint(n):
        out = bytearray()
        while True:
            out.append((n & 0x7f) | (0x80 if n > 0x7f else 0))
            n >>= 7
            if not n:
                return bytes(out)
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    value = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(value)) + value


def test_a_manifest_of_tiny_chunks_leaves_no_index_every_later_pull_loads(fake, tmp_path):
    """A hostile manifest of 2 million one-byte chunks left a 149 MB pack index in the pull cache,
    loaded by every later pull (2 s and 144 MB for a pull of 120 bytes). A pack indexes each digest
    once, and no chunk under 256 bytes but a file's last; its index counts toward KESTREL_CACHE_MAX."""
    n = 100000
    digest = hashlib.sha256(b"A").hexdigest()
    ref = pb_field(5, pb_field(1, digest) + pb_field(2, 1))
    manifest = pb_field(1, "t/m") + pb_field(2, 1) + pb_field(3, n) + \
        pb_field(4, hashlib.sha256(b"A" * n).hexdigest()) + ref * n

    def repo(path, data=None):
        if "/versions/" in path:
            return "application/x-protobuf", manifest
        if path.endswith("/verify"):
            return b""
        if "/chunks/" in path:   # a batch, or one chunk: every digest asked is the one 'A'
            asked = max(1, (data or b"").count(digest.encode()))
            frame = bytes.fromhex(digest) + struct.pack(">I", 1) + b"A"
            return "application/octet-stream", (frame * asked if data is not None else b"A")
        return {}
    f = fake(repo)
    cache = tmp_path / "cache"
    r = f.cli("pull", "t/m", str(tmp_path / "out"), timeout=300, KESTREL_CACHE_DIR=str(cache))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out").read_bytes() == b"A" * n
    indexes = list(cache.rglob("*.idx"))
    assert indexes and all(p.stat().st_size < 1024 for p in indexes), [(p, p.stat().st_size) for p in indexes]
    # distinct digests too: 2,000 chunks of 100 bytes each its own are not indexed (the size rule), one
    # of 4 KiB twice is, once (the dedupe rule)
    small = [i.to_bytes(4, "big") * 25 for i in range(2000)]
    big = b"B" * 4096
    chunks = small + [big, big]
    data = b"".join(chunks)
    store = {hashlib.sha256(c).hexdigest(): c for c in chunks}
    manifest = pb_field(1, "t/m") + pb_field(2, 1) + pb_field(3, len(data)) + \
        pb_field(4, hashlib.sha256(data).hexdigest()) + \
        b"".join(pb_field(5, pb_field(1, hashlib.sha256(c).hexdigest()) + pb_field(2, len(c))) for c in chunks)

    def repo2(path, body=None):
        if "/versions/" in path:
            return "application/x-protobuf", manifest
        if path.endswith("/verify"):
            return b""
        if path.split("?")[0].endswith("/chunks/fetch"):
            asked = [body[i + 2:i + 66].decode() for i in range(0, len(body), 66)]
            return "application/octet-stream", b"".join(bytes.fromhex(d) + struct.pack(">I", len(store[d])) + store[d]
                                                        for d in asked)
        if "/chunks/" in path:
            return "application/octet-stream", store[path.rsplit("/", 1)[1]]
        return {}
    shutil.rmtree(cache)
    f = fake(repo2)
    r = f.cli("pull", "t/m", str(tmp_path / "out2"), timeout=300, KESTREL_CACHE_DIR=str(cache))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out2").read_bytes() == data
    lines = [line for p in cache.rglob("*.idx") for line in p.read_text().splitlines()[1:]]
    assert len(lines) == 1 and lines[0].startswith(hashlib.sha256(big).hexdigest()), lines
