"""Batched chunk downloads: a pull of many small files asks kestreld for its chunks a batch at a time
(POST /api/v1/chunks/fetch, server/repo_fetch.c), falls back to one GET a chunk against a kestreld
without the route, and treats a damaged or cut batch as it treats a damaged chunk."""
import hashlib
import json
import os
import struct
import subprocess
import urllib.request

import pytest

kestrel = pytest.importorskip("kestrel")


def raw(d, path, body, token=None, ctype="application/json"):
    headers = {"Content-Type": ctype}
    if token != "":
        headers["Authorization"] = f"Bearer {token or d.token}"
    req = urllib.request.Request(d.url + path, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def token(d, user, scope):
    status, body = raw(d, "/api/v1/tokens", json.dumps({"user": user, "scope": scope}).encode())
    assert status in (200, 201), body
    return json.loads(body)["token"]


def make_tree(root, n=300):
    for i in range(n):
        (root / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 7}" / f"f{i}").write_bytes(os.urandom(4096 + 97 * i))
    (root / "empty").write_bytes(b"")
    (root / "big.bin").write_bytes(os.urandom(3 << 20))   # chunks over 256 KiB: one GET each


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
    if server == "current":   # 300 files of 4-33 KB: a couple of batches, and a GET for each big chunk
        assert 1 <= batches <= 8 and gets <= 16, (batches, gets)
    else:                     # refused (404): every chunk one GET, the refused batches' chunks too
        assert batches >= 1 and proxy.damaged >= 1 and gets >= 300, (batches, gets)


@pytest.mark.parametrize("mode", ["corrupt", "truncate"])
def test_a_damaged_or_cut_batch_is_an_error_and_leaves_nothing(kestreld, tmp_path, monkeypatch, mode):
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "src"
    for i in range(60):
        src.mkdir(exist_ok=True)
        (src / f"f{i}").write_bytes(os.urandom(6000 + i))
    kestrel.Client(kestreld.url, kestreld.token).push("team/small", str(src))
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), mode)
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
    status, body = raw(kestreld, "/api/v1/chunks/fetch", json.dumps({"digests": ask}).encode())
    assert status == 200, body
    at, got = 0, []
    while at < len(body):
        digest, n = body[at:at + 32].hex(), struct.unpack(">I", body[at + 32:at + 36])[0]
        got.append((digest, body[at + 36:at + 36 + n]))
        at += 36 + n
    assert got == [(d, by_digest[d]) for d in ask]
    # a read-scoped token may (a download); a metrics token, no token: refused
    assert raw(kestreld, "/api/v1/chunks/fetch", json.dumps({"digests": digests[:2]}).encode(),
               token=token(kestreld, "reader", "read"))[0] == 200
    assert raw(kestreld, "/api/v1/chunks/fetch", json.dumps({"digests": digests[:2]}).encode(),
               token=token(kestreld, "prometheus", "metrics"))[0] == 403
    assert raw(kestreld, "/api/v1/chunks/fetch", json.dumps({"digests": digests[:2]}).encode(), token="")[0] == 401
    # a chunk not stored: 404 naming it, and nothing of the others sent
    absent = hashlib.sha256(b"not pushed").hexdigest()
    status, body = raw(kestreld, "/api/v1/chunks/fetch", json.dumps({"digests": [digests[0], absent]}).encode())
    assert status == 404 and absent[:12] in json.loads(body)["message"], body
    # bounds: 1 to 4096 digests, each 64 lowercase hex digits; a body that is no ChunkQuery
    for bad in ([], [digests[0]] * 4097, ["abc"], [digests[0].upper()], ["../" + digests[0][3:]]):
        status, body = raw(kestreld, "/api/v1/chunks/fetch", json.dumps({"digests": bad}).encode())
        assert status == 400, (bad[:1], body)
    assert raw(kestreld, "/api/v1/chunks/fetch", b"\xff\xfe not protobuf", ctype="application/x-protobuf")[0] == 400
    assert raw(kestreld, "/api/v1/chunks/fetch", b"{\"digests\": 5}")[0] == 400
