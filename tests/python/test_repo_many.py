"""A push of more files than a batch of the push holds (4,096 chunks): the push hands its chunks to
the sender batch after batch, forgets those it handed over between files (lib/repo/push.c,
refs_drop) and leaves a file of one chunk its chunk's digest, which the repository fills in. Every
chunk is counted once, every file's digest in the version is its true SHA-256, the pull is whole:
to kestreld and to a file:// store."""
import hashlib
import json
import os
import subprocess

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
