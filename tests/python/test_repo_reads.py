"""What a directory push reads from the disk. It starts the reads of the files after the one it
hashes (read-ahead: a disk serves many small reads at once), but never of a file the stat cache
vouches for: an identical re-push reads none of their bytes. Read-ahead holds descriptors, so it
takes few where the process may open few, and gives them all back when they run out."""
import ctypes
import hashlib
import mmap
import os
import subprocess
import time

import pytest

from conftest import KESTREL_CLI
from test_repo_http import raw

kestrel = pytest.importorskip("kestrel")


def cached(path):
    """Whether any page of the file is in the page cache (mincore: looking starts no read)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        vec = ctypes.create_string_buffer(pages)
        rc = libc.mincore(addr, size, vec)
        libc.munmap(addr, size)
        assert rc == 0, os.strerror(ctypes.get_errno())
        return any(b & 1 for b in vec.raw)
    finally:
        os.close(fd)


def evict(paths):
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def test_a_push_does_not_read_ahead_what_the_stat_cache_vouches_for(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    c = kestrel.Client(kestreld.url, kestreld.token)
    tree, old = tmp_path / "tree", time.time() - 60
    files = []
    for i in range(200):
        p = tree / f"d{i % 4}" / f"f{i:03d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(20000 + 37 * i))
        os.utime(p, (old, old))
        files.append(p)
    (tree / "empty").write_bytes(b"")                              # nothing to read ahead
    assert c.push("team/tree", str(tree)) == 1                     # read, hashed, remembered
    evict(files)
    if any(cached(p) for p in files):
        pytest.skip("this file system keeps the files in memory (tmpfs?): nothing to observe")
    files[0].read_bytes()
    if not cached(files[0]):
        pytest.skip("mincore does not show this file system's page cache: nothing to observe")
    evict(files[:1])
    seen = []
    assert c.push("team/tree", str(tree), progress=seen.append) == 2 and seen[-1].bytes_new == 0
    # (an on-access scanner that reads every opened file, IMA or an antivirus, would fail this)
    assert not cached(files[0]), "the stat cache did not hold: the first file (never read ahead) was read"
    assert [p.name for p in files if cached(p)] == []              # stat, not read: not even ahead

    # the same files changed: read (and the ones after each read ahead), pushed, pulled back the same
    for p in files:
        p.write_bytes(os.urandom(20000 + 37 * int(p.stem[1:])))
    evict(files)
    assert c.push("team/tree", str(tree), progress=seen.append) == 3 and seen[-1].bytes_new > 0
    c.pull("team/tree@3", str(tmp_path / "back"))
    assert all((tmp_path / "back" / p.relative_to(tree)).read_bytes() == p.read_bytes() for p in files)


def entry_records(entry):
    """A stat cache entry's header line and its records, each the list of its lines."""
    lines = entry.read_text().split("\n")
    head, recs, i = lines[0], [], 1
    while i < len(lines) and lines[i].startswith("F "):
        n = int(lines[i].split()[9])
        recs.append(lines[i:i + 2 + n])
        i += 2 + n
    return head, recs


def test_the_stat_cache_is_read_in_step_with_the_listing(kestreld, tmp_path, monkeypatch):
    """A push reads its stat cache entry front to back beside the listing (both sorted by path), one
    record at a time, never the whole entry at once: files removed and added since, before, between
    and after the remembered ones change nothing for the others. A record out of order or damaged (an
    entry this build did not write) ends the entry there: the files after it are read and hashed
    again, never given another file's record; the records before it still hold."""
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    c = kestrel.Client(kestreld.url, kestreld.token)
    tree, old = tmp_path / "tree", time.time() - 60

    def put(rel, size):
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))
        os.utime(p, (old, old))
        return p

    files = {f"d{i % 3}/f{i:03d}.bin": put(f"d{i % 3}/f{i:03d}.bin", 9000 + 13 * i) for i in range(120)}
    assert c.push("team/merge", str(tree)) == 1
    for rel in [r for r in files if int(r[4:7]) % 7 == 0]:
        files.pop(rel).unlink()
    new = {f"d{i % 3}/f{i:03d}a.bin": put(f"d{i % 3}/f{i:03d}a.bin", 5000 + i) for i in range(0, 120, 5)}
    new.update({"d0/a-first.bin": put("d0/a-first.bin", 777), "d9/z-last.bin": put("d9/z-last.bin", 778)})
    every = {**files, **new}
    evict(every.values())
    if any(cached(p) for p in every.values()):
        pytest.skip("this file system keeps the files in memory (tmpfs?): nothing to observe")
    seen = []
    assert c.push("team/merge", str(tree), progress=seen.append) == 2
    assert seen[-1].bytes_new == sum(p.stat().st_size for p in new.values())
    assert sorted(r for r, p in every.items() if cached(p)) == sorted(new)   # only the new files were read
    c.pull("team/merge@2", str(tmp_path / "back2"))
    assert {str(p.relative_to(tmp_path / "back2")) for p in (tmp_path / "back2").rglob("*.bin")} == set(every)
    assert all((tmp_path / "back2" / r).read_bytes() == p.read_bytes() for r, p in every.items())

    key = hashlib.sha256(os.path.realpath(tree).encode()).hexdigest()
    entry = tmp_path / "cache.stat" / key
    head, recs = entry_records(entry)
    paths = [r[1] for r in recs]
    assert paths == sorted(every) and int(head.split()[2]) == len(every)   # in the listing's order
    for broken in ("order", "damage"):
        k = 40
        if broken == "order":   # two records swapped
            recs[k], recs[k + 1] = recs[k + 1], recs[k]
        else:                   # a chunk's digest that is not one
            recs[k][2] = "zz" + recs[k][2][2:]
        entry.write_text("\n".join([head] + ["\n".join(r) for r in recs]) + "\n")
        evict(every.values())
        assert c.push("team/merge", str(tree), progress=seen.append) and seen[-1].bytes_new == 0
        read = [r for r in paths if cached(every[r])]
        assert read and not [r for r in read if r < paths[k]], read    # before the break: the entry held
        assert set(paths[k + 2:]) <= set(read), read                   # after it: read again, all of them
        head, recs = entry_records(entry)                              # and the entry written anew, in order
        assert [r[1] for r in recs] == paths
    evict(every.values())
    assert c.push("team/merge", str(tree), progress=seen.append) and seen[-1].bytes_new == 0
    assert [r for r in paths if cached(every[r])] == []


def test_a_stat_cache_record_that_lies_is_forgotten_when_the_push_fails(kestreld, tmp_path, monkeypatch):
    """A record of the stat cache whose stat fields match its file but whose chunks do not (damaged on
    disk, or edited) makes kestreld refuse the chunk the push sends from the file under that digest.
    The push fails, and forgets the entry: the next one hashes every file and goes through."""
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    c = kestrel.Client(kestreld.url, kestreld.token)
    tree, old = tmp_path / "tree", time.time() - 60
    tree.mkdir()
    for name in ("a.bin", "b.bin"):
        (tree / name).write_bytes(os.urandom(3000))
        os.utime(tree / name, (old, old))
    assert c.push("team/lies", str(tree)) == 1
    entry = tmp_path / "cache.stat" / hashlib.sha256(os.path.realpath(tree).encode()).hexdigest()
    head, recs = entry_records(entry)
    assert [r[1] for r in recs] == ["a.bin", "b.bin"]
    recs[0][2] = "ab" * 32 + " " + recs[0][2].split()[1]   # a.bin's one chunk, under a digest it is not
    entry.write_text("\n".join([head] + ["\n".join(r) for r in recs]) + "\n")
    with pytest.raises(kestrel.KestrelError) as e:
        c.push("team/lies", str(tree))
    assert "abababababab" in str(e.value), e.value
    assert not entry.exists()
    assert c.push("team/lies", str(tree)) == 2
    c.pull("team/lies", str(tmp_path / "back"))
    assert all((tmp_path / "back" / n).read_bytes() == (tree / n).read_bytes() for n in ("a.bin", "b.bin"))


@pytest.mark.parametrize("held", [0, 238])
@pytest.mark.parametrize("door", ["http", "file"])
def test_a_push_works_with_few_descriptors_free(kestreld, tmp_path, held, door):
    """Under `ulimit -n 64` the window is 4 files; under 256 with all but about 15 descriptors taken
    already, read-ahead runs out, gives back what it holds, and the push goes on without it. The
    listing holds one directory open at a time: a tree 60 folders deep is no harder."""
    tree = tmp_path / "tree"
    for i in range(300):
        p = tree / f"d{i % 3}" / f"f{i:03d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(3000 + i))
    deep = tree / "deep"
    for level in range(60):
        deep = deep / f"l{level:02d}"
        deep.mkdir(parents=True)
        (deep / "f.bin").write_bytes(os.urandom(100 + level))
    env = dict(os.environ, KESTREL_CACHE_DIR=str(tmp_path / "cache"), KESTREL_TOKEN=kestreld.token,
               KESTREL_URL=kestreld.url if door == "http" else f"file://{tmp_path / 'store'}")
    limit = 256 if held else 64
    script = (f"ulimit -n {limit} && for i in $(seq {held}); do exec {{fd}}</dev/null; done; "
              f"exec '{KESTREL_CLI}' push team/few '{tree}'")
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "pushed team/few@1" in r.stdout, (r.stdout, r.stderr)
    r = subprocess.run([KESTREL_CLI, "pull", "team/few", "--dest", str(tmp_path / "back")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert all((tmp_path / "back" / p.relative_to(tree)).read_bytes() == p.read_bytes() for p in tree.rglob("*.bin"))


@pytest.mark.parametrize("door", ["http", "file"])
def test_links_above_the_pushed_tree_and_the_pull_dest_are_followed(kestreld, tmp_path, door):
    """Links are refused inside a pushed tree, never above it: a tree reached through a linked folder
    (a home on /scratch, say) pushes, and a directory version pulls through a linked folder, its
    files of several chunks checked where they were written."""
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to("real")
    tree = tmp_path / "real" / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "big.bin").write_bytes(os.urandom(3 << 20))   # several chunks
    (tree / "small.bin").write_bytes(os.urandom(5000))
    env = dict(os.environ, KESTREL_CACHE_DIR=str(tmp_path / "cache"), KESTREL_TOKEN=kestreld.token,
               KESTREL_URL=kestreld.url if door == "http" else f"file://{tmp_path / 'store'}")
    r = subprocess.run([KESTREL_CLI, "push", "team/linked", str(tmp_path / "via" / "tree")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "pushed team/linked@1" in r.stdout, (r.stdout, r.stderr)
    r = subprocess.run([KESTREL_CLI, "pull", "team/linked", "--dest", str(tmp_path / "via" / "back")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for p in ("sub/big.bin", "small.bin"):
        assert (tmp_path / "real" / "back" / p).read_bytes() == (tree / p).read_bytes()


@pytest.mark.parametrize("where", ["kestreld", "file"])
@pytest.mark.parametrize("shape", ["file", "tree"])
@pytest.mark.parametrize("change", ["write", "link"])
def test_a_file_written_to_as_the_push_reads_it_is_an_error_and_no_version(kestreld, tmp_path, monkeypatch,
                                                                             where, shape, change):
    """Bytes changed behind the push's read point and ahead of it, the size kept: each chunk the push
    made is true to its digest, so only the file's own change (its ctime) tells that the version would
    be neither the old file nor the new one. The push says so and makes no version; pushed again, the
    file as it now is. A hard link made to the file meanwhile (as the pull cache makes) moves its ctime
    too but changes no byte: that push goes through."""
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    c = kestrel.Client(kestreld.url, kestreld.token) if where == "kestreld" else \
        kestrel.Client(f"file://{tmp_path / 'store'}")
    src = tmp_path / "src"
    big = src / "d" / "big.bin" if shape == "tree" else src
    big.parent.mkdir(parents=True, exist_ok=True)
    if shape == "tree":
        (src / "a.txt").write_bytes(b"first")
    big.write_bytes(os.urandom(40 << 20))
    time.sleep(0.05)   # the write below lands in a later clock tick than the file's creation
    wrote = []

    def stored():   # the bytes the repository has taken in so far (not its temps, renamed as we look)
        if where == "file":
            total = 0
            for f in (tmp_path / "store" / "chunks").rglob("*"):
                try:
                    total += f.stat().st_size if ".tmp." not in f.name and f.is_file() else 0
                except FileNotFoundError:
                    pass
            return total
        status, body = raw(kestreld, "GET", "/metrics")
        assert status == 200, body
        return next(float(line.split()[1]) for line in body.decode().splitlines()
                    if line.startswith("kestrel_repo_push_bytes_total "))

    def progress(p):   # reports come after each 8 MiB read, 100 ms apart at least: slowed down to see each
        if wrote or p.phase != "push":
            return
        if not (12 << 20) < p.bytes_done < (38 << 20):   # the second read's report: the first batch handed over
            time.sleep(0.15)
            return
        deadline = time.time() + 30   # the early write lands on bytes stored already, so nothing but the
        while stored() < (4 << 20):   # file's ctime can tell (the first batch goes in file order)
            assert time.time() < deadline, "the first chunks were not stored"
            time.sleep(0.01)
        if change == "link":
            os.link(big, tmp_path / "link")
        else:
            with open(big, "r+b") as f:
                f.seek(1 << 20)
                f.write(b"EARLY!!!")   # read already
                f.seek(39 << 20)
                f.write(b"LATE!!!!")   # not yet
        wrote.append(p.bytes_done)

    if change == "link":
        assert c.push("team/torn", str(src), progress=progress) == 1 and wrote
    else:
        with pytest.raises(kestrel.KestrelError, match="changed while it was pushed"):
            c.push("team/torn", str(src), progress=progress)
        assert wrote
        with pytest.raises(kestrel.NotFoundError):
            c.versions("team/torn")
        assert c.push("team/torn", str(src)) == 1
    c.pull("team/torn", str(tmp_path / "out"))
    got = tmp_path / "out" / "d" / "big.bin" if shape == "tree" else tmp_path / "out"
    assert got.read_bytes() == big.read_bytes()
