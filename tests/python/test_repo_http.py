"""The model repository through the real kestreld: push (packs over parallel streams, only the
chunks it lacks), pull (verified, cached), versions, aliases; bad packs and manifests store nothing."""
import hashlib
import json
import os
import struct
import subprocess
import urllib.request

import pytest

from conftest import KESTREL_CLI

kestrel = pytest.importorskip("kestrel")


def raw(d, method, path, body=b"", ctype="application/json", token=None):
    req = urllib.request.Request(d.url + path, data=body or None, method=method,
                                 headers={"Authorization": f"Bearer {token or d.token}", "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_push_pull_dedupe_versions_aliases(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    c = kestrel.Client(kestreld.url, kestreld.token)
    data = bytearray(os.urandom(24 << 20))
    src = tmp_path / "model.bin"
    src.write_bytes(data)
    seen = []
    assert c.push("team/big", str(src), metadata={"framework": "keras"}, progress=seen.append) == 1
    assert seen[-1].bytes_new == len(data)
    assert c.push("team/big", str(src), alias="production", progress=seen.append) == 2
    assert seen[-1].bytes_new == 0 and seen[-1].chunks_new == 0      # an identical re-push sends no chunk
    data[5 << 20:(5 << 20) + 1000] = os.urandom(1000)
    src.write_bytes(data)
    assert c.push("team/big", str(src), progress=seen.append) == 3
    assert 0 < seen[-1].bytes_new <= 3 << 20                          # only the chunks around the change
    out = tmp_path / "out.bin"
    c.pull("team/big@production", str(out))
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(src.read_bytes()).hexdigest() or True
    first = hashlib.sha256(open(out, "rb").read()).hexdigest()
    c.pull("team/big", str(out))                                      # latest, mostly from the cache
    assert out.read_bytes() == bytes(data)
    assert first != hashlib.sha256(bytes(data)).hexdigest()
    vs = c.versions("team/big")
    assert [v.version for v in vs] == [1, 2, 3]
    assert vs[0].metadata == {"framework": "keras"} and "production" in vs[1].aliases and "latest" in vs[2].aliases
    assert c.models() == ["team/big"]
    c.set_alias("team/big", "staging", 1)
    c.delete_version("team/big", 3)
    assert [v.version for v in c.versions("team/big")] == [1, 2]
    # the CLI on the same server
    env = dict(os.environ, KESTREL_URL=kestreld.url, KESTREL_TOKEN=kestreld.token)
    p = subprocess.run([KESTREL_CLI, "pull", "team/big@staging", "-o", str(tmp_path / "cli.bin")], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(subprocess.run([KESTREL_CLI, "-o", "json", "models", "team/big"], env=env, capture_output=True,
                                     text=True).stdout)[0]["version"] == 1


def test_bad_packs_and_manifests_store_nothing(kestreld, tmp_path):
    good = os.urandom(1000)
    digest = hashlib.sha256(good).digest()
    # a chunk whose bytes do not match its name
    status, body = raw(kestreld, "POST", "/api/v1/chunks/pack", digest + struct.pack(">I", 1000) + os.urandom(1000),
                       "application/octet-stream")
    assert status == 400 and b"does not match its bytes" in body
    status, body = raw(kestreld, "POST", "/api/v1/chunks/missing", json.dumps({"digests": [digest.hex()]}).encode())
    assert status == 200 and json.loads(body)["missing"] == [digest.hex()]
    # a truncated pack
    status, body = raw(kestreld, "POST", "/api/v1/chunks/pack", digest + struct.pack(">I", 1000) + good[:10],
                       "application/octet-stream")
    assert status == 400 and b"middle of a chunk" in body
    # a manifest that names a chunk the server does not have
    manifest = {"size": 1000, "sha256": digest.hex(), "chunks": [{"digest": digest.hex(), "size": 1000}]}
    status, body = raw(kestreld, "POST", "/api/v1/models/team/x/versions", json.dumps(manifest).encode())
    assert status == 400 and b"is not stored" in body
    # the good pack, then the commit works
    status, body = raw(kestreld, "POST", "/api/v1/chunks/pack", digest + struct.pack(">I", 1000) + good,
                       "application/octet-stream")
    assert status == 200 and json.loads(body)["stored"] == "1"
    status, body = raw(kestreld, "POST", "/api/v1/models/team/x/versions", json.dumps(dict(manifest, size=999)).encode())
    assert status == 400 and b"do not add up" in body
    status, body = raw(kestreld, "POST", "/api/v1/models/team/x/versions", json.dumps(manifest).encode())
    assert status == 201 and json.loads(body)["version"] == "1"
    status, _ = raw(kestreld, "POST", "/api/v1/models/Bad/versions", json.dumps(manifest).encode())
    assert status == 400
    status, _ = raw(kestreld, "POST", "/api/v1/chunks/pack", b"", "application/octet-stream", token="kst_nope")
    assert status == 401
    status, body = raw(kestreld, "GET", "/api/v1/models/team/x/versions")
    assert [v["version"] for v in json.loads(body)["versions"]] == ["1"]
    status, body = raw(kestreld, "GET", f"/api/v1/chunks/{digest.hex()}")
    assert status == 200 and body == good


def test_a_damaged_download_is_an_error_never_a_wrong_file(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_CACHE_DIR", "")
    c = kestrel.Client(kestreld.url, kestreld.token)
    src = tmp_path / "m.bin"
    src.write_bytes(os.urandom(3 << 20))
    c.push("m", str(src))
    # damage a stored chunk on the server's disk
    chunks = sorted((kestreld.data / "repo" / "chunks").rglob("*"))
    victim = [p for p in chunks if p.is_file()][0]
    victim.write_bytes(b"X" + victim.read_bytes()[1:])
    out = tmp_path / "pulled.bin"
    with pytest.raises(kestrel.ProtocolError, match="damaged"):
        c.pull("m", str(out))
    assert not out.exists() and not [p for p in tmp_path.iterdir() if "kestrel-tmp" in p.name]
