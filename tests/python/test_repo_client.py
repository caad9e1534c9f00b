"""The repository on the user's side, through the CLI and both doors (a file:// store, a kestreld):
what a pull makes (modes), where the client's caches may live (only folders no one else can change),
what a delete leaves and what a listing reads."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest


def pull_under(kestreld, mask, ref, out, env):
    """kestrel pull REF OUT with umask mask; returns OUT."""
    old = os.umask(mask)
    try:
        kestreld.cli("pull", ref, str(out), env=env)
    finally:
        os.umask(old)
    return out


def test_a_deleted_version_leaves_an_empty_tombstone(kestreld, tmp_path):
    """kestrel rm kept the deleted version's whole manifest as its tombstone (a link to it: its file
    names and metadata stayed in the store; found by a hostile test). The tombstone is now empty and
    still keeps the number from being given out again; kestrel gc empties one written before, but not
    one still linked to its live N.json (a delete killed between its two steps)."""
    data = tmp_path / "ds"
    data.mkdir()
    (data / "patient-0042.csv").write_bytes(b"x" * 5000)
    for url, root in ((f"file://{tmp_path / 'store'}", tmp_path / "store"), (kestreld.url, kestreld.data / "repo")):
        env = kestreld.env(KESTREL_URL=url)
        versions = root / "models" / "team" / "t" / "versions"
        kestreld.cli("push", "team/t", str(data), "--meta", "note=secret-note", env=env)
        kestreld.cli("push", "team/t", str(data), env=env)
        kestreld.cli("rm", "team/t@1", env=env)
        assert (versions / "1.deleted").stat().st_size == 0 and not (versions / "1.json").exists()
        assert kestreld.cli("rm", "team/t@1", env=env, check=False).returncode != 0
        # the old form: a tombstone that is the manifest, and a pair a killed delete left linked
        (versions / "5.deleted").write_bytes((versions / "2.json").read_bytes())
        os.link(versions / "2.json", versions / "2.deleted")
        kestreld.cli("gc", env=env)
        assert (versions / "5.deleted").stat().st_size == 0
        assert (versions / "2.deleted").stat().st_size == (versions / "2.json").stat().st_size > 0
        kestreld.cli("pull", "team/t@2", str(tmp_path / "back"), env=env)
        assert (tmp_path / "back" / "patient-0042.csv").read_bytes() == b"x" * 5000
        shutil.rmtree(tmp_path / "back")
        p = kestreld.cli("push", "team/t", str(data), env=env)
        assert "team/t@6" in p.stdout + p.stderr, p.stdout + p.stderr      # 1 and 5 are never given again
        assert not any(b"patient" in f.read_bytes() for f in versions.glob("*.deleted") if f.name != "2.deleted")


def test_a_pulled_file_gets_the_mode_any_new_file_gets(kestreld, tmp_path):
    """A file version was pulled 0600 whatever the umask (the temp's mode from mkstemp), so a model
    pulled for a server running as another user could not be read by it; a directory version's files
    already took their pushed modes. Now a pulled file is 0666 less the umask, like cp or curl -o."""
    src = tmp_path / "m.bin"
    src.write_bytes(os.urandom(100_000))
    for url in (f"file://{tmp_path / 'store'}", kestreld.url):
        env = kestreld.env(KESTREL_URL=url, KESTREL_CACHE_DIR=str(tmp_path / "cache"))
        kestreld.cli("push", "team/mode", str(src), env=env)
        for mask, want in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
            out = pull_under(kestreld, mask, "team/mode", tmp_path / f"out-{mask:o}", env)
            assert out.stat().st_mode & 0o777 == want, (url, oct(mask), oct(out.stat().st_mode))
            assert out.read_bytes() == src.read_bytes()
            out.unlink()


def test_a_listing_reads_no_manifest_and_counts_chunks(kestreld, tmp_path):
    """Listing a model's versions read and parsed each version's whole manifest (5 versions of a
    20,000-file dataset: 0.48 s and 50 MB for `kestrel models`), and said 0 chunks for every version
    (file:// since the repository wing, kestreld always). A commit now writes versions/N.listing, the
    version without its lists; a version an earlier build committed is listed from its manifest once
    and its listing written then; kestrel rm removes it, and one a killed rm left goes at gc."""
    data = tmp_path / "ds"
    data.mkdir()
    for i in range(40):
        (data / f"f{i:02d}.bin").write_bytes(os.urandom(3000))
    (tmp_path / "one.bin").write_bytes(os.urandom(3 << 20))
    doors = []
    for url, root in ((f"file://{tmp_path / 'store'}", tmp_path / "store"), (kestreld.url, kestreld.data / "repo")):
        env = kestreld.env(KESTREL_URL=url)
        versions = root / "models" / "team" / "l" / "versions"
        kestreld.cli("push", "team/l", str(data), env=env)
        kestreld.cli("push", "team/l", str(tmp_path / "one.bin"), env=env)
        kestreld.cli("push", "team/l", str(data), env=env)

        def listed():   # the API's ManifestList, whichever the repository
            out = json.loads(kestreld.cli("-o", "json", "models", "team/l", env=env).stdout)
            return [(int(v["version"]), int(v["size"]), v["sha256"], int(v["chunk_count"]), int(v["file_count"]))
                    for v in out["versions"]]
        first = listed()
        assert [v[3] for v in first][:2] == [40, first[1][3]] and first[1][3] >= 3, first
        assert [v[4] for v in first] == [40, 0, 40]
        shown = json.loads(kestreld.cli("-o", "json", "models", "team/l", env=env).stdout)
        for v in shown["versions"]:
            v.pop("created_ms")
        doors.append(shown)   # the same bytes pushed the same way: the same listing, field for field
        assert sorted(p.name for p in versions.glob("*.listing")) == ["1.listing", "2.listing", "3.listing"]
        # an earlier build's versions have none: listed the same, and written for next time
        for p in versions.glob("*.listing"):
            p.unlink()
        (versions / "2.listing").write_text('{"version": "7", "size": "1"}')    # not 2's: not trusted
        assert listed() == first
        assert json.loads((versions / "2.listing").read_text())["version"] == "2"
        assert sorted(p.name for p in versions.glob("*.listing")) == ["1.listing", "2.listing", "3.listing"]
        kestreld.cli("rm", "team/l@3", env=env)
        assert not (versions / "3.listing").exists()
        (versions / "3.listing").write_bytes((versions / "2.listing").read_bytes())   # a killed rm's
        kestreld.cli("gc", env=env)
        assert not (versions / "3.listing").exists() and (versions / "2.listing").exists()
        assert listed() == first[:2]
    assert doors[0] == doors[1], doors   # kestrel -o json models printed a list of its own for file:// before


def test_a_manifest_is_served_from_its_protobuf_form_and_its_json_stays_the_truth(kestreld, tmp_path):
    """A read of a manifest parsed N.json into a cJSON tree: a 20,000-file dataset's took kestreld
    37.5 MB. Each version now has N.pb beside it, the same manifest as protobuf, written at the
    commit (or at the first read of an earlier build's version, or of one whose N.pb is damaged or
    another model's), and a pull is served from it. N.json stays the truth: a collection keeps what
    it names, whatever N.pb says, and fsck writes N.pb anew from it; an N.pb older than N.json (a
    hand edit of N.json) is not served either; N.pb of a deleted version is never served, and one a
    killed delete left goes at gc."""
    data = tmp_path / "ds"
    data.mkdir()
    for i in range(12):
        (data / f"f{i:02d}.bin").write_bytes(os.urandom(5000 + i))
    (tmp_path / "q.bin").write_bytes(os.urandom(70000))
    for n, (url, root) in enumerate(((f"file://{tmp_path / 'store'}", tmp_path / "store"),
                                     (kestreld.url, kestreld.data / "repo"))):
        env = kestreld.env(KESTREL_URL=url)
        p_dir, q_dir = root / "models" / "team" / "p" / "versions", root / "models" / "team" / "q" / "versions"
        kestreld.cli("push", "team/p", str(data), env=env)
        kestreld.cli("push", "team/q", str(tmp_path / "q.bin"), env=env)
        assert (p_dir / "1.pb").stat().st_size > 0 and (q_dir / "1.pb").exists()   # written at the commit

        def pulled(tag):
            out = tmp_path / f"out-{n}-{tag}"
            kestreld.cli("pull", "team/p@1", str(out), env=env)
            return out
        (p_dir / "1.pb").unlink()                     # an earlier build's version: read from N.json ...
        got = pulled("a")
        assert sorted(x.name for x in got.iterdir()) == sorted(x.name for x in data.iterdir())
        assert all((got / x.name).read_bytes() == x.read_bytes() for x in data.iterdir())
        assert (p_dir / "1.pb").exists()              # ... and its N.pb written then, dated at N.json's
        # last change before that read: an edit of N.json while it was read leaves N.pb stale
        assert (p_dir / "1.pb").stat().st_mtime_ns == (p_dir / "1.json").stat().st_ctime_ns
        good = (p_dir / "1.pb").read_bytes()
        (p_dir / "1.pb").write_bytes(b"\xff" * 40)   # damaged: N.json again, N.pb made anew
        assert (pulled("b") / "f03.bin").read_bytes() == (data / "f03.bin").read_bytes()
        assert (p_dir / "1.pb").read_bytes() == good
        # another model's N.pb is not p's: not served, and made anew
        shutil.copy(q_dir / "1.pb", p_dir / "1.pb")
        assert (pulled("q") / "f05.bin").read_bytes() == (data / "f05.bin").read_bytes()
        assert (p_dir / "1.pb").read_bytes() == good
        # q's manifest under p's name (same length: still protobuf) in p's N.pb: what a pull is
        # served is N.pb (q's file) ...
        (p_dir / "1.pb").write_bytes((q_dir / "1.pb").read_bytes().replace(b"team/q", b"team/p"))
        assert pulled("c").read_bytes() == (tmp_path / "q.bin").read_bytes()
        # ... but a collection keeps what N.json names: p's chunks all stay (each file is one chunk;
        # looked for in the store itself, since a pull may take them from the client's cache)
        kestreld.cli("gc", "--grace", "0", env=env)
        for x in data.iterdir():
            h = hashlib.sha256(x.read_bytes()).hexdigest()
            assert (root / "chunks" / h[:2] / h[2:]).exists(), x.name
        if n == 1:   # ... and fsck writes N.pb anew from N.json
            assert kestreld.api("POST", "/api/v1/admin/fsck")[0] == 200
            assert (p_dir / "1.pb").read_bytes() == good
        (p_dir / "1.pb").unlink()
        got = pulled("d")
        assert all((got / x.name).read_bytes() == x.read_bytes() for x in data.iterdir())
        # an N.pb older than its N.json (the number reused by a build that kept no tombstones, N.json
        # written again) is not served, whatever it says, and is made anew
        (p_dir / "1.pb").write_bytes((q_dir / "1.pb").read_bytes().replace(b"team/q", b"team/p"))
        then = (p_dir / "1.json").stat().st_mtime - 5
        os.utime(p_dir / "1.pb", (then, then))
        assert (pulled("f") / "f07.bin").read_bytes() == (data / "f07.bin").read_bytes()
        assert (p_dir / "1.pb").read_bytes() == good
        if n == 1:   # N.json edited by hand: the next read serves the edit, with no N.pb removed
            doc = json.loads((p_dir / "1.json").read_text())
            doc["metadataJson" if "metadataJson" in doc else "metadata_json"] = '{"edited": 1}'
            (p_dir / "1.json").write_text(json.dumps(doc))
            status, body = kestreld.api("GET", "/api/v1/models/team/p/versions/1")
            assert status == 200 and json.loads(body.get("metadataJson", body.get("metadata_json"))) == {"edited": 1}, body
            assert (p_dir / "1.pb").read_bytes() != good and (pulled("g") / "f01.bin").exists()
        # deleted: its N.pb goes with it; one a killed delete left is never served, and goes at gc
        kestreld.cli("rm", "team/p@1", env=env)
        assert not (p_dir / "1.pb").exists()
        (p_dir / "1.pb").write_bytes(good)
        gone = kestreld.cli("pull", "team/p@1", str(tmp_path / f"out-{n}-e"), env=env, check=False)
        # (its only version: the model is gone with it, "no model", as one never pushed)
        assert gone.returncode == 1 and "no model team/p" in gone.stderr, gone.stderr
        kestreld.cli("gc", env=env)
        assert not (p_dir / "1.pb").exists()


def test_a_pulled_directory_gets_its_pushed_modes_less_the_umask(kestreld, tmp_path):
    """A directory version's files took their pushed bits past the umask (chmod), so a pusher, maybe
    another user, could make the puller's files writable by group and others (0557, 0466); the top
    folder was 0755 whatever the umask; and a file of mode 000 made of several chunks could not be
    pulled by a user (it was created write-only, then read back to be checked). Now each file is made
    0600, checked, then given its pushed bits less the umask, as tar does for a user."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    modes = {"ro": 0o444, "ow": 0o557, "g": 0o466, "sub/x": 0o666, "run.sh": 0o755, "big": 0o000}
    for rel, mode in modes.items():
        (src / rel).write_bytes(os.urandom(3 << 20) if rel == "big" else rel.encode())
        (src / rel).chmod(mode)
    for url in (f"file://{tmp_path / 'store'}", kestreld.url):
        env = kestreld.env(KESTREL_URL=url, KESTREL_CACHE_DIR="")
        kestreld.cli("push", "team/modes", str(src), env=env)
        for mask in (0o022, 0o077, 0o002):
            out = pull_under(kestreld, mask, "team/modes", tmp_path / f"out-{mask:o}", env)
            got = {rel: (out / rel).stat().st_mode & 0o7777 for rel in modes}
            assert got == {rel: mode & ~mask for rel, mode in modes.items()}, (url, oct(mask), got)
            assert (out.stat().st_mode & 0o777, (out / "sub").stat().st_mode & 0o777) == (0o777 & ~mask,) * 2
            shutil.rmtree(out)


def test_the_caches_live_only_in_folders_no_one_else_can_change(kestreld, tmp_path):
    """The pull cache keeps a hard link to every pulled file and the stat cache says which chunks a
    push need not send, so a cache in a folder another user made (a shared KESTREL_CACHE_DIR, or the
    /tmp/.cache taken when HOME was unset) let that user read every pulled file and choose the bytes
    of the next push (found by a hostile test). Such a folder is not used (the transfer still works,
    nothing cached there); one of the user's own is; with HOME unset the password database's home is."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder another user owns")
    src = tmp_path / "w.bin"
    src.write_bytes(os.urandom(2 << 20))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    os.chown(shared, 65534, 65534)
    lax = tmp_path / "lax"          # the user's own, but others may write the folder above it
    lax.mkdir(mode=0o777)
    lax.chmod(0o777)
    (lax / "cache").mkdir(mode=0o700)
    own = tmp_path / "own" / "cache"
    for url in (f"file://{tmp_path / 'store'}", kestreld.url):
        for cache, used in ((shared, False), (lax / "cache", False), (own, True)):
            env = kestreld.env(KESTREL_URL=url, KESTREL_CACHE_DIR=str(cache))
            kestreld.cli("push", "team/c", str(src), env=env)
            out = tmp_path / "back.bin"
            kestreld.cli("pull", "team/c", str(out), env=env)
            assert out.read_bytes() == src.read_bytes()
            out.unlink()
            files = [p for d in (cache, pathlib.Path(f"{cache}.stat")) if d.exists() for p in d.rglob("*") if p.is_file()]
            assert bool(files) == used, (url, cache, files)
    # HOME unset: never /tmp/.cache, the home the password database names
    env = {k: v for k, v in kestreld.env(KESTREL_URL=f"file://{tmp_path / 'store'}").items()
           if k not in ("HOME", "XDG_CACHE_HOME", "KESTREL_CACHE_DIR")}
    import hashlib
    import pwd
    before = {str(p) for p in pathlib.Path("/tmp/.cache/kestrel").rglob("*")} if os.path.exists("/tmp/.cache") else set()
    kestreld.cli("pull", "team/c", str(tmp_path / "nohome.bin"), env=env)
    fresh = tmp_path / "nohome-push.bin"                 # its stat record is named by its absolute path
    fresh.write_bytes(os.urandom(1 << 20))
    os.utime(fresh, (time.time() - 10, time.time() - 10))   # not modified while read: remembered
    kestreld.cli("push", "team/c", str(fresh), env=env)
    after = {str(p) for p in pathlib.Path("/tmp/.cache/kestrel").rglob("*")} if os.path.exists("/tmp/.cache") else set()
    assert after == before
    record = (pathlib.Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".cache" / "kestrel" / "stat" /
              hashlib.sha256(os.path.realpath(fresh).encode()).hexdigest())
    assert record.is_file(), record                      # the password database's home was used
    record.unlink()


def test_a_chunk_a_killed_collection_set_aside_is_put_back(kestreld, tmp_path):
    """A collection sets a chunk aside (CHUNK.tmp.gc) before it removes it, to look again (a commit may
    have touched it meanwhile); killed between the two, the next collection put it back only if it
    knew: now it does (under ROOT/gc.lock), where before it removed it as a temp an hour later."""
    src = tmp_path / "k.bin"
    src.write_bytes(os.urandom(3 << 20))
    store = tmp_path / "store"
    env = kestreld.env(KESTREL_URL=f"file://{store}", KESTREL_CACHE_DIR="")
    kestreld.cli("push", "team/k", str(src), env=env)
    chunk = next(p for p in (store / "chunks").rglob("*") if p.is_file() and len(p.name) == 62)
    aside = chunk.with_name(chunk.name + ".tmp.gc")
    chunk.rename(aside)
    old = time.time() - 7200
    os.utime(aside, (old, old))
    kestreld.cli("gc", "--grace", "0", env=env)
    assert chunk.exists() and not aside.exists()
    kestreld.cli("pull", "team/k", str(tmp_path / "back.bin"), env=env)
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()


def test_a_cache_reached_through_a_link_in_a_folder_others_can_change_is_not_used(kestreld, tmp_path):
    """The cache folder's own place and the way the user named it were checked, but not a link met on
    the way (a review): KESTREL_CACHE_DIR=a/link1, link1 -> p/link2 -> q/cache, with p writable by
    anyone, let anyone point link2 elsewhere. Every link's target is checked as the way is: not used."""
    if os.geteuid() != 0:
        pytest.skip("needs root's folders, as the other cache test")
    src = tmp_path / "w.bin"
    src.write_bytes(os.urandom(2 << 20))
    (tmp_path / "q" / "cache").mkdir(parents=True, mode=0o700)
    (tmp_path / "a").mkdir()
    p = tmp_path / "p"
    p.mkdir()
    p.chmod(0o777)                                    # anyone may swap link2, no sticky bit
    (p / "link2").symlink_to(tmp_path / "q" / "cache")
    (tmp_path / "a" / "link1").symlink_to(p / "link2")
    (tmp_path / "a" / "direct").symlink_to(tmp_path / "q" / "cache")   # the same folder, a safe way
    for name, used in (("link1", False), ("direct", True)):
        for f in (tmp_path / "q").rglob("*"):
            if f.is_file():
                f.unlink()
        env = kestreld.env(KESTREL_CACHE_DIR=str(tmp_path / "a" / name))
        kestreld.cli("push", "team/l", str(src), env=env)
        kestreld.cli("pull", "team/l", str(tmp_path / "back.bin"), env=env)
        assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
        (tmp_path / "back.bin").unlink()
        files = [f for f in (tmp_path / "q").rglob("*") if f.is_file()]
        assert bool(files) == used, (name, files)
