"""Batched chunk downloads: a pull of many small files asks kestreld for its chunks a batch at a time
(POST /api/v1/chunks/fetch, server/repo_fetch.c), falls back to one GET a chunk against a kestreld
without the route, and treats a damaged or cut batch as it treats a damaged chunk."""
import hashlib
import json
import os
import re
import struct
import subprocess
import urllib.request

import pytest

from test_repo_http import raw

kestrel = pytest.importorskip("kestrel")


def fetch(d, body, token=None, ctype="application/json"):
    return raw(d, "POST", "/api/v1/chunks/fetch", body, ctype=ctype, token=token)


def token(d, user, scope):
    status, body = raw(d, "POST", "/api/v1/tokens", json.dumps({"user": user, "scope": scope}).encode())
    assert status in (200, 201), body
    return json.loads(body)["token"]


def make_tree(root, n=300):
    for i in range(n):
        (root / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 7}" / f"f{i}").write_bytes(os.urandom(4096 + 97 * i))
    (root / "empty").write_bytes(b"")
    (root / "big.bin").write_bytes(os.urandom(3 << 20))   # chunks of up to 1 MiB: batched too


def requests_seen(proxy):
    sent = bytes(proxy.sent)
    return sent.count(b"POST /api/v1/chunks/fetc"), sent.count(b"GET /api/v1/chunks/")   # fetcx: "older" renamed it


@pytest.mark.parametrize("server", ["current", "older"])
def test_a_pull_of_many_small_files_fetches_them_in_batches(kestreld, tmp_path, monkeypatch, server):
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    src = tmp_path / "src"
    make_tree(src)
    kestrel.Client(kestreld.url, kestreld.token).push("team/ds", str(src))
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "older" if server == "older" else "pass")
    try:
        kestrel.Client(proxy.url, kestreld.token).pull("team/ds", str(tmp_path / "out"))
        batches, gets = requests_seen(proxy)
    finally:
        proxy.close()
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "out")]).returncode == 0
    if server == "current":   # 300 files of 4-33 KB and 3 MiB in chunks of Kestrel's: a few batches
        assert 1 <= batches <= 8 and gets == 0, (batches, gets)
    else:                     # refused (404): every chunk one GET, the refused batches' chunks too
        assert batches >= 1 and proxy.damaged >= 1 and gets >= 300, (batches, gets)
        heads = re.findall(rb"GET /api/v1/chunks/[0-9a-f]{64} HTTP/1.1\r\n(.*?)\r\n\r\n", bytes(proxy.sent), re.S)
        assert len(heads) == gets and not [h for h in heads if b"Content-Type" in h], heads[:1]   # was "(null)"


# where the proxy strikes the first batch's answer: a chunk's bytes, the first head's digest and
# length, a cut inside the first chunk and one after several chunks were handed on
@pytest.mark.parametrize("mode,at", [("corrupt", 1000), ("corrupt", 5), ("corrupt", 33), ("truncate", 2048),
                                     ("truncate", 30000)])
def test_a_damaged_or_cut_batch_is_an_error_and_leaves_nothing(kestreld, tmp_path, monkeypatch, mode, at):
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "src"
    for i in range(60):
        src.mkdir(exist_ok=True)
        (src / f"f{i}").write_bytes(os.urandom(6000 + i))
    kestrel.Client(kestreld.url, kestreld.token).push("team/small", str(src))
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), mode, at)
    try:
        with pytest.raises(kestrel.KestrelError) as info:
            kestrel.Client(proxy.url, kestreld.token).pull("team/small", str(tmp_path / "out"))
        assert proxy.damaged >= 1 and requests_seen(proxy)[0] >= 1, info.value
        assert ("damaged" if mode == "corrupt" else "chunk download") in str(info.value)
    finally:
        proxy.close()
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if ".kestrel-" in p.name]
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    kestrel.Client(kestreld.url, kestreld.token).pull("team/small", str(tmp_path / "ok"))
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "ok")]).returncode == 0


def test_the_fetch_route_answers_in_order_with_bounds_and_to_whom(kestreld, tmp_path):
    src = tmp_path / "src"
    blobs = [os.urandom(100 * (i + 1)) for i in range(5)]
    src.mkdir()
    for i, b in enumerate(blobs):
        (src / f"f{i}").write_bytes(b)
    kestrel.Client(kestreld.url, kestreld.token).push("team/route", str(src))
    digests = [hashlib.sha256(b).hexdigest() for b in blobs]
    by_digest = dict(zip(digests, blobs))
    ask = list(reversed(digests)) + [digests[2]]   # any order, a digest twice
    status, body = fetch(kestreld, json.dumps({"digests": ask}).encode())
    assert status == 200, body
    at, got = 0, []
    while at < len(body):
        digest, n = body[at:at + 32].hex(), struct.unpack(">I", body[at + 32:at + 36])[0]
        got.append((digest, body[at + 36:at + 36 + n]))
        at += 36 + n
    assert got == [(d, by_digest[d]) for d in ask]
    # a read-scoped token may (a download); a metrics token, no token: refused
    assert fetch(kestreld, json.dumps({"digests": digests[:2]}).encode(),
               token=token(kestreld, "reader", "read"))[0] == 200
    assert fetch(kestreld, json.dumps({"digests": digests[:2]}).encode(),
               token=token(kestreld, "prometheus", "metrics"))[0] == 403
    with pytest.raises(urllib.error.HTTPError) as no_token:
        urllib.request.urlopen(urllib.request.Request(kestreld.url + "/api/v1/chunks/fetch", method="POST",
                                                      data=json.dumps({"digests": digests[:2]}).encode()), timeout=30)
    assert no_token.value.code == 401
    # a chunk not stored: 404 naming it, and nothing of the others sent
    absent = hashlib.sha256(b"not pushed").hexdigest()
    status, body = fetch(kestreld, json.dumps({"digests": [digests[0], absent]}).encode())
    assert status == 404 and absent[:12] in json.loads(body)["message"], body
    # bounds: 1 to 4096 digests, each 64 lowercase hex digits; a body that is no ChunkQuery
    for bad in ([], [digests[0]] * 4097, ["abc"], [digests[0].upper()], ["../" + digests[0][3:]]):
        status, body = fetch(kestreld, json.dumps({"digests": bad}).encode())
        assert status == 400, (bad[:1], body)
    assert fetch(kestreld, b"\xff\xfe not protobuf", ctype="application/x-protobuf")[0] == 400
    assert fetch(kestreld, b"{\"digests\": 5}")[0] == 400


def test_a_kestreld_with_a_small_body_limit_is_asked_one_chunk_at_a_time(daemon, tmp_path, monkeypatch):
    """256 digests (about 17 KB) are over --max-body 8192: the batch is refused (413), the pull goes on
    with one GET a chunk."""
    from conftest import Daemon
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    d = daemon()
    src = tmp_path / "src"
    for i in range(300):
        src.mkdir(exist_ok=True)
        (src / f"f{i}").write_bytes(os.urandom(1000 + i))
    kestrel.Client(d.url, d.token).push("team/limited", str(src))   # its query of 300 digests needs the default limit
    assert d.stop() == 0
    (d.root / "port").unlink()
    limited = Daemon(d.root, "--max-body", "8192")
    try:
        kestrel.Client(limited.url, limited.token).pull("team/limited", str(tmp_path / "out"))
    finally:
        assert limited.stop() == 0
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "out")]).returncode == 0


def test_empty_chunks_in_a_batch_cost_no_descriptor(kestreld):
    """An empty chunk (stored by a pack) is sent from its head alone; 4,095 of them before a real one
    leave kestreld with the descriptors it had."""
    from test_repo_http import pack
    blob = os.urandom(5000)
    assert raw(kestreld, "POST", "/api/v1/chunks/pack", pack(b"", blob), ctype="application/octet-stream")[0] == 200
    empty, full = hashlib.sha256(b"").hexdigest(), hashlib.sha256(blob).hexdigest()
    fds = lambda: len(os.listdir(f"/proc/{kestreld.proc.pid}/fd"))
    before = fds()
    for ask in ([empty] * 4095 + [full], [empty, full] * 2048, [full, empty] * 20):
        status, body = fetch(kestreld, json.dumps({"digests": ask}).encode())
        want = b"".join(bytes.fromhex(d) + struct.pack(">I", 0 if d == empty else len(blob)) + (b"" if d == empty else blob)
                        for d in ask)
        assert status == 200 and body == want
    assert fds() <= before + 2, (before, fds())
    status, body = raw(kestreld, "GET", "/api/v1/chunks/fetch")
    assert status == 405, body


def stored_tree(d, tmp_path, name, size_of):
    """30 files (f7 of size_of(7) bytes...) pushed as name: the client, the tree and f7's chunk file in
    kestreld's store."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"f{i}").write_bytes(os.urandom(size_of(i)))
    c = kestrel.Client(d.url, d.token)
    c.push(name, str(src))
    digest = hashlib.sha256((src / "f7").read_bytes()).hexdigest()
    return c, src, d.data / "repo" / "chunks" / digest[:2] / digest[2:]


def heals(c, name, src, out):
    """A re-push sends what kestreld put aside; the pull is whole again."""
    c.push(name, str(src))
    c.pull(name, str(out))
    assert subprocess.run(["diff", "-r", str(src), str(out)]).returncode == 0


# a stored copy of the wrong size (shrunk, emptied or grown on kestreld's disk), fetched in a batch or
# by a GET (an "older" kestreld, played by the proxy): the pull says damaged and reports it, kestreld
# quarantines it, a re-push heals it
@pytest.mark.parametrize("how", ["shrunk", "emptied", "grown"])
@pytest.mark.parametrize("path", ["batch", "get"])
def test_a_stored_chunk_of_the_wrong_size_is_reported_and_healed(kestreld, tmp_path, monkeypatch, how, path):
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    c, src, victim = stored_tree(kestreld, tmp_path, "team/sized", lambda i: 2000 + i)
    data = victim.read_bytes()
    victim.write_bytes({"shrunk": data[:1000], "emptied": b"", "grown": data + b"more"}[how])
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "older" if path == "get" else "pass")
    try:
        with pytest.raises(kestrel.ProtocolError, match="damaged"):
            kestrel.Client(proxy.url, kestreld.token).pull("team/sized", str(tmp_path / "out"))
        batches, gets = requests_seen(proxy)
        assert (batches >= 1 and gets == 0) if path == "batch" else gets >= 1, (batches, gets)
    finally:
        proxy.close()
    assert not (tmp_path / "out").exists() and not victim.exists()   # quarantined
    assert list((kestreld.data / "repo" / "quarantine").iterdir())
    heals(c, "team/sized", src, tmp_path / "out")


@pytest.mark.parametrize("path", ["batch", "get"])
def test_a_chunk_missing_from_the_store_is_not_found_and_names_no_damage(kestreld, tmp_path, monkeypatch, path):
    """A 404 for a chunk kestreld does not store is the pull's answer (no fallback to GETs, no report
    of damage), even for a chunk smaller than the error's own body."""
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    _, _, victim = stored_tree(kestreld, tmp_path, "team/holes", lambda i: 10 if i == 7 else 3000 + i)
    victim.unlink()
    digest = victim.parent.name + victim.name
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "older" if path == "get" else "pass")
    try:
        with pytest.raises(kestrel.NotFoundError) as info:
            kestrel.Client(proxy.url, kestreld.token).pull("team/holes", str(tmp_path / "out"))
        batches, gets = requests_seen(proxy)
        assert "damaged" not in str(info.value) and b"/verify" not in bytes(proxy.sent)
        assert (batches >= 1 and gets == 0 and digest[:12] in str(info.value)) if path == "batch" else gets >= 1
    finally:
        proxy.close()
    assert not (tmp_path / "out").exists()


def test_a_chunk_collected_as_its_batch_is_sent_is_not_found(kestreld, tmp_path, monkeypatch):
    """kestreld ended a batch's answer early when a chunk went as it was sent (its version deleted and
    collected): the client saw a broken connection (NetworkError), where a file:// pull of it says
    NotFoundError. That chunk's head now says it is gone, and the pull fails NotFoundError, naming it."""
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"f{i:02d}").write_bytes(os.urandom(40_000))
    kestrel.Client(kestreld.url, kestreld.token).push("team/going", str(src))
    # the last file: one chunk, the batch's last. kestreld opens at most 8 chunks ahead of the one it
    # sends and keeps at most 256 KiB of an answer unsent; the proxy reads through a small window and
    # pauses after 16 KiB: f29's file, 1.2 MB into the answer, is not open when it goes
    digest = hashlib.sha256((src / "f29").read_bytes()).hexdigest()
    victim = kestreld.data / "repo" / "chunks" / digest[:2] / digest[2:]
    assert victim.exists()
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "pause", 16384, paused=victim.unlink)
    try:
        with pytest.raises(kestrel.NotFoundError) as info:
            kestrel.Client(proxy.url, kestreld.token).pull("team/going", str(tmp_path / "out"))
        assert proxy.damaged == 1 and digest[:12] in str(info.value) and "not in the repository" in str(info.value)
        assert requests_seen(proxy) == (1, 0)   # one batch, no GET
    finally:
        proxy.close()
    assert not (tmp_path / "out").exists()


def test_a_stored_chunk_over_4_mib_is_quarantined_when_a_batch_asks_for_it(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    c, src, victim = stored_tree(kestreld, tmp_path, "team/huge", lambda i: 3000 + i)
    victim.write_bytes(victim.read_bytes() + os.urandom(4 << 20))
    with pytest.raises(kestrel.NotFoundError):
        c.pull("team/huge", str(tmp_path / "out"))
    assert not victim.exists() and list((kestreld.data / "repo" / "quarantine").iterdir())
    heals(c, "team/huge", src, tmp_path / "out")


@pytest.mark.parametrize("shape", ["file", "tree"])
def test_a_chunk_over_1_mib_another_client_cut_comes_by_one_get(kestreld, tmp_path, monkeypatch, shape):
    """Kestrel's chunker never cuts a chunk over 1 MiB, but another client may store one (kestreld takes
    chunks up to 4 MiB). A pull fetches it with one GET (sent with sendfile), the small chunks around
    it in batches, and installs the bytes whole: a file alone (its whole digest covers every byte) and
    in a directory (each chunk verified as it comes)."""
    from faultproxy import FaultProxy
    from test_repo_http import pack
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    s = [os.urandom(5000 + 1000 * i) for i in range(6)]
    big = os.urandom((3 << 20) + 12345)
    octet = "application/octet-stream"
    assert raw(kestreld, "POST", "/api/v1/chunks/pack", pack(*s, big), octet)[0] == 200
    first = [s[0], s[1], big, s[2], s[3]]

    def entry(x):
        return {"digest": hashlib.sha256(x).hexdigest(), "size": str(len(x))}
    if shape == "file":
        m = {"size": str(sum(map(len, first))), "chunks": [entry(x) for x in first]}
        want = {"": b"".join(first)}
    else:
        m = {"size": str(sum(map(len, first + s[4:]))), "chunks": [entry(x) for x in first + s[4:]],
             "files": [{"path": "a/big.bin", "size": str(sum(map(len, first))), "chunks": 5},
                       {"path": "b.bin", "size": str(len(s[4]) + len(s[5])), "chunks": 2}]}
        want = {"a/big.bin": b"".join(first), "b.bin": s[4] + s[5]}
    status, body = raw(kestreld, "POST", "/api/v1/models/team/foreign/versions", json.dumps(m).encode())
    assert status == 201, body
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "pass")
    try:
        kestrel.Client(proxy.url, kestreld.token).pull("team/foreign", str(tmp_path / "out"))
        batches, gets = requests_seen(proxy)
    finally:
        proxy.close()
    assert batches >= 1 and gets == 1, (batches, gets)
    for rel, data in want.items():
        assert (tmp_path / "out" / rel if rel else tmp_path / "out").read_bytes() == data


def test_unread_answers_cannot_take_every_descriptor(tmp_path, monkeypatch):
    """Each chunks/fetch answer holds up to 8 chunk files open ahead of the one it sends; 2,400 unread
    answers took kestreld to 19,976 of its 20,000 descriptors, and it refused every connection (found
    by a hostile test). The files open beyond each answer's current chunk now share a quarter of the
    descriptors. Here kestreld runs with 256: 40 stalled answers of 40 chunks, then a new connection
    is served, and each answer, read at last, is whole."""
    import socket
    import conftest
    wrapper = tmp_path / "kestreld-256"
    wrapper.write_text(f"#!/bin/sh\nexec prlimit --nofile=256:256 {conftest.KESTRELD} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(conftest, "KESTRELD", str(wrapper))
    d = conftest.Daemon(tmp_path / "d", "--idle-timeout", "600")   # the answers are read one after another
    try:
        chunks = [os.urandom(1 << 20) for _ in range(40)]
        from test_repo_http import pack
        assert raw(d, "POST", "/api/v1/chunks/pack", pack(*chunks), "application/octet-stream")[0] == 200
        body = json.dumps({"digests": [hashlib.sha256(c).hexdigest() for c in chunks]}).encode()
        port = int(d.url.rsplit(":", 1)[1])
        socks = []
        for _ in range(40):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(60)
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /api/v1/chunks/fetch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + d.token.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            assert s.recv(64).startswith(b"HTTP/1.1 200"), "an answer did not start"
            socks.append(s)
        with urllib.request.urlopen(d.url + "/healthz", timeout=30) as r:   # still served
            assert r.status == 200
        want = 40 * (36 + (1 << 20))
        for s in socks:
            got = b""
            while b"\r\n\r\n" not in got:
                got += s.recv(65536)
            n = len(got.split(b"\r\n\r\n", 1)[1])
            while n < want:
                part = s.recv(1 << 20)
                assert part, f"an answer was cut short at {n} of {want} bytes"
                n += len(part)
            s.close()
    finally:
        d.stop()


def test_unread_manifest_answers_share_the_descriptors_of_answers(tmp_path, monkeypatch):
    """kestreld answers a manifest by sending its versions/N.pb as it lies (server/repo_manifest.c),
    which it holds open until the answer is read: 10,800 answers never read took it to its last
    descriptor (a hostile test). Those files are counted with the chunk answers' (a quarter of the
    descriptors): with 256, of 150 stalled answers of a 30,000-file manifest some are refused with 503
    and none breaks kestreld; a new connection is served meanwhile, and each answer begun is whole."""
    import socket
    import conftest
    wrapper = tmp_path / "kestreld-256"
    wrapper.write_text(f"#!/bin/sh\nexec prlimit --nofile=256:256 {conftest.KESTRELD} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(conftest, "KESTRELD", str(wrapper))
    d = conftest.Daemon(tmp_path / "d", "--idle-timeout", "600")
    try:
        src = tmp_path / "src"
        for i in range(30000):
            if i % 1000 == 0:
                (src / f"d{i // 1000:02d}").mkdir(parents=True)
            (src / f"d{i // 1000:02d}" / f"f{i:05d}").write_bytes(b"%d" % i)
        d.cli("push", "team/long", str(src), timeout=300)
        port = int(d.url.rsplit(":", 1)[1])
        socks, refused = [], 0
        for _ in range(150):   # a descriptor each for the connection and, unbounded, for its N.pb
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(60)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /api/v1/models/team/long/versions/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                      d.token.encode() + b"\r\nAccept: application/x-protobuf\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
            if head.startswith(b"HTTP/1.1 503"):
                refused += 1
                s.close()
                continue
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            assert length > 30000 * 100
            socks.append((s, length))
        assert refused > 0 and len(socks) >= 32, (refused, len(socks))
        with urllib.request.urlopen(d.url + "/healthz", timeout=30) as r:   # still served
            assert r.status == 200
        for s, length in socks:
            n = 0
            while n < length:
                part = s.recv(1 << 20)
                assert part, f"an answer was cut short at {n} of {length} bytes"
                n += len(part)
            s.close()
        assert d.cli("-o", "json", "models", "team/long").returncode == 0   # and then as before
    finally:
        d.stop()
