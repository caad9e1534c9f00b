"""A push of more files than a batch of the push holds (4,096 chunks): the push hands its chunks to
the sender batch after batch, forgets those it handed over between files (lib/repo/push.c,
refs_drop) and leaves a file of one chunk its chunk's digest, which the repository fills in. Every
chunk is counted once, every file's digest in the version is its true SHA-256, the pull is whole:
to kestreld and to a file:// store."""
import hashlib
import json
import os
import shutil
import subprocess
import urllib.request

import pytest

from conftest import KESTREL_CLI
from test_repo_http import raw

kestrel = pytest.importorskip("kestrel")

FILES = 9000   # a little over 2 batches of one-chunk files


def make_tree(root):
    digests = {}
    for i in range(FILES):
        rel = f"d{i // 1000}/f{i:05d}"
        (root / f"d{i // 1000}").mkdir(parents=True, exist_ok=True)
        data = os.urandom(16) + str(i).encode()
        (root / rel).write_bytes(data)
        digests[rel] = hashlib.sha256(data).hexdigest()
    big = os.urandom(3 << 20)   # a file of several chunks among them
    (root / "d4" / "big.bin").write_bytes(big)
    digests["d4/big.bin"] = hashlib.sha256(big).hexdigest()
    (root / "empty").write_bytes(b"")
    digests["empty"] = hashlib.sha256(b"").hexdigest()
    return digests


def check_version(manifest, pushed, digests):
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == digests
    assert pushed["chunks"] == len(manifest["chunks"]) >= FILES + 3   # each counted once (big: 3 or more)
    assert pushed["bytes"] == int(manifest["size"])


@pytest.mark.parametrize("where", ["kestreld", "file"])
def test_thousands_of_files_are_counted_once_and_each_digest_filled_in(kestreld, tmp_path, monkeypatch, where):
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    src, out = tmp_path / "src", tmp_path / "out"
    digests = make_tree(src)
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    if where == "file":
        env["KESTREL_URL"] = f"file://{tmp_path / 'store'}"
    p = subprocess.run([KESTREL_CLI, "-o", "json", "push", "team/many", str(src)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    pushed = json.loads(p.stdout)
    if where == "file":
        manifest = json.loads((tmp_path / "store" / "models" / "team" / "many" / "versions" / "1.json").read_text())
    else:
        status, body = raw(kestreld, "GET", "/api/v1/models/team/many/versions/1")
        assert status == 200, body
        manifest = json.loads(body)
    check_version(manifest, pushed, digests)
    p = subprocess.run([KESTREL_CLI, "pull", "team/many", "-o", str(out)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert subprocess.run(["diff", "-r", str(src), str(out)]).returncode == 0


WINDOW = 4096   # lib/repo/manifest_file.h KESTREL__WINDOW_FILES: the files a pull holds the records of at once


def window_tree(root, count):
    """count files in sorted order d00/f00000 ...; at the edges of the first two windows an empty file
    and one of several chunks; the same bytes in files of different windows, and of the same one."""
    same = os.urandom(700)
    for i in range(count):
        d = root / f"d{i // 1000:02d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        if i in (WINDOW - 1, WINDOW, 2 * WINDOW - 1):
            data = b""
        elif i in (WINDOW - 2, 2 * WINDOW):
            data = os.urandom(3 << 20)
        elif i in (10, 11, WINDOW + 5, 3 * WINDOW + 7):
            data = same
        else:
            data = os.urandom(16) + str(i).encode()
        (d / f"f{i:05d}").write_bytes(data)


def pull_peak_kib(env, ref, dest, log):
    """Pull ref to dest with the CLI: its peak RSS (KiB), through GNU time (scripts/deps.sh installs it):
    a child of this interpreter would count the interpreter's pages it was forked with."""
    peak = str(log) + ".rss"
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", peak, KESTREL_CLI, "pull", ref, str(dest)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return int(open(peak).read().split()[-1])


@pytest.mark.parametrize("where", ["kestreld", "file"])
def test_a_pull_holds_a_window_of_the_listing_whatever_its_length(kestreld, tmp_path, where):
    """A pull keeps the manifest in a temp file and reads it a window of files at a time
    (lib/repo/manifest_file.c): the files at the windows' edges (empty ones, one of several chunks)
    and bytes shared by files of different windows all come whole, and the pull cache's tree pack,
    written a window at a time, serves a second pull entirely. Its memory does not grow with the
    files, through either door (a file:// store's N.pb is copied, not decoded): 20,000 take no more
    than 4,500 (a window and a bit) plus 4 MiB (what a window's big files and the malloc arenas vary
    by: about 2 MiB). Before, a pull held the whole decoded manifest and, while it decoded it, the
    body: 20,000 took 8.5 MiB more than 4,500."""
    from faultproxy import FaultProxy
    few, many = tmp_path / "few", tmp_path / "many"
    window_tree(few, 4500)
    window_tree(many, 20000)
    env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
    if where == "file":
        env["KESTREL_URL"] = f"file://{tmp_path / 'store'}"
    peaks = []
    for name, src in (("few", few), ("many", many)):
        p = subprocess.run([KESTREL_CLI, "push", f"team/{name}", str(src)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        if where == "kestreld":
            peaks.append(peak_kib(kestreld.proc.pid))
    if where == "kestreld":
        # kestreld's commit writes N.json and N.pb a block at a time as they are made and frees the body
        # once decoded (lib/wire.c kestrel__wire_to_json_fd): its peak grows by 8.4-9.6 MiB for these
        # 20,000 files, the decoded manifest; holding the body, the text and the packed form besides, by
        # 16.1-16.3 MiB
        assert peaks[1] - peaks[0] < 12 * 1024, peaks
    peak_few = pull_peak_kib(dict(env, KESTREL_CACHE_DIR=str(tmp_path / "cache-few")), "team/few",
                             tmp_path / "few.out", tmp_path / "few")
    peak_many = pull_peak_kib(env, "team/many", tmp_path / "many.out", tmp_path / "many")
    assert subprocess.run(["diff", "-r", str(few), str(tmp_path / "few.out")]).returncode == 0
    assert subprocess.run(["diff", "-r", str(many), str(tmp_path / "many.out")]).returncode == 0
    assert peak_many <= peak_few + 4096, (peak_few, peak_many)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("kestrel-")]   # the temp had no name
    if where == "file":
        return
    # every chunk of every window from the tree pack: a proxy that damages each download sees none
    proxy = FaultProxy(int(kestreld.url.rsplit(":", 1)[1]), "corrupt")
    try:
        peak_again = pull_peak_kib(dict(env, KESTREL_URL=proxy.url), "team/many", tmp_path / "again",
                                   tmp_path / "again")
        assert proxy.damaged == 0
    finally:
        proxy.close()
    # a pull loads the index of every tree pack in its cache: 56 bytes a chunk and each file's path
    # below its root (chunk_cache.h), read as it is parsed. The 4,500 files pulled from a cache that
    # holds their tree pack and the 20,000's take at most 2.5 MiB more than from one that holds only
    # theirs: 1.25-1.30 MiB in four runs here (with a hex digest and a whole path a chunk, the index
    # read whole before it was parsed, 4.0-4.5). Both come from the cache, each the lower of two
    # pulls: pulls that download vary with how many chunks are in flight at once (two of these files,
    # one with each cache, came 0.5-1.8 MiB apart here and once 2.7 MiB apart in CI)
    peak_few_again = pull_peak_kib(env, "team/few", tmp_path / "few.again", tmp_path / "few.again")   # fills
    # the 20,000's cache with the 4,500's tree pack too; its peak is only reported

    def cached_peak(cache):   # the lower of two pulls of the 4,500 files from that cache
        return min(pull_peak_kib(dict(env, KESTREL_CACHE_DIR=str(tmp_path / cache)), "team/few",
                                 tmp_path / f"few.{cache}.{k}", tmp_path / f"few.{cache}.{k}") for k in range(2))

    cached_few, cached_both = cached_peak("cache-few"), cached_peak("cache")
    assert cached_both <= cached_few + 2560, (cached_few, cached_both, peak_few, peak_few_again)
    assert subprocess.run(["diff", "-r", str(many), str(tmp_path / "again")]).returncode == 0
    # kestreld answers the manifest without decoding it (server/repo_manifest.c): N.pb as it lies and
    # what it adds, a block at a time. A fresh kestreld's peak grows by less than 2 MiB for these 20,000
    # files (decoded and packed, it took 8.9 MiB more); the pulls above read that answer.
    kestreld.stop()
    kestreld.restart()
    before = peak_kib(kestreld.proc.pid)
    for ctype, tag in (("application/x-protobuf", b"\x0a\x09team/many"), ("application/json", b'"name"')):
        req = urllib.request.Request(kestreld.url + "/api/v1/models/team/many/versions/latest",
                                     headers={"Authorization": f"Bearer {kestreld.token}", "Accept": ctype})
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
            assert r.headers["Content-Type"].startswith(ctype) and tag in body[:100], (ctype, body[:100])
        if ctype.endswith("protobuf"):
            grew = peak_kib(kestreld.proc.pid) - before
            assert len(body) > 20000 * 100 and grew < 2048, (len(body), grew)


def test_a_commit_never_decodes_the_latest_version_beside_its_own(kestreld, tmp_path):
    """A commit takes the digests of files the latest version has unchanged (server/api_repo.c
    same_as_latest): it reads that version's listing (N.listing) first, and a version of another size
    or other counts is not the same; else it compares it with the new one a record at a time from its
    N.pb (kestrel__store_manifest_each), then copies its digests. Decoded whole beside the new
    manifest, 20,000 files grew a fresh kestreld's peak by 16.5-16.7 MiB; the new one alone takes
    about 10 (8.2-10.2), so each commit below stays under 12 MiB."""
    many = tmp_path / "many"
    window_tree(many, 20000)

    def commit():
        """A fresh kestreld's peak growth (KiB) for a push of many, and what the push said."""
        kestreld.stop()
        kestreld.restart()
        before = peak_kib(kestreld.proc.pid)
        env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
        p = subprocess.run([KESTREL_CLI, "-o", "json", "push", "team/many", str(many)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return peak_kib(kestreld.proc.pid) - before, json.loads(p.stdout)

    commit()
    with open(many / "d07" / "f07007", "ab") as f:   # another size: the listing says so
        f.write(b"more")
    grew, pushed = commit()
    assert pushed["version"] == 2 and grew < 12 * 1024, (pushed, grew)
    data = (many / "d07" / "f07008").read_bytes()    # the same size and counts: compared record by record
    (many / "d07" / "f07008").write_bytes(bytes(b ^ 0xFF for b in data))
    grew, pushed = commit()
    assert pushed["version"] == 3 and grew < 12 * 1024, (pushed, grew)
    shutil.rmtree(tmp_path / "cache.stat")           # the same files, hashed again: no stat cache
    grew, pushed = commit()
    assert pushed["version"] == 4 and pushed["bytes_new"] == 0 and grew < 12 * 1024, (pushed, grew)
    for version in (3, 4):                           # every file's digest, taken from the latest or read
        status, body = raw(kestreld, "GET", f"/api/v1/models/team/many/versions/{version}")
        assert status == 200, body
        files = {f["path"]: f["sha256"] for f in json.loads(body)["files"]}
        assert files["d07/f07008"] == hashlib.sha256(bytes(b ^ 0xFF for b in data)).hexdigest()
        assert files["d07/f07007"] == hashlib.sha256((many / "d07" / "f07007").read_bytes()).hexdigest()
        assert len(files) == 20000


def peak_kib(pid):
    """A process's peak resident set so far (VmHWM), KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
