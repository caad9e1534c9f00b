"""The model repository through the real kestreld: push (packs over parallel streams, only the
chunks it lacks), pull (verified, cached), versions, aliases; bad packs and manifests store nothing."""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import time
import urllib.request

import pytest

from conftest import KESTREL_CLI
from repo_api import digest_bytes, raw

kestrel = pytest.importorskip("kestrel")


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
    orig = bytes(data)
    data[5 << 20:(5 << 20) + 1000] = os.urandom(1000)
    src.write_bytes(data)
    assert c.push("team/big", str(src), progress=seen.append) == 3
    assert 0 < seen[-1].bytes_new <= 3 << 20                          # only the chunks around the change
    out = tmp_path / "out.bin"
    c.pull("team/big@production", str(out))
    assert out.read_bytes() == orig
    c.pull("team/big", str(out))                                      # latest, mostly from the cache
    assert out.read_bytes() == bytes(data)
    vs = c.versions("team/big")
    assert [v.version for v in vs] == [1, 2, 3]
    assert vs[0].metadata == {"framework": "keras"} and "production" in vs[1].aliases and "latest" in vs[2].aliases
    assert vs[0].chunks == vs[1].chunks >= 2 and vs[2].chunks >= 2       # a listing counts them (it said 0)
    assert c.models() == ["team/big"]
    # one version by its ref, its listing alone (GET .../versions?version=SEL): what kestrel pull without
    # DEST reads for the pushed name, where it read every version's
    assert [c.version(r).version for r in ("team/big", "team/big@latest", "team/big@production", "team/big@1")] == \
        [3, 3, 2, 1]
    assert c.version("team/big@1").metadata == {"framework": "keras"}
    with pytest.raises(kestrel.NotFoundError):
        c.version("team/big@9")
    for sel, want in (("2", 200), ("production", 200), ("9", 404), ("nope", 404), ("Bad!", 400), ("", 400)):
        status, body = raw(kestreld, "GET", f"/api/v1/models/team/big/versions?version={sel}")
        assert status == want, (sel, status, body)
        if status == 200:
            assert [v["version"] for v in json.loads(body)["versions"]] == ["2"]
    c.set_alias("team/big", "staging", 1)
    c.delete_version("team/big", 3)
    assert [v.version for v in c.versions("team/big")] == [1, 2]
    # the CLI on the same server
    env = dict(os.environ, KESTREL_URL=kestreld.url, KESTREL_TOKEN=kestreld.token)
    p = subprocess.run([KESTREL_CLI, "pull", "team/big@staging", "-o", str(tmp_path / "cli.bin")], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(subprocess.run([KESTREL_CLI, "-o", "json", "models", "team/big"], env=env, capture_output=True,
                                     text=True).stdout)["versions"][0]["version"] == "1"   # the API's ManifestList


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
    # sizes that add up but are not the stored chunk's, and a whole-file digest that is not the
    # chunks': both refused, no version (the landed kestreld committed them as latest)
    lie = {"size": 999, "sha256": digest.hex(), "chunks": [{"digest": digest.hex(), "size": 999}]}
    status, body = raw(kestreld, "POST", "/api/v1/models/team/x/versions", json.dumps(lie).encode())
    assert status == 400 and b"holds 1000 bytes, not the 999" in body, body
    lie = dict(manifest, sha256="ab" * 32)
    status, body = raw(kestreld, "POST", "/api/v1/models/team/x/versions", json.dumps(lie).encode())
    assert status == 400 and b"the chunks hash to" in body, body
    status, body = raw(kestreld, "GET", "/api/v1/models/team/x/versions")
    assert status == 404 or json.loads(body).get("versions", []) == []
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
    assert c.versions("m")[-1].sha256   # settled (server/repo_settle.h): a damaged chunk is found by the download
    # damage a stored chunk on the server's disk
    chunks = sorted((kestreld.data / "repo" / "chunks").rglob("*"))
    victim = [p for p in chunks if p.is_file()][0]
    stored = victim.read_bytes()
    victim.write_bytes(bytes([stored[0] ^ 0xff]) + stored[1:])   # "X" left a chunk that began with X as it was
    out = tmp_path / "pulled.bin"
    with pytest.raises(kestrel.ProtocolError, match="damaged"):
        c.pull("m", str(out))
    assert not out.exists() and not [p for p in tmp_path.iterdir() if "kestrel-tmp" in p.name]
    # the pull reported it: the server re-hashed its copy and quarantined it, so a re-push of the
    # same file sends that chunk again (the landed kestreld said "success" and stayed broken)
    assert not victim.exists() and list((kestreld.data / "repo" / "quarantine").iterdir())
    c.push("m", str(src))
    c.pull("m@1", str(out))
    assert out.read_bytes() == src.read_bytes()                    # version 1 healed


def test_fsck_finds_and_quarantines_damage(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_CACHE_DIR", "")
    c = kestrel.Client(kestreld.url, kestreld.token)
    for name in ("a", "b"):
        f = tmp_path / name
        f.write_bytes(os.urandom(1 << 20))
        c.push(f"team/{name}", str(f))
    r = subprocess.run([KESTREL_CLI, "admin", "fsck"], capture_output=True, text=True, env=kestreld.env())
    assert r.returncode == 0 and "0 damaged" in r.stdout, r.stdout + r.stderr
    victim = [p for p in sorted((kestreld.data / "repo" / "chunks").rglob("*")) if p.is_file()][0]
    victim.write_bytes(b"\0" * victim.stat().st_size)
    r = subprocess.run([KESTREL_CLI, "admin", "fsck"], capture_output=True, text=True, env=kestreld.env())
    assert r.returncode == 1 and "1 damaged" in r.stdout, r.stdout + r.stderr
    damaged = [line for line in r.stdout.splitlines() if line.startswith("team/")]
    assert len(damaged) == 1 and damaged[0].endswith("@1"), r.stdout
    alice = kestreld.api("POST", "/api/v1/tokens", {"user": "alice"})[1]["token"]
    assert kestreld.api("POST", "/api/v1/admin/fsck", token=alice)[0] == 403


@pytest.mark.parametrize("mode", ["corrupt", "truncate"])
def test_a_damaged_transfer_through_a_fault_proxy_is_an_error(kestreld, tmp_path, monkeypatch, mode):
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "m.bin"
    src.write_bytes(os.urandom(4 << 20))
    kestrel.Client(kestreld.url, kestreld.token).push("team/m", str(src))
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), mode)
    try:
        out = tmp_path / "pulled.bin"
        with pytest.raises(kestrel.KestrelError) as info:
            kestrel.Client(proxy.url, kestreld.token).pull("team/m", str(out))
        assert proxy.damaged >= 1, info.value
        assert ("damaged" if mode == "corrupt" else "chunk download") in str(info.value)
        assert not out.exists() and not [p for p in tmp_path.iterdir() if "kestrel-tmp" in p.name]
        assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]   # a failed pull keeps nothing
    finally:
        proxy.close()
    # the same pull without the proxy succeeds
    kestrel.Client(kestreld.url, kestreld.token).pull("team/m", str(tmp_path / "ok.bin"))
    assert (tmp_path / "ok.bin").read_bytes() == src.read_bytes()


def test_a_push_hashes_at_most_two_batches_ahead_of_a_slow_repository(kestreld, tmp_path, monkeypatch):
    """The hashing waits for the sender once a batch (64 MiB) waits for it beside the one it sends:
    a push of 512 MiB through a link of 64 MiB/s is never more than about 200 MiB (the first batch,
    the one being sent, the one waiting, the one being hashed) ahead of what the repository took.
    Hashing to the end of the file first left the repository the cores' leftovers meanwhile and its
    disk the whole file at the end (lib/repo/push.c, QUEUED_BYTES): here 497 MiB ahead, 193 MiB now."""
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for _ in range(8):
            f.write(os.urandom(64 << 20))
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "slow", rate=64 << 20)
    ahead = []
    try:
        kestrel.Client(proxy.url, kestreld.token).push(
            "team/slow", str(src), progress=lambda p: ahead.append((p.bytes_done - p.bytes_new) >> 20))
    finally:
        proxy.close()
        src.unlink()   # 512 MiB: pytest keeps the last runs' folders
    assert len(ahead) > 20 and ahead[-1] == 0, ahead   # every byte new, all sent, reports all along
    assert max(ahead) <= 232, ahead


def test_an_unchanged_re_push_asks_for_its_chunks_in_few_questions(kestreld, tmp_path, monkeypatch):
    """What the stat cache vouches for is not read, so it neither counts toward how far the hashing
    may run ahead of the sender (64 MiB read) nor makes a batch of its own: the 64 files of 8 MiB
    (about 2,000 chunks) pushed again unchanged are asked about in one question (up to 16,384 chunks
    each), however the machine's load paces the push and its sender. Before: one a batch of 64 MiB
    (9 or more); then one each time the sender was idle at a 64 MiB hand-over (2 here, 5 in CI)."""
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "files"
    src.mkdir()
    old = time.time() - 60   # a file changed within a second of its hashing is never vouched for
    for i in range(64):
        (src / f"f{i:02d}").write_bytes(os.urandom(8 << 20))
        os.utime(src / f"f{i:02d}", (old, old))
    c = kestrel.Client(kestreld.url, kestreld.token)
    c.push("team/files", str(src))
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "pass")
    try:
        seen = []
        kestrel.Client(proxy.url, kestreld.token).push("team/files", str(src), progress=seen.append)
    finally:
        proxy.close()
        shutil.rmtree(src)   # 512 MiB: pytest keeps the last runs' folders
    assert seen[-1].bytes_new == 0
    asked = proxy.sent.count(b"POST /api/v1/chunks/missing")
    assert asked == 1, asked


def test_the_pull_cache_is_bounded_least_recently_used_first(kestreld, tmp_path, monkeypatch):
    from faultproxy import FaultProxy
    cache = tmp_path / "cache"
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(cache))
    monkeypatch.setenv("KESTREL_CACHE_MAX", "3M")
    c = kestrel.Client(kestreld.url, kestreld.token)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(os.urandom(2 << 20))
        c.push(f"team/{name}", str(tmp_path / name))

    def packs():
        return sorted(p for p in (cache / "packs").iterdir() if not p.name.endswith(".idx"))

    c.pull("team/a", str(tmp_path / "a.out"))
    # the cache keeps a hard link to the pulled file and an index of its chunks: nothing written twice
    assert len(packs()) == 1 and (tmp_path / "a.out").stat().st_nlink == 2
    assert packs()[0].stat().st_ino == (tmp_path / "a.out").stat().st_ino
    # a second pull is served from the cache: through a proxy that damages every chunk download it
    # still succeeds, and it adds no pack
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "corrupt")
    try:
        kestrel.Client(proxy.url, kestreld.token).pull("team/a", str(tmp_path / "a2.out"))
        assert proxy.damaged == 0
    finally:
        proxy.close()
    assert (tmp_path / "a2.out").read_bytes() == (tmp_path / "a").read_bytes() and len(packs()) == 1
    # a pack changed in place is never trusted: dropped, and the chunks come from the server again
    with open(tmp_path / "a.out", "r+b") as f:
        f.write(b"\0" * 16)
    c.pull("team/a", str(tmp_path / "a3.out"))
    assert (tmp_path / "a3.out").read_bytes() == (tmp_path / "a").read_bytes()
    assert len(packs()) == 1 and packs()[0].stat().st_ino == (tmp_path / "a3.out").stat().st_ino
    # b does not fit beside a within 3M: the least recently used pack goes
    c.pull("team/b", str(tmp_path / "b.out"))
    assert (tmp_path / "b.out").read_bytes() == (tmp_path / "b").read_bytes()
    assert [p.stat().st_ino for p in packs()] == [(tmp_path / "b.out").stat().st_ino]
    assert sum(p.stat().st_size for p in packs()) <= 3 << 20
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")        # 0: no cache at all
    c.pull("team/a", str(tmp_path / "a4.out"))
    assert (tmp_path / "a4.out").read_bytes() == (tmp_path / "a").read_bytes()
    assert (tmp_path / "a4.out").stat().st_nlink == 1


@pytest.mark.parametrize("where", ["http", "file"])
def test_a_file_that_changes_while_it_is_pushed_is_an_error_and_no_version(kestreld, tmp_path, monkeypatch, where):
    """The push reads a file twice (hashing, then sending what the repository lacks, on another
    thread): a change between the two is found, by the push or by kestreld, and nothing commits."""
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    url = kestreld.url if where == "http" else f"file://{tmp_path / 'store'}"
    c = kestrel.Client(url, kestreld.token)
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(96 << 20))
    changed = []

    def change(p):
        if p.bytes_done > 0 and not changed:   # the first 8 MiB are hashed: rewrite some of them
            with open(src, "r+b") as f:
                f.write(os.urandom(4 << 20))
            changed.append(p.bytes_done)
    with pytest.raises(kestrel.KestrelError) as info:
        c.push("team/moving", str(src), progress=change)
    assert changed and isinstance(info.value, kestrel.KestrelIOError) and "changed" in str(info.value), info.value
    with pytest.raises(kestrel.NotFoundError):
        c.versions("team/moving")
    assert c.push("team/moving", str(src)) == 1   # left alone, it pushes


def test_a_commit_has_its_own_bound_above_the_body_limit(tmp_path, monkeypatch):
    """A directory's manifest grows with its files (200,000 small ones are ~20 MB as a push sends it,
    a file of one chunk without its digest: kestreld fills it in): a commit is bounded by
    --max-manifest, not --max-body; past it, 413 and no version."""
    from conftest import Daemon
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    d = Daemon(tmp_path / "d", "--max-body", "72000", "--max-manifest", "120000")
    try:
        c = kestrel.Client(d.url, d.token)
        for n in (500, 1000):
            src = tmp_path / f"src{n}"
            for i in range(n):
                (src / f"d{i // 100}").mkdir(parents=True, exist_ok=True)
                # long names: a manifest grows with them, the query of which chunks kestreld lacks
                # (66 bytes a chunk, 66 KB for 1,000) does not
                (src / f"d{i // 100}" / f"f{i:04d}{'-long-name' * 9}").write_bytes(os.urandom(64) + str(i).encode())
            if n == 500:   # ~90 KB of manifest: over --max-body, within --max-manifest
                assert c.push("team/many", str(src)) == 1
                c.pull("team/many", str(tmp_path / "out"))
                assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "out")]).returncode == 0
            else:          # ~180 KB: over it
                with pytest.raises(kestrel.TooLargeError, match="limit of 120000"):
                    c.push("team/many", str(src))
                assert [v.version for v in c.versions("team/many")] == [1]
        status, _ = raw(d, "POST", "/api/v1/tokens", b"x" * 80000)   # any other body keeps --max-body
        assert status == 413
    finally:
        assert d.stop() == 0


def test_a_pulled_directory_is_its_own_pack_in_the_pull_cache(kestreld, tmp_path, monkeypatch):
    """A directory's chunks go straight into its files; the cache keeps an index of them where they
    are (a tree pack), no second copy; what changed there since is never trusted."""
    from faultproxy import FaultProxy
    cache = tmp_path / "cache"
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(cache))
    c = kestrel.Client(kestreld.url, kestreld.token)
    src = tmp_path / "src"
    for i in range(40):
        (src / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 4}" / f"f{i}").write_bytes(os.urandom(30000 + 1000 * i))
    (src / "big.bin").write_bytes(os.urandom(3 << 20))   # several chunks: read back and hashed
    (src / "empty").write_bytes(b"")
    c.push("team/ds", str(src))
    c.pull("team/ds", str(tmp_path / "a"))
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "a")]).returncode == 0
    trees = list((cache / "packs").glob("*.tree"))
    assert len(trees) == 1 and not list((cache / "packs").glob("*.idx"))   # no copy of the bytes
    # pulled again elsewhere through a proxy that damages every chunk it passes: all from the pack
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "corrupt")
    try:
        kestrel.Client(proxy.url, kestreld.token).pull("team/ds", str(tmp_path / "b"))
        assert proxy.damaged == 0
    finally:
        proxy.close()
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "b")]).returncode == 0
    # a file of the pack changed in place: the pack is dropped, the chunks come from the server
    with open(tmp_path / "a" / "d1" / "f1", "r+b") as f:
        f.write(b"\0" * 16)
    c.pull("team/ds", str(tmp_path / "c"))
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "c")]).returncode == 0
    assert (tmp_path / "a" / "d1" / "f1").read_bytes()[:16] == b"\0" * 16   # the user's file untouched
    assert [t.read_text().split("\n")[1] for t in (cache / "packs").glob("*.tree")] == [str(tmp_path / "c")]
    # a pull over an existing directory replaces it whole, and leaves nothing beside it
    c.pull("team/ds", str(tmp_path / "c"))
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "c")]).returncode == 0
    assert not [p.name for p in tmp_path.iterdir() if ".kestrel-" in p.name]
    # no cache, every chunk damaged on the way: an error, dest untouched, no half directory beside it
    monkeypatch.setenv("KESTREL_CACHE_MAX", "0")
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "corrupt")
    try:
        with pytest.raises(kestrel.ProtocolError, match="damaged"):
            kestrel.Client(proxy.url, kestreld.token).pull("team/ds", str(tmp_path / "c"))
    finally:
        proxy.close()
    assert subprocess.run(["diff", "-r", str(src), str(tmp_path / "c")]).returncode == 0
    assert not [p.name for p in tmp_path.iterdir() if ".kestrel-" in p.name]


def test_tree_packs_count_toward_the_cache_bound_least_recently_used_first(kestreld, tmp_path, monkeypatch):
    """A tree pack holds none of the bytes, but its index is the cache's, and every pull loads it:
    indexes count toward KESTREL_CACHE_MAX like a pack's bytes, least recently used first, and all
    together are at most 64 MiB (lib/repo/chunk_cache.c: only their count, 32, was bounded, and 32
    indexes of 200,000 files would have been about 0.5 GiB for a pull to load)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(cache))
    c = kestrel.Client(kestreld.url, kestreld.token)
    for name in ("a", "b", "c"):
        src = tmp_path / f"src-{name}"
        src.mkdir()
        for i in range(3000):   # an index of about 250 KB
            (src / f"f{i:04d}").write_bytes(f"{name}{i}".encode())
        c.push(f"team/{name}", str(src))

    def trees():
        return sorted(t.read_text().split("\n")[1] for t in (cache / "packs").glob("*.tree"))

    monkeypatch.setenv("KESTREL_CACHE_MAX", "600K")   # two of them fit, not three
    c.pull("team/a", str(tmp_path / "a"))
    c.pull("team/b", str(tmp_path / "b"))
    assert trees() == [str(tmp_path / "a"), str(tmp_path / "b")]
    c.pull("team/c", str(tmp_path / "c"))
    assert trees() == [str(tmp_path / "b"), str(tmp_path / "c")]
    assert sum(p.stat().st_size for p in (cache / "packs").iterdir()) <= 600 << 10
    assert subprocess.run(["diff", "-r", str(tmp_path / "src-c"), str(tmp_path / "c")]).returncode == 0


def make_tree(root):
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "weights.bin").write_bytes(os.urandom(3 << 20))
    (root / "sub" / "config.json").write_text('{"layers": 3}\n')
    (root / "sub" / "deeper" / "shard-0").write_bytes(os.urandom(700_000))
    (root / "empty.txt").write_bytes(b"")
    os.chmod(root / "sub" / "config.json", 0o600)


def same_tree(a, b):
    fa = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert fa == fb
    for f in fa:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
        assert (a / f).stat().st_mode & 0o777 == (b / f).stat().st_mode & 0o777, f


@pytest.mark.parametrize("door", ["http", "file"])
def test_a_directory_pushes_as_a_tree_and_pulls_back_verified(kestreld, tmp_path, monkeypatch, door):
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    c = kestrel.Client(kestreld.url, kestreld.token) if door == "http" else \
        kestrel.Client(f"file://{tmp_path / 'store'}")
    src = tmp_path / "dataset"
    make_tree(src)
    seen = []
    assert c.push("team/dataset", str(src), progress=seen.append) == 1
    total = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    assert seen[-1].bytes_done == seen[-1].bytes_total == total and seen[-1].bytes_new == total
    # change one file: only its changed chunks travel
    with open(src / "weights.bin", "r+b") as f:
        f.seek(1 << 20)
        f.write(os.urandom(1000))
    (src / "sub" / "new.txt").write_text("added\n")
    assert c.push("team/dataset", str(src), progress=seen.append) == 2
    # at most the chunk holding the change and the next (a boundary moved), each at most 1 MiB, and
    # the new file: of 3.8 MB (1 MiB flaked when the random data put the change in a big chunk)
    assert 0 < seen[-1].bytes_new <= (2 << 20) + 4096, seen[-1].bytes_new
    out = tmp_path / "out"
    c.pull("team/dataset@2", str(out))
    same_tree(src, out)
    c.pull("team/dataset@1", str(out))     # an existing directory is replaced, never mixed
    assert not (out / "sub" / "new.txt").exists()
    assert [v.version for v in c.versions("team/dataset")] == [1, 2]
    assert not list(tmp_path.glob("out.kestrel-*")), "temp files left behind"
    # what cannot be stored is refused before anything is sent
    (src / "link").symlink_to("weights.bin")
    with pytest.raises(kestrel.KestrelError, match="not a regular file"):
        c.push("team/dataset", str(src))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(kestrel.KestrelError, match="empty directory"):
        c.push("team/dataset", str(empty))
    assert [v.version for v in c.versions("team/dataset")] == [1, 2]
    # a file where the directory would go is not overwritten
    (tmp_path / "taken").write_text("mine")
    with pytest.raises(kestrel.KestrelError, match="not a directory"):
        c.pull("team/dataset", str(tmp_path / "taken"))
    assert (tmp_path / "taken").read_text() == "mine"
    # dest is the path made: a link there is never followed, a directory never taken for a folder to
    # pull into (kestrel pull REF DIR does that); each said before a byte is fetched
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(kestrel.AlreadyExistsError, match="is a symbolic link"):
        c.pull("team/dataset", str(tmp_path / "link"))
    assert (tmp_path / "link").is_symlink() and not list((tmp_path / "target").iterdir())
    (tmp_path / "one.bin").write_bytes(b"1" * 1000)
    c.push("team/onefile", str(tmp_path / "one.bin"))
    with pytest.raises(kestrel.AlreadyExistsError, match="is a directory: a file version replaces only"):
        c.pull("team/onefile", str(tmp_path / "target"))
    assert not list((tmp_path / "target").iterdir()) and not list(tmp_path.glob("target.kestrel-*"))


def test_a_keras_model_saved_as_a_directory_round_trips(kestreld, tmp_path):
    import keras
    c = kestrel.Client(kestreld.url, kestreld.token)
    model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    model.save(str(tmp_path / "saved"), zipped=False)
    assert c.push("team/keras-dir", str(tmp_path / "saved")) == 1
    c.pull("team/keras-dir", str(tmp_path / "pulled"))
    again = keras.saving.load_model(str(tmp_path / "pulled"))
    x = keras.random.normal((3, 8))
    assert keras.ops.convert_to_numpy(again(x)).tolist() == keras.ops.convert_to_numpy(model(x)).tolist()
    # the same through kestrel:// paths
    __import__("kestrel.keras")   # the kestrel:// hooks
    os.environ.update(KESTREL_URL=kestreld.url, KESTREL_TOKEN=kestreld.token)
    try:
        model.save("kestrel://team/keras-dir", zipped=False)
        assert [v.version for v in c.versions("team/keras-dir")] == [1, 2]
        again = keras.saving.load_model("kestrel://team/keras-dir@2")
        assert keras.ops.convert_to_numpy(again(x)).tolist() == keras.ops.convert_to_numpy(model(x)).tolist()
    finally:
        for k in ("KESTREL_URL", "KESTREL_TOKEN"):
            os.environ.pop(k, None)


def test_bad_tree_manifests_are_refused_and_create_no_version(kestreld, tmp_path):
    c = kestrel.Client(kestreld.url, kestreld.token)
    src = tmp_path / "t"
    make_tree(src)
    c.push("team/tree", str(src))
    status, body = raw(kestreld, "GET", "/api/v1/models/team/tree/versions/1")
    good = json.loads(body)
    assert status == 200 and len(good["files"]) == 4 and good["file_count"] == "4"

    def empty_files(m, *paths):
        empty = hashlib.sha256(b"").hexdigest()
        m.update(files=[{"path": p, "size": "0", "sha256": empty, "mode": 0o644} for p in paths], chunks=[], size="0")
        m.pop("sha256")

    def commit(m):
        m = {k: v for k, v in m.items() if k not in ("version", "created_ms", "aliases", "file_count")}
        return raw(kestreld, "POST", "/api/v1/models/team/tree/versions", json.dumps(m).encode())

    for mutate, needle in (
        (lambda m: m["files"][0].update(path="../escape"), "bad path"),
        (lambda m: m["files"][0].update(path="/abs"), "bad path"),
        (lambda m: m["files"].reverse(), "field 'files'"),
        (lambda m: m["files"].insert(1, dict(m["files"][0])), "unique"),
        (lambda m: m["files"][1].update(size=str(int(m["files"][1].get("size", "0")) + 1)), "add up"),
        (lambda m: m["files"][0].update(sha256="0" * 64), "digest of the listed files"),
        # a file that is a folder of another, with a path sorting between them (not neighbours)
        (lambda m: empty_files(m, "a", "a-b", "a/c"), "'a' is both a file and a directory"),
        (lambda m: empty_files(m, "x/y", "x/y.z", "x/y/w/v"), "'x/y' is both a file and a directory"),
    ):
        m = json.loads(json.dumps(good))
        mutate(m)
        status, body = commit(m)
        assert status == 400 and needle in json.loads(body)["message"], (needle, body)
    def relisted(m):   # the listing's digest made again, so that only the change made is wrong
        listing = hashlib.sha256()
        for f in m["files"]:
            listing.update(f"{f.get('mode', 0):o} {f.get('size', '0')} {f['sha256']} ".encode() + f["path"].encode() + b"\0")
        m["sha256"] = listing.hexdigest()
        return m

    # a listing whose digest is right, but one file's sha256 is not the hash of its chunks
    m = json.loads(json.dumps(good))
    m["files"][0]["sha256"] = hashlib.sha256(b"something else").hexdigest()
    status, body = commit(relisted(m))
    assert status == 400 and "hash to" in json.loads(body)["message"], body
    # a name past 255 bytes (NAME_MAX), in a manifest right in every other way: committed before, and
    # no pull on Linux could make the file
    m = json.loads(json.dumps(good))
    assert m["files"][0]["path"] == "empty.txt" and m["files"][1]["path"].startswith("sub/")
    m["files"][0]["path"] = "empty.txt" + "x" * 247   # 256 bytes, still sorted first, and no chunk of its own
    status, body = commit(relisted(m))
    assert status == 400 and "bad path" in json.loads(body)["message"], body
    assert [v.version for v in c.versions("team/tree")] == [1]
    status, _ = commit(good)                                       # the same manifest, untouched: accepted
    assert status == 201
    # whole-file digests left empty are kestreld's to compute, from the chunks (a new model: hashed, not
    # taken from an earlier version); a listing digest given beside them must still hold
    blank = {k: v for k, v in good.items() if k not in ("version", "created_ms", "aliases", "file_count", "sha256")}
    blank["files"] = [{k: v for k, v in f.items() if k != "sha256"} for f in good["files"]]
    status, body = raw(kestreld, "POST", "/api/v1/models/team/blank/versions",
                       json.dumps(dict(blank, sha256="0" * 64)).encode())
    assert status == 400 and "digest of the listed files" in json.loads(body)["message"], body
    status, body = raw(kestreld, "POST", "/api/v1/models/team/blank/versions", json.dumps(blank).encode())
    assert status == 201 and json.loads(body)["sha256"] == good["sha256"], body
    status, body = raw(kestreld, "GET", "/api/v1/models/team/blank/versions/1")
    assert [f["sha256"] for f in json.loads(body)["files"]] == [f["sha256"] for f in good["files"]]


def kestreld_manifest(d, name, version):
    status, body = raw(d, "GET", f"/api/v1/models/{name}/versions/{version}")
    assert status == 200, body
    return json.loads(body)


def pack(*chunks):
    return b"".join(hashlib.sha256(c).digest() + struct.pack(">I", len(c)) + c for c in chunks)


def test_a_commit_takes_a_files_digest_from_its_chunks_as_they_streamed(kestreld, tmp_path, monkeypatch):
    """With --settle-digests at-commit, kestreld hashes a file whose new chunks a push sends in order
    (packs of one run) as they come, so its commit does not read them back; a commit of chunks that
    were stored already reads them back. A run is its user's only: another user can neither extend it
    nor use it. A file of one chunk takes that chunk's digest: nothing read back."""
    from conftest import Daemon
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    d = Daemon(tmp_path / "at-commit", "--settle-digests", "at-commit")
    try:
        c = kestrel.Client(d.url, d.token)
        src = tmp_path / "big.bin"
        src.write_bytes(os.urandom(80 << 20))                  # two batches: the run spans two packs
        before = digest_bytes(d)
        assert c.push("team/streamed", str(src)) == 1
        after = digest_bytes(d)
        assert after["stream"] - before["stream"] == 80 << 20 and after["store"] == before["store"], (before, after)
        assert after["later"] == 0
        assert c.versions("team/streamed")[-1].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()
        # 5 % changed: most chunks are stored already, so no run covers the file: read back
        data = bytearray(src.read_bytes())
        data[40 << 20:(40 << 20) + (4 << 20)] = os.urandom(4 << 20)
        src.write_bytes(data)
        assert c.push("team/streamed", str(src)) == 2
        again = digest_bytes(d)
        assert again["store"] - after["store"] == 80 << 20 and again["stream"] == after["stream"], (after, again)
        assert c.versions("team/streamed")[-1].sha256 == hashlib.sha256(bytes(data)).hexdigest()
    finally:
        d.stop()
    c = kestrel.Client(kestreld.url, kestreld.token)

    # by hand: alice's run of two chunks; bob tries to extend it, then to use it
    alice = json.loads(raw(kestreld, "POST", "/api/v1/tokens", json.dumps({"user": "alice"}).encode())[1])["token"]
    bob = json.loads(raw(kestreld, "POST", "/api/v1/tokens", json.dumps({"user": "bob"}).encode())[1])["token"]
    x1, x2, y = os.urandom(100000), os.urandom(70000), os.urandom(5000)
    run = "0123456789abcdef0123456789abcdef"
    octet = "application/octet-stream"
    assert raw(kestreld, "POST", f"/api/v1/chunks/pack?run={run}&at=0", pack(x1, x2), octet, alice)[0] == 200
    assert raw(kestreld, "POST", f"/api/v1/chunks/pack?run={run}&at=170000", pack(y), octet, bob)[0] == 200

    def commit(name, token):
        m = {"size": "170000", "chunks": [{"digest": hashlib.sha256(x).hexdigest(), "size": str(len(x))} for x in (x1, x2)]}
        status, body = raw(kestreld, "POST", f"/api/v1/models/{name}/versions", json.dumps(m).encode(), token=token)
        assert status == 201, body
        return json.loads(body)["sha256"]

    want = hashlib.sha256(x1 + x2).hexdigest()
    b0 = digest_bytes(kestreld)
    assert commit("bob/copy", bob) == want                 # not from alice's run: read back
    b1 = digest_bytes(kestreld)
    assert b1["store"] - b0["store"] == 170000 and b1["stream"] == b0["stream"]
    assert commit("alice/file", alice) == want             # alice's run, untouched by bob: from the stream
    b2 = digest_bytes(kestreld)
    assert b2["stream"] - b1["stream"] == 170000 and b2["store"] == b1["store"]
    assert commit("alice/again", alice) == want            # a run is used once
    assert digest_bytes(kestreld)["store"] - b2["store"] == 170000

    # files of one chunk: each one's digest is its chunk's (checked as it came in), nothing read back
    tree = tmp_path / "small"
    for i in range(20):
        (tree / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (tree / f"d{i % 3}" / f"f{i}.bin").write_bytes(os.urandom(1000 + 997 * i))
    (tree / "empty").write_bytes(b"")
    b3 = digest_bytes(kestreld)
    assert c.push("team/small", str(tree)) == 1
    b4 = digest_bytes(kestreld)
    size = sum(1000 + 997 * i for i in range(20))
    assert b4["chunk"] - b3["chunk"] == size and b4["store"] == b3["store"] and b4["stream"] == b3["stream"], (b3, b4)
    got = {f["path"]: f["sha256"] for f in kestreld_manifest(kestreld, "team/small", 1)["files"]}
    assert got == {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in tree.rglob("*") if p.is_file()}
    assert c.push("team/small", str(tree)) == 2                    # the latest version's files: its digests
    b5 = digest_bytes(kestreld)
    assert b5["latest"] - b4["latest"] == size and all(b5[k] == b4[k] for k in ("stream", "store", "chunk")), (b4, b5)


def test_a_file_handed_over_at_once_streams_in_packs_of_one_run_in_order(kestreld, tmp_path, monkeypatch):
    """A file the stat cache vouches for is handed to the sender whole: pushed to a kestreld that has
    none of it, its run goes in several packs (each well under kestreld's 1 GiB a pack), one after
    the other, and kestreld still hashes the whole file as it streams in."""
    from conftest import Daemon
    from faultproxy import FaultProxy
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(300 << 20))
    old = time.time() - 60
    os.utime(src, (old, old))
    assert kestrel.Client(kestreld.url, kestreld.token).push("team/handed", str(src)) == 1   # remembered
    d = Daemon(tmp_path / "d", "--settle-digests", "at-commit")   # runs are for a kestreld that hashes at the commit
    proxy = FaultProxy(int(d.url.rsplit(":", 1)[1]), "pass")
    try:
        before = digest_bytes(d)
        assert kestrel.Client(proxy.url, d.token).push("team/handed", str(src)) == 1
        after = digest_bytes(d)
        heads = re.findall(rb"POST (/api/v1/chunks/pack\S*) HTTP/1", bytes(proxy.sent))
        runs = [dict(kv.split(b"=") for kv in h.split(b"?")[1].split(b"&")) for h in heads if b"?run=" in h]
        assert len(runs) >= 2 and len({r[b"run"] for r in runs}) == 1, heads
        assert [int(r[b"at"]) for r in runs] == sorted(int(r[b"at"]) for r in runs) and int(runs[0][b"at"]) == 0
        assert after["stream"] - before["stream"] == 300 << 20 and after["store"] == before["store"], (before, after)
        assert kestrel.Client(d.url, d.token).versions("team/handed")[-1].sha256 == \
            hashlib.sha256(src.read_bytes()).hexdigest()
    finally:
        proxy.close()
        d.stop()


def test_an_older_client_is_never_sent_fills_digests(kestreld):
    """Older clients refuse a field they do not know: kestreld says fills_digests (ChunkQueryResult
    field 2) only to a client that asks with ?fills_digests=1; an older kestreld ignores the query."""
    digest = hashlib.sha256(b"never stored").hexdigest().encode()
    query = b"\x0a\x40" + digest                      # ChunkQuery{digests: [digest]}, as protobuf

    def ask(path):
        req = urllib.request.Request(kestreld.url + path, data=query, method="POST",
                                     headers={"Authorization": f"Bearer {kestreld.token}",
                                              "Content-Type": "application/x-protobuf",
                                              "Accept": "application/x-protobuf"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()
    assert ask("/api/v1/chunks/missing") == query     # missing: [digest], and nothing else
    assert ask("/api/v1/chunks/missing?fills_digests=0") == query
    assert ask("/api/v1/chunks/missing?fills_digests=1") == query + b"\x10\x01"


def test_an_alias_set_while_its_version_is_deleted_never_outlives_it(kestreld, tmp_path):
    """Setting an alias raced deleting its version: the set checked that the version existed, the
    delete collected the version's aliases, then the set wrote its alias: both answered 200 and an
    alias pointed at nothing (found by a hostile test: 19 of 150 rounds). The set now checks again
    after writing and takes its alias back. Whatever wins, no alias names a deleted version."""
    import threading
    c = kestrel.Client(kestreld.url, kestreld.token)
    src = tmp_path / "a.bin"
    src.write_bytes(b"a" * 1000)
    dangling = []
    for i in range(60):
        v = c.push("team/ar", str(src))
        go = threading.Barrier(2)

        def set_():
            go.wait()
            raw(kestreld, "PUT", f"/api/v1/models/team/ar/aliases/a{i}", json.dumps({"version": v}).encode())

        def delete():
            go.wait()
            raw(kestreld, "DELETE", f"/api/v1/models/team/ar/versions/{v}")
        ts = [threading.Thread(target=set_), threading.Thread(target=delete)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        status, _ = raw(kestreld, "GET", f"/api/v1/models/team/ar/versions/a{i}")
        if status != 200 and (kestreld.data / "repo" / "models" / "team" / "ar" / "aliases" / f"a{i}").exists():
            dangling.append(i)
    assert not dangling, f"{len(dangling)} of 60 aliases name a deleted version"


def test_a_commit_hashes_files_of_the_same_chunks_once_and_refuses_a_repetition_bomb(kestreld):
    """A commit's whole-file digests are read back from the store: a 194 KB manifest naming one 4 MiB
    chunk 2,000 times made kestreld hash 8 GB on the thread other requests wait on (found by a hostile
    test). Files listing the same chunks are now hashed once (a dataset of copies costs one), and a
    commit whose read-back passes 16x what it stores plus 1 GiB is refused at once, saying why."""
    a, b = os.urandom(1 << 20), os.urandom(1 << 20)
    assert raw(kestreld, "POST", "/api/v1/chunks/pack", pack(a, b), "application/octet-stream")[0] == 200

    def entry(x):
        return {"digest": hashlib.sha256(x).hexdigest(), "size": str(len(x))}
    copies = 1200   # 2.4 GB to read back file by file; 2 MiB once the copies are seen as one
    m = {"size": str(copies * 2 << 20), "chunks": [entry(a), entry(b)] * copies,
         "files": [{"path": f"copy{i:04d}.bin", "size": str(2 << 20), "chunks": 2} for i in range(copies)]}
    status, body = raw(kestreld, "POST", "/api/v1/models/team/copies/versions", json.dumps(m).encode())
    assert status == 201, body
    got = json.loads(raw(kestreld, "GET", "/api/v1/models/team/copies/versions/1")[1])
    assert {f["sha256"] for f in got["files"]} == {hashlib.sha256(a + b).hexdigest()}
    # a copy listing the same digests with other sizes (adding up) is no copy: read back, refused
    liar = {"size": str(4 << 20), "chunks": [entry(a), entry(b), dict(entry(a), size=str(3 << 19)),
                                             dict(entry(b), size=str(1 << 19))],
            "files": [{"path": "a.bin", "size": str(2 << 20), "chunks": 2},
                      {"path": "b.bin", "size": str(2 << 20), "chunks": 2}]}
    status, body = raw(kestreld, "POST", "/api/v1/models/team/liar/versions", json.dumps(liar).encode())
    assert status == 400, body
    bomb = {"size": str(1500 << 20), "chunks": [entry(a)] * 1500}
    status, body = raw(kestreld, "POST", "/api/v1/models/team/bomb/versions", json.dumps(bomb).encode())
    assert status == 400 and b"repeat their chunks too often" in body, body
    assert raw(kestreld, "GET", "/api/v1/models/team/bomb/versions")[0] == 404


def test_a_chunked_pack_past_1_gib_is_refused(kestreld):
    """A pack's 1 GiB bound was checked on Content-Length alone: sent with chunked transfer encoding, a
    1.1 GiB pack was stored whole (found by a hostile test). What comes is counted: 413. (The same 1
    MiB chunk over and over: 1 GiB on the wire, 1 MiB on disk.)"""
    import http.client
    one = os.urandom(1 << 20)
    frame = hashlib.sha256(one).digest() + struct.pack(">I", len(one)) + one
    conn = http.client.HTTPConnection("127.0.0.1", int(kestreld.url.rsplit(":", 1)[1]), timeout=120)
    conn.putrequest("POST", "/api/v1/chunks/pack")
    conn.putheader("Authorization", f"Bearer {kestreld.token}")
    conn.putheader("Content-Type", "application/octet-stream")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    try:
        for _ in range(1030):
            conn.send(b"%x\r\n" % len(frame) + frame + b"\r\n")
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    r = conn.getresponse()
    body = r.read()
    conn.close()
    assert r.status == 413 and b"at most 1 GiB" in body, (r.status, body)
