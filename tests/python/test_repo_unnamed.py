"""Packs of chunks. Chunks sent unnamed: a push of a big file that kestreld lacks leaves the chunks'
digests to kestreld, which hashes every chunk it receives anyway (proto/kestrel.proto PackResult,
lib/repo/push.c). The version is the same as a hashed push's; what kestreld already holds is still found
and not sent again. And a pack curl must send again from its start."""
import base64
import hashlib
import json
import os
import struct
import subprocess
import time

import pytest

from repo_api import chunk_files, raw

kestrel = pytest.importorskip("kestrel")

MIB = 1 << 20


def metric(d, name):
    text = raw(d, "GET", "/metrics")[1].decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def unnamed_pack(*chunks):
    return b"".join(bytes(32) + struct.pack(">I", len(c)) + c for c in chunks)


def push_midway(kestreld, tmp_path, name, path):
    """The CLI pushing path as name, once kestreld has stored 100 of its chunks (its stderr piped)."""
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.Popen([os.environ["KESTREL_CLI"], "push", name, str(path)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while len(chunk_files(kestreld)) < 100 and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    return p


def test_a_new_big_file_goes_unnamed_and_pulls_back_the_same(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    c = kestrel.Client(kestreld.url, kestreld.token)
    data = os.urandom(96 * MIB)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    seen = []

    def report(p):   # on the hashing thread: past the probe, it waits 0.1 s a report (8 MiB read)
        seen.append(p)
        if 8 * MIB <= p.bytes_done < 40 * MIB:
            time.sleep(0.1)   # kestreld's answer to the probe comes in a loaded machine's time, not
                              # in the 16 MiB of hashing (about 20 ms) before the bound below is lost

    assert c.push("team/big", str(src), progress=report) == 1
    named = metric(kestreld, "kestrel_repo_push_named_bytes_total")
    # all but the first bytes, which asked kestreld whether it had them (push.c: PROBE_BYTES)
    assert 64 * MIB < named < len(data), named
    assert seen[-1].bytes_new == len(data)
    v = c.versions("team/big")[0]
    assert v.sha256 == hashlib.sha256(data).hexdigest()      # the file's own SHA-256, as for a hashed push
    out = tmp_path / "out.bin"
    c.pull("team/big", str(out))
    assert out.read_bytes() == data
    # every stored chunk is its bytes' digest
    for f in chunk_files(kestreld):
        assert hashlib.sha256(f.read_bytes()).hexdigest() == f.parent.name + f.name
    # the stat cache holds the digests kestreld gave: an unchanged re-push reads nothing, sends nothing
    assert c.push("team/big", str(src), progress=seen.append) == 2
    assert seen[-1].bytes_new == 0
    # so does a push from another cache (every chunk hashed, every one found): nothing sent unnamed
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache2"))
    c2 = kestrel.Client(kestreld.url, kestreld.token)
    assert c2.push("team/copy", str(src), progress=seen.append) == 1
    assert seen[-1].bytes_new == 0
    assert metric(kestreld, "kestrel_repo_push_named_bytes_total") == named


def test_what_kestreld_holds_is_found_after_a_new_start(kestreld, tmp_path, monkeypatch):
    """A file whose first 16 MiB are new and whose rest kestreld holds: its first chunks look new, so
    later ones go unnamed, until kestreld answers that it held some of them; the push hashes the rest
    then (what it read ahead meanwhile, up to about 200 MiB, went unnamed) and sends none of the rest.
    Stored once all the same."""
    c = kestrel.Client(kestreld.url, kestreld.token)
    old = os.urandom(256 * MIB)
    (tmp_path / "old.bin").write_bytes(old)
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    assert c.push("team/m", str(tmp_path / "old.bin")) == 1
    stored = sum(f.stat().st_size for f in chunk_files(kestreld))
    new = os.urandom(16 * MIB) + old[16 * MIB:]
    (tmp_path / "old.bin").unlink()
    (tmp_path / "new.bin").write_bytes(new)
    seen = []
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache2"))   # no stat cache entry for it
    assert kestrel.Client(kestreld.url, kestreld.token).push("team/m", str(tmp_path / "new.bin"),
                                                             progress=seen.append) == 2
    assert metric(kestreld, "kestrel_repo_push_named_bytes_total") > 256 * MIB   # the first push's, and some
    assert seen[-1].bytes_new < 240 * MIB, seen[-1].bytes_new      # not all 256 MiB: the rest was found
    grown = sum(f.stat().st_size for f in chunk_files(kestreld)) - stored
    had = {ch["digest"] for ch in json.loads(raw(kestreld, "GET", "/api/v1/models/team/m/versions/1")[1])["chunks"]}
    fresh = {ch["digest"]: int(ch["size"]) for ch in json.loads(raw(kestreld, "GET", "/api/v1/models/team/m/versions/2")[1])["chunks"]
             if ch["digest"] not in had}
    assert grown == sum(fresh.values()), (grown, sum(fresh.values()))   # each chunk new to kestreld, once
    # the new 16 MiB, and the chunks cut until FastCDC meets the old cuts again: 0.05-1.30 MiB more in 20
    # runs here, 2.12 MiB once in CI (random bytes: where the cuts meet again varies); 18 MiB was too tight
    assert grown < 20 * MIB, grown
    assert c.versions("team/m")[1].sha256 == hashlib.sha256(new).hexdigest()


def test_kestreld_names_an_unnamed_chunk_and_bounds_them(kestreld):
    a, b = os.urandom(70_000), os.urandom(1000)
    named_b = hashlib.sha256(b).digest()
    status, body = raw(kestreld, "POST", "/api/v1/chunks/missing?names_chunks=1", json.dumps({"digests": []}).encode())
    assert status == 200 and json.loads(body).get("names_chunks") is True
    status, body = raw(kestreld, "POST", "/api/v1/chunks/missing", json.dumps({"digests": []}).encode())
    assert status == 200 and json.loads(body)["names_chunks"] is False   # said only to a client that asks
    # one unnamed, one named, one unnamed again: the answer names the unnamed ones, in order
    body = unnamed_pack(a) + named_b + struct.pack(">I", len(b)) + b + unnamed_pack(b)
    status, body = raw(kestreld, "POST", "/api/v1/chunks/pack", body, "application/octet-stream")
    assert status == 200, body
    res = json.loads(body)
    assert base64.b64decode(res["named"]) == hashlib.sha256(a).digest() + named_b
    assert res["stored"] == "2"                                       # b came twice: stored once
    assert {f.parent.name + f.name for f in chunk_files(kestreld)} == {hashlib.sha256(a).hexdigest(), named_b.hex()}
    # a named chunk is still checked against its bytes
    status, body = raw(kestreld, "POST", "/api/v1/chunks/pack", named_b + struct.pack(">I", 5) + b"wrong",
                       "application/octet-stream")
    assert status == 400 and b"does not match its bytes" in body
    # at most 16,384 unnamed chunks a pack: a pack of 16,385 empty ones is refused at the last one
    status, body = raw(kestreld, "POST", "/api/v1/chunks/pack", unnamed_pack(*[b""] * 16385), "application/octet-stream")
    assert status == 400 and b"at most 16384 chunks unnamed" in body, body
    status, body = raw(kestreld, "POST", "/api/v1/chunks/pack", unnamed_pack(*[b""] * 16384), "application/octet-stream")
    assert status == 200 and len(base64.b64decode(json.loads(body)["named"])) == 32 * 16384
    before = chunk_files(kestreld)
    # who may: a read-scoped token sends no pack, named or not, and stores nothing
    reader = json.loads(raw(kestreld, "POST", "/api/v1/tokens", json.dumps({"user": "rita", "scope": "read"}).encode())[1])["token"]
    c = os.urandom(2000)
    status, _ = raw(kestreld, "POST", "/api/v1/chunks/pack", unnamed_pack(c), "application/octet-stream", token=reader)
    assert status == 403
    assert chunk_files(kestreld) == before


def test_a_kestreld_that_does_not_name_chunks_gets_every_digest(kestreld, tmp_path, monkeypatch):
    """An older kestreld (played by a proxy that drops names_chunks and fills_digests from its answers)
    is never sent a chunk unnamed, which it would refuse as a chunk that does not match its bytes."""
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    data = os.urandom(80 * MIB)
    (tmp_path / "big.bin").write_bytes(data)
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "older")
    try:
        c = kestrel.Client(proxy.url, kestreld.token)
        assert c.push("team/old", str(tmp_path / "big.bin")) == 1
        assert proxy.damaged > 0                                       # the answers it changed
    finally:
        proxy.close()
    assert metric(kestreld, "kestrel_repo_push_named_bytes_total") == 0
    c = kestrel.Client(kestreld.url, kestreld.token)
    assert c.versions("team/old")[0].sha256 == hashlib.sha256(data).hexdigest()


def test_digests_kestreld_named_are_trusted_for_pushes_to_it_only(kestreld, tmp_path, monkeypatch):
    """The stat cache keeps what a push learned of a file, and a later push of it to any repository
    takes that for true. Digests kestreld named are kept with its mark: a push of the same file to
    another repository (here a file:// store) hashes it, and does not take kestreld's word."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(cache))
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(80 * MIB))
    os.utime(src, (time.time() - 60,) * 2)
    entry = lambda: next((cache.parent / "cache.stat").iterdir()).read_bytes()
    mark = hashlib.sha256(kestreld.url.encode()).hexdigest()[:16]
    c = kestrel.Client(kestreld.url, kestreld.token)
    assert c.push("team/m", str(src)) == 1
    assert entry().split(b"\n")[1].startswith(b"N " + mark.encode() + b" ")   # named by this kestreld
    seen = []
    assert c.push("team/m", str(src), progress=seen.append) == 2                # to it: a stat, no hash
    assert seen[-1].bytes_new == 0 and entry().split(b"\n")[1].startswith(b"N " + mark.encode())
    store = kestrel.Client(f"file://{tmp_path / 'store'}")
    assert store.push("team/m", str(src)) == 1                                  # elsewhere: hashed here
    assert entry().split(b"\n")[1].startswith(b"F ")
    assert store.versions("team/m")[0].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()
    assert c.push("team/m", str(src), progress=seen.append) == 3                # what was hashed here holds
    assert seen[-1].bytes_new == 0 and entry().split(b"\n")[1].startswith(b"F ")


def test_a_file_of_repeated_chunks_is_hashed(kestreld, tmp_path, monkeypatch):
    """A file whose first chunks repeat (zeros: a preallocated or sparse file) is not taken for new:
    hashed, each repeated chunk goes once."""
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "zeros.bin"
    with open(src, "wb") as f:
        f.truncate(128 * MIB)
    seen = []
    assert kestrel.Client(kestreld.url, kestreld.token).push("team/zeros", str(src), progress=seen.append) == 1
    assert seen[-1].bytes_new <= 2 * MIB, seen[-1].bytes_new
    assert metric(kestreld, "kestrel_repo_push_named_bytes_total") == 0


def test_a_push_whose_kestreld_dies_mid_pack_says_it_cannot_connect(kestreld, tmp_path):
    """kestreld killed while a pack streams in: curl connects again to send the pack from its start,
    finds no kestreld, and the push says so. Without a rewind for the pack, the push ended with curl's
    "Send failed since rewinding of the data stream failed" (2 of 3 tries; a hostile test)."""
    (tmp_path / "big.bin").write_bytes(os.urandom(400 * MIB))
    p = push_midway(kestreld, tmp_path, "team/cut", tmp_path / "big.bin")
    kestreld.proc.kill()
    kestreld.proc.wait()
    err = p.communicate(timeout=120)[1]
    assert p.returncode != 0 and "connect" in err and "rewind" not in err, err
    kestreld.restart()                                           # and a push to it works again
    assert kestrel.Client(kestreld.url, kestreld.token).push("team/cut", str(tmp_path / "big.bin")) == 1


def test_a_file_renamed_over_the_one_pushed_fails_the_push(kestreld, tmp_path):
    """A save that writes a temp and renames it over the file, while the push sends the file's unnamed
    chunks: the sender, opening the file again by its path, would find the new one and send its bytes at
    the old one's cuts, which kestreld names as they are; a version of neither file (found by a hostile
    test). The push fails, and makes no version."""
    model, other = tmp_path / "model.bin", tmp_path / "model.tmp"
    model.write_bytes(os.urandom(256 * MIB))
    other.write_bytes(os.urandom(256 * MIB))
    old = time.time() - 60
    os.utime(model, (old, old))
    p = push_midway(kestreld, tmp_path, "team/saved", model)
    os.rename(other, model)
    err = p.communicate(timeout=120)[1]
    assert p.returncode != 0 and "changed while it was pushed" in err, err
    status, _ = raw(kestreld, "GET", "/api/v1/models/team/saved/versions")
    assert status == 404                                          # no version


def test_a_write_hidden_by_a_link_fails_a_push_of_unnamed_chunks(kestreld, tmp_path):
    """Bytes written in place while the push sends a big file's unnamed chunks, the mtime put back and a
    hard link made: a link alone moves the ctime and changes no byte, so a hashed push takes the bytes
    for one version; but unnamed chunks were cut from one read and sent from another, and kestreld
    names whatever came (a hostile test). Such a push fails."""
    model = tmp_path / "model.bin"
    model.write_bytes(os.urandom(256 * MIB))
    old = time.time() - 60
    os.utime(model, (old, old))
    p = push_midway(kestreld, tmp_path, "team/linked", model)
    with open(model, "r+b") as f:
        f.seek(200 * MIB)
        f.write(os.urandom(MIB))
    os.utime(model, (old, old))
    os.link(model, tmp_path / "model.hard")
    err = p.communicate(timeout=120)[1]
    assert p.returncode != 0 and "changed while it was pushed" in err, err
    assert raw(kestreld, "GET", "/api/v1/models/team/linked/versions")[0] == 404
