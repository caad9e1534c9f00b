"""Whole-file digests settled after the commit (server/repo_settle.h): a push to kestreld is answered
once its chunks are checked and durable; kestreld hashes the files after it, on an idle thread once
the repository is quiet, or at the version's first read. No answer shows a version unsettled."""
import hashlib
import json
import os
import signal
import time

import pytest

import kestrel
from repo_api import chunk_files, digest_bytes, raw


def listing(d, name, version):
    """What the store holds of name@version's listing, read on disk (no request: it would settle)."""
    return json.loads((d.data / "repo" / "models" / name / "versions" / f"{version}.listing").read_text())


def tree_digest(files):
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f["path"]):
        h.update(f"{f.get('mode', 0):o} {f.get('size', '0')} {f['sha256']} ".encode() + f["path"].encode() + b"\0")
    return h.hexdigest()


KD_QUIET_S = 1   # --settle-after's default, in seconds


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))


def test_a_push_is_answered_unsettled_and_its_first_read_settles_it(daemon, tmp_path, cache):
    d = daemon("--settle-after", "600000")   # no thread settles it meanwhile, however loaded the machine
    c = kestrel.Client(d.url, d.token)
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(6 << 20))
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    before = digest_bytes(d)
    assert c.push("team/f", str(src)) == 1
    assert listing(d, "team/f", 1)["sha256"] == ""          # committed without a second pass over the bytes
    after = digest_bytes(d)
    assert after["stream"] == before["stream"] and after["store"] == before["store"] and after["later"] == 0, after
    assert c.versions("team/f")[-1].sha256 == want          # the read settled it, not waiting for the thread
    assert listing(d, "team/f", 1)["sha256"] == want
    assert digest_bytes(d)["later"] == 6 << 20
    out = tmp_path / "out.bin"
    c.pull("team/f", str(out))
    assert out.read_bytes() == src.read_bytes()
    assert digest_bytes(d)["later"] == 6 << 20               # hashed once


def test_readers_of_a_version_being_settled_wait_for_it_rather_than_hash_it_again(daemon, tmp_path, cache):
    """A gang's ranks pulling a checkpoint pushed a moment ago: one settles it, the others wait."""
    import threading
    d = daemon("--settle-after", "600000")   # no thread settles it meanwhile, however loaded the machine
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(24 << 20))
    assert kestrel.Client(d.url, d.token).push("team/gang", str(src)) == 1
    errors = []

    def pull(i):
        try:
            kestrel.Client(d.url, d.token).pull("team/gang", str(tmp_path / f"out{i}.bin"))
        except Exception as e:   # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=pull, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all((tmp_path / f"out{i}.bin").read_bytes() == src.read_bytes() for i in range(4))
    assert digest_bytes(d)["later"] == 24 << 20              # hashed once, not once a reader


def test_the_thread_settles_once_the_repository_is_quiet(daemon, tmp_path, cache):
    d = daemon()
    c = kestrel.Client(d.url, d.token)
    tree = tmp_path / "ds"
    (tree / "sub").mkdir(parents=True)
    (tree / "big.bin").write_bytes(os.urandom(3 << 20))    # several chunks: left to settle
    (tree / "sub" / "small.txt").write_bytes(b"hello\n")    # one chunk: its digest is its chunk's
    assert c.push("team/ds", str(tree)) == 1
    assert listing(d, "team/ds", 1)["sha256"] == ""
    deadline = time.time() + 20
    while listing(d, "team/ds", 1)["sha256"] == "":           # no request meanwhile: the thread's doing
        assert time.time() < deadline, "not settled by the thread in 20 s"
        time.sleep(0.1)
    manifest = json.loads((d.data / "repo" / "models" / "team" / "ds" / "versions" / "1.json").read_text())
    files = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert files == {"big.bin": hashlib.sha256((tree / "big.bin").read_bytes()).hexdigest(),
                     "sub/small.txt": hashlib.sha256(b"hello\n").hexdigest()}
    assert manifest["sha256"] == tree_digest(manifest["files"]) == listing(d, "team/ds", 1)["sha256"]
    status, body = raw(d, "GET", "/api/v1/models/team/ds/versions/1")   # its protobuf form was written anew
    assert status == 200 and json.loads(body)["sha256"] == manifest["sha256"], body
    assert digest_bytes(d)["later"] == 3 << 20


@pytest.mark.parametrize("then", [(), ("--settle-digests", "at-commit")])
def test_a_kestreld_killed_before_it_settled_settles_at_the_first_read_after(daemon, tmp_path, cache, then):
    """Also when started again --settle-digests at-commit, which leaves nothing to settle itself but
    settles at its read what an earlier kestreld left (a review)."""
    d = daemon("--settle-after", "600000")   # no thread settles it meanwhile, however loaded the machine
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(5 << 20))
    assert kestrel.Client(d.url, d.token).push("team/k", str(src)) == 1
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    assert listing(d, "team/k", 1)["sha256"] == ""
    d.flags = then
    d.restart()
    c = kestrel.Client(d.url, d.token)
    out = tmp_path / "out.bin"
    c.pull("team/k@1", str(out))   # the manifest's read settles it first
    assert out.read_bytes() == src.read_bytes()
    assert listing(d, "team/k", 1)["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert c.versions("team/k")[-1].sha256 == listing(d, "team/k", 1)["sha256"]


def test_a_version_deleted_before_it_settled_stays_deleted(daemon, tmp_path, cache):
    d = daemon()
    c = kestrel.Client(d.url, d.token)
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(4 << 20))
    assert c.push("team/gone", str(src)) == 1 and c.push("team/gone", str(tmp_path / "f.bin")) == 2
    assert raw(d, "DELETE", "/api/v1/models/team/gone/versions/1")[0] == 200
    time.sleep(KD_QUIET_S + 2)                               # the thread has come to both
    versions = d.data / "repo" / "models" / "team" / "gone" / "versions"
    assert not (versions / "1.json").exists() and not (versions / "1.listing").exists()
    assert [v.version for v in c.versions("team/gone")] == [2]
    assert "cannot be settled" not in (d.root / "kestreld.log").read_text()


def test_a_settle_that_finds_a_chunk_lost_fails_the_read_with_why(daemon, tmp_path, cache):
    d = daemon("--settle-after", "600000")   # no thread settles it meanwhile, however loaded the machine
    c = kestrel.Client(d.url, d.token)
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 << 20))
    assert c.push("team/lost", str(src)) == 1
    chunks = chunk_files(d)
    assert len(chunks) > 1
    chunks[0].unlink()                                       # before the version settled
    with pytest.raises(kestrel.KestrelIOError, match="cannot be settled"):
        c.pull("team/lost", str(tmp_path / "out.bin"))
    assert [v.sha256 for v in c.versions("team/lost")] == [""]   # listed as it is stored


def test_a_chunk_damaged_before_the_settle_is_found_by_it_never_hashed_into_the_digest(daemon, tmp_path, cache):
    """The settle checks each chunk it reads back against its name: a digest made from damaged bytes
    would make a pull, which checks the file against it, take the damaged file for true."""
    d = daemon("--settle-after", "600000")   # no thread settles it meanwhile, however loaded the machine
    c = kestrel.Client(d.url, d.token)
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 << 20))
    assert c.push("team/bad", str(src)) == 1
    victim = chunk_files(d)[1]
    stored = victim.read_bytes()
    victim.write_bytes(bytes([stored[0] ^ 0xff]) + stored[1:])
    out = tmp_path / "out.bin"
    with pytest.raises(kestrel.KestrelIOError, match="damaged") as e:
        c.pull("team/bad", str(out))
    assert "temp file" not in str(e.value)                   # kestreld's words, not a local temp's
    assert not out.exists() and not victim.exists() and list((d.data / "repo" / "quarantine").iterdir())
    assert c.push("team/bad", str(src)) == 2                 # stores the chunk again: version 1 heals
    c.pull("team/bad@1", str(out))
    assert out.read_bytes() == src.read_bytes()
    assert c.versions("team/bad")[0].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()


def test_what_a_commit_is_given_is_checked_at_the_commit_even_when_it_settles_later(daemon, tmp_path, cache):
    d = daemon()
    c = kestrel.Client(d.url, d.token)
    a, b = os.urandom(300000), os.urandom(200000)
    src = tmp_path / "f.bin"
    src.write_bytes(a + b)
    assert c.push("team/parts", str(src)) == 1              # its chunks are stored
    m = json.loads(raw(d, "GET", "/api/v1/models/team/parts/versions/1")[1])
    chunks = [{"digest": x["digest"], "size": x["size"]} for x in m["chunks"]]
    assert len(chunks) > 1
    wrong = {"size": str(len(a + b)), "sha256": "ab" * 32, "chunks": chunks}
    status, body = raw(d, "POST", "/api/v1/models/team/parts/versions?settle=later", json.dumps(wrong).encode())
    assert status == 400 and b"sha256" in body, body
    tree = {"size": str(len(a + b)), "chunks": chunks,
            "files": [{"path": "x.bin", "size": str(len(a + b)), "sha256": "cd" * 32, "chunks": str(len(chunks))}]}
    status, body = raw(d, "POST", "/api/v1/models/team/tree/versions?settle=later", json.dumps(tree).encode())
    assert status == 400 and b"sha256" in body, body
    # sizes swapped between two chunks (the sum holds): refused now, as at-commit does, not left to
    # fail every read (found by a hostile test)
    swapped = [dict(x) for x in chunks]
    swapped[0]["size"], swapped[1]["size"] = swapped[1]["size"], swapped[0]["size"]
    status, body = raw(d, "POST", "/api/v1/models/team/swap/versions?settle=later",
                       json.dumps({"size": str(len(a + b)), "chunks": swapped}).encode())
    assert status == 400 and b"holds" in body, body
    # chunks repeated past the bound on what settling would hash: refused now, not left to fail later
    one = chunks[0]
    many = {"size": str(int(one["size"]) * 20000), "chunks": [one] * 20000}
    status, body = raw(d, "POST", "/api/v1/models/team/many/versions?settle=later", json.dumps(many).encode())
    assert status == 400 and b"repeat" in body, body
    # asked and left empty: answered unsettled; not asked: settled in the answer, as before
    left = {"size": str(len(a + b)), "chunks": chunks}
    status, body = raw(d, "POST", "/api/v1/models/team/left/versions?settle=later", json.dumps(left).encode())
    assert status == 201 and json.loads(body)["sha256"] == "", body
    status, body = raw(d, "POST", "/api/v1/models/team/asked/versions", json.dumps(left).encode())
    assert status == 201 and json.loads(body)["sha256"] == hashlib.sha256(a + b).hexdigest(), body
    assert c.versions("team/left")[-1].sha256 == hashlib.sha256(a + b).hexdigest()


def test_at_commit_settles_every_version_before_the_answer(daemon, tmp_path, cache):
    d = daemon("--settle-digests", "at-commit")
    status, body = raw(d, "POST", "/api/v1/chunks/missing?settles_later=1", json.dumps({"digests": []}).encode())
    assert status == 200 and not json.loads(body).get("settles_later"), body
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 << 20))
    assert kestrel.Client(d.url, d.token).push("team/now", str(src)) == 1
    assert listing(d, "team/now", 1)["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert digest_bytes(d)["later"] == 0
    status, body = raw(daemon(), "POST", "/api/v1/chunks/missing?settles_later=1", json.dumps({"digests": []}).encode())
    assert status == 200 and json.loads(body).get("settles_later") is True, body


def test_settle_digests_takes_later_or_at_commit_and_check_config_says_which(tmp_path):
    import subprocess
    from conftest import KESTRELD
    bad = subprocess.run([KESTRELD, "--settle-digests", "soon", "-d", str(tmp_path / "d")], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and "--settle-digests: 'soon': later or at-commit" in bad.stderr, bad.stderr
    bad = subprocess.run([KESTRELD, "--settle-after", "-1", "-d", str(tmp_path / "d")], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and "--settle-after" in bad.stderr, bad.stderr
    for flag, says in (("later", "after its push is answered"), ("at-commit", "before its push is answered")):
        r = subprocess.run([KESTRELD, "--settle-digests", flag, "--check-config", "-d", str(tmp_path / "d")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and says in r.stdout, (r.stdout, r.stderr)


def test_a_repository_kept_busy_still_gets_its_versions_settled(daemon, tmp_path, cache):
    """The thread waits for a quiet second, but no version waits past 10 of them for it: a
    stream of packs (here empty ones, 3 a second: any token may send them) does not starve it."""
    import threading
    d = daemon()
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 << 20))
    assert kestrel.Client(d.url, d.token).push("team/busy", str(src)) == 1
    stop = threading.Event()

    def stir():
        while not stop.is_set():
            raw(d, "POST", "/api/v1/chunks/pack", b"", "application/octet-stream")
            stop.wait(0.3)
    t = threading.Thread(target=stir)
    t.start()
    try:
        deadline = time.time() + 30
        while listing(d, "team/busy", 1)["sha256"] == "":
            assert time.time() < deadline, "not settled in 30 s under a stream of packs"
            time.sleep(0.2)
    finally:
        stop.set()
        t.join()
    assert listing(d, "team/busy", 1)["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()


def test_a_read_on_a_full_disk_is_answered_from_the_settle_that_could_not_be_written(small_fs, tmp_path, cache):
    """The disk filled between the push and the read (a job's output, found by test_faults): the settle
    cannot write the version again, so the pull is answered from what it settled in memory, and the
    version settles again, written this time, at a read once there is room."""
    from conftest import Daemon
    d = Daemon(small_fs / "k", "--gpus", "0", "--settle-after", "600000")
    try:
        c = kestrel.Client(d.url, d.token)
        src = tmp_path / "f.bin"
        src.write_bytes(os.urandom(2 << 20))
        assert c.push("admin/full", str(src)) == 1
        filler = small_fs / "filler"
        with open(filler, "wb") as f:   # the rest of the disk, to its last byte
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        out = tmp_path / "out.bin"
        c.pull("admin/full@1", str(out))
        assert out.read_bytes() == src.read_bytes()
        assert listing(d, "admin/full", 1)["sha256"] == ""                       # not written
        assert "settled, not written" in (d.root / "kestreld.log").read_text()
        filler.unlink()
        assert c.versions("admin/full")[-1].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()
        assert listing(d, "admin/full", 1)["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    finally:
        d.stop()


def test_a_commit_to_settle_later_into_anothers_model_is_refused_and_makes_nothing(daemon, tmp_path, cache):
    """?settle=later changes when digests are hashed, not who may commit: bob's into alice's model is
    403, and no version, no queued settle, no digest bytes follow."""
    d = daemon("--settle-after", "600000")
    alice = d.api("POST", "/api/v1/tokens", {"user": "alice"})[1]["token"]
    bob = d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 << 20))
    assert kestrel.Client(d.url, alice).push("alice/m", str(src)) == 1
    m = json.loads(raw(d, "GET", "/api/v1/models/alice/m/versions/1", token=alice)[1])
    body = json.dumps({"size": m["size"], "chunks": [{"digest": x["digest"], "size": x["size"]}
                                                     for x in m["chunks"]]}).encode()
    before = digest_bytes(d)
    status, answer = raw(d, "POST", "/api/v1/models/alice/m/versions?settle=later", body, token=bob)
    assert status in (403, 404), answer
    assert [v.version for v in kestrel.Client(d.url, alice).versions("alice/m")] == [1]
    assert not (d.data / "repo" / "models" / "alice" / "m" / "versions" / "2.json").exists()
    assert digest_bytes(d) == before                        # (v1 was settled by alice's read above)
