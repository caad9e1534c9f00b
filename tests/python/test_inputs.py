"""What a job runs with, checked against the real kestreld: parameters (--param), recorded on the
job, given to it as KESTREL_PARAMS, listed and filterable; uploaded code (--code), pinned to a
version, run in a fresh copy, re-sent only where it changed; bad ones refused with nothing written."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import KESTREL_CLI

try:   # the sanitizer build runs these tests against its kestreld, without the Python binding
    import kestrel
    HAVE_BINDING = True
except ImportError:
    HAVE_BINDING = False
needs_binding = pytest.mark.skipif(not HAVE_BINDING, reason="the cffi binding is built in the plain build only")


def test_params_reach_the_job_and_are_listed_and_filterable(daemon):
    d = daemon("--gpus", "0")
    a = d.submit("--param", "lr=0.001", "--param", "epochs=3", "--param", "note=a b=c", "--",
                 "sh", "-c", 'printf "%s\\n" "$KESTREL_PARAMS"')
    b = d.submit("--param", "lr=0.01", "--", "true")
    assert d.wait(a)["state"] == "SUCCEEDED"
    got = json.loads(d.cli("logs", str(a)).stdout.strip().splitlines()[-1])
    assert got == {"lr": "0.001", "epochs": "3", "note": "a b=c"}
    status = d.cli("status", str(a)).stdout
    assert "lr=0.001" in status and "epochs=3" in status
    table = d.cli("-o", "wide", "jobs").stdout
    assert "PARAMS" in table and "lr=0.01" in table
    only = json.loads(d.cli("-o", "json", "jobs", "--param", "lr=0.001").stdout)["jobs"]
    assert [j["id"] for j in only] == [a]
    assert json.loads(d.cli("-o", "json", "jobs", "--param", "lr=1").stdout)["jobs"] == []
    assert d.api("GET", "/api/v1/jobs?param=lr")[0] == 400
    assert d.wait(b)["state"] == "SUCCEEDED"


def test_bad_params_are_refused_and_write_nothing(daemon):
    d = daemon("--gpus", "0")
    before = d.api("GET", "/api/v1/jobs")[1].get("jobs", [])
    for params, why in (([{"key": "bad key", "value": "1"}], "bad key"),
                        ([{"key": "k", "value": "x" * 5000}], "at most 4096"),
                        ([{"key": "k", "value": "1"}, {"key": "k", "value": "2"}], "twice"),
                        ([{"key": f"k{i}", "value": "1"} for i in range(300)], "at most 256"),
                        ([{"key": f"k{i}", "value": "v" * 4000} for i in range(40)], "KESTREL_PARAMS")):
        status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "params": params})
        assert status in (400, 413) and why in body["message"], (status, body)
    r = d.cli("submit", "--param", "novalue", "--", "true", check=False)
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    assert d.cli("jobs", "--param", "a=1", "--param", "b=2", check=False).returncode == 2
    assert d.api("GET", "/api/v1/jobs")[1].get("jobs", []) == before


@needs_binding
def test_python_params_round_trip(daemon):
    d = daemon("--gpus", "0")
    c = kestrel.Client(d.url, d.token)
    job = c.submit([sys.executable, "-c", "import kestrel, json; print(json.dumps(kestrel.params()))"],
                   params={"lr": 0.001, "layers": 4}, env={"PYTHONPATH": ":".join(sys.path)})
    assert job.params == {"lr": "0.001", "layers": "4"}
    job.wait()
    assert job.state == "SUCCEEDED", [l.text for l in job.logs()]
    assert json.loads([l.text for l in job.logs()][-1]) == {"lr": "0.001", "layers": "4"}
    assert [j.id for j in c.jobs(param="layers=4")] == [job.id]
    assert kestrel.params() == {}


def code_dir(root):
    """A project as a user has it: code, a secret git ignores, data .kestrelignore leaves out."""
    proj = root / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "train.py").write_text("import os, pkg.util\nprint('files', sorted(os.listdir('.')), pkg.util.X)\n")
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "pkg" / "util.py").write_text("X = 1\n")
    (proj / ".env").write_text("TOKEN=s3cret\n")
    (proj / ".gitignore").write_text(".env\n__pycache__/\n")
    (proj / "data.bin").write_bytes(os.urandom(3 << 20))
    (proj / ".kestrelignore").write_text("data.bin\n")
    for i in range(200):   # enough files that a re-upload sending everything would show
        (proj / "pkg" / f"m{i}.py").write_text(f"V = {i}\n" + "# padding\n" * 200)
    return proj


def test_code_upload_runs_a_fresh_copy_and_resends_only_what_changed(daemon, tmp_path):
    d = daemon("--gpus", "0")
    proj = code_dir(tmp_path)
    r = d.cli("-o", "json", "submit", "--code", str(proj), "--", sys.executable, "train.py")
    first = json.loads(r.stdout)
    assert "admin/code/proj@1" in r.stderr, r.stderr
    job = d.wait(first["id"])
    assert job["state"] == "SUCCEEDED", d.cli("logs", first["id"]).stdout
    assert job["spec"]["code"] == "admin/code/proj@1"
    out = d.cli("logs", first["id"]).stdout
    assert "'train.py'" in out and "'pkg'" in out and ".env" not in out and "data.bin" not in out, out
    assert "code:      admin/code/proj@1" in d.cli("status", first["id"]).stdout
    # one file edited: only its bytes are new, and the job sees the edit
    (proj / "pkg" / "util.py").write_text("X = 2\n")
    r = d.cli("-o", "json", "submit", "--code", str(proj), "--", sys.executable, "train.py")
    second = json.loads(r.stdout)
    new = int(re.search(r"(\d+) of them new", r.stderr).group(1))
    total = int(re.search(r"\((\d+) bytes", r.stderr).group(1))
    assert new <= 64 and total > 200 * 2000, r.stderr
    assert d.wait(second["id"])["state"] == "SUCCEEDED"
    assert d.cli("logs", second["id"]).stdout.strip().endswith("2")
    # the copy is the job's own: editing it changed nothing in the repository
    assert d.api("GET", "/api/v1/models/admin/code/proj/versions")[1]["versions"][-1]["version"] == "2"
    # --code .. from a folder inside the project: the whole project, as from anywhere (git listed the
    # subtree it ran in, its paths read under the project: pkg's own files pushed as the project's,
    # a hostile test)
    p = subprocess.run([KESTREL_CLI, "-o", "json", "submit", "--code", "..", "--", "sh", "-c", "ls; ls pkg | wc -l"],
                       cwd=proj / "pkg", env=d.env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    job = d.wait(json.loads(p.stdout)["id"])
    out = d.cli("logs", str(job["id"])).stdout
    assert job["state"] == "SUCCEEDED" and "train.py" in out and "pkg" in out and "\n202\n" in out + "\n", out


def test_code_upload_bounds_and_refusals_write_nothing(daemon, tmp_path):
    d = daemon("--gpus", "0")
    proj = code_dir(tmp_path)
    (proj / "weights.h5").write_bytes(os.urandom(2 << 20))
    r = d.cli("submit", "--code", str(proj), "--max-code-size", "1M", "--", "true", check=False)
    assert r.returncode == 1 and "weights.h5" in r.stderr and ".kestrelignore" in r.stderr, r.stderr
    (proj / "weights.h5").unlink()
    (proj / "link.py").symlink_to(proj / "train.py")
    r = d.cli("submit", "--code", str(proj), "--", "true", check=False)
    assert r.returncode == 1 and "link.py" in r.stderr and "symlink" in r.stderr, r.stderr
    r = d.cli("submit", "--code", str(proj), "--git", "https://example.invalid/x.git", "--", "true", check=False)
    assert r.returncode == 2 and "choose one" in r.stderr
    assert d.api("GET", "/api/v1/jobs")[1].get("jobs", []) == []
    assert d.api("GET", "/api/v1/models")[1].get("names", []) == []
    # a ref that is not a directory version, or does not exist: 400 naming the field
    f = tmp_path / "one.bin"
    f.write_bytes(b"x")
    d.cli("push", "admin/file", str(f))
    for ref, why in (("admin/file@1", "not a directory"), ("admin/nothing@1", "code"), ("Bad Name", "bad model name")):
        status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "code": ref})
        assert status == 400 and why in body["message"] and "'code'" in body["message"], (ref, body)
    assert d.api("GET", "/api/v1/jobs")[1].get("jobs", []) == []


def test_unchanged_code_makes_no_new_version(daemon, tmp_path):
    """A submit refused after its code went (a class above the user's, a bad input, --max-queued) made a
    version each time: four refusals, four identical versions (a hostile test). The newest version,
    when it holds exactly these files, is used again; an edit (content or mode) makes the next one."""
    d = daemon("--gpus", "0", "--max-priority", "normal")
    bob = d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]
    env = d.env(KESTREL_TOKEN=bob)
    proj = code_dir(tmp_path)
    for bad in (("--priority", "urgent"), ("--data", "nosuch/x"), ("--after-ok", "999")):
        r = d.cli("submit", "--code", str(proj), *bad, "--", "true", env=env, check=False)
        assert r.returncode != 0, r.stderr
        assert "bob/code/proj@1 " in r.stderr, r.stderr
    r = d.cli("submit", "--code", str(proj), "--", "sh", "-c", "cat train.py", env=env)
    assert "bob/code/proj@1 " in r.stderr and "0 of them new" in r.stderr, r.stderr
    versions = d.api("GET", "/api/v1/models/bob/code/proj/versions", token=bob)[1]["versions"]
    assert [int(v["version"]) for v in versions] == [1], versions
    (proj / "train.py").chmod(0o755)
    assert "bob/code/proj@2 " in d.cli("submit", "--code", str(proj), "--", "true", env=env).stderr
    (proj / "train.py").write_text("print('changed')\n")
    assert "bob/code/proj@3 " in d.cli("submit", "--code", str(proj), "--", "true", env=env).stderr
    assert "bob/code/proj@3 " in d.cli("submit", "--code", str(proj), "--", "true", env=env).stderr


def test_another_users_private_code_cannot_be_run(daemon, tmp_path):
    d = daemon("--gpus", "0")
    alice = d.api("POST", "/api/v1/tokens", {"user": "alice"})[1]["token"]
    bob = d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]
    proj = code_dir(tmp_path)
    r = d.cli("submit", "--code", str(proj), "--", "true", env=d.env(KESTREL_TOKEN=alice))
    assert "alice/code/proj@1" in r.stderr
    d.cli("model", "set", "alice/code/proj", "--visibility", "private", env=d.env(KESTREL_TOKEN=alice))
    status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "code": "alice/code/proj@1"}, token=bob)
    assert status == 400 and "no model" in body["message"], body
    assert len(d.api("GET", "/api/v1/jobs")[1]["jobs"]) == 1   # alice's only
    # an alias is pinned to the version it names at submit
    status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "code": "alice/code/proj"}, token=alice)
    assert status == 201 and body["spec"]["code"] == "alice/code/proj@1", body


@needs_binding
def test_python_submit_with_code(daemon, tmp_path):
    d = daemon("--gpus", "0")
    c = kestrel.Client(d.url, d.token)
    proj = code_dir(tmp_path)
    job = c.submit([sys.executable, "train.py"], code=str(proj))
    assert job.code == "admin/code/proj@1"
    job.wait()
    assert job.state == "SUCCEEDED" and "'pkg'" in [l.text for l in job.logs()][-1]
    with pytest.raises(kestrel.TooLargeError):
        c.submit(["true"], code=str(proj), max_code_size=1000)


def test_datasets_are_linked_read_only_once_per_host_and_recorded(daemon, tmp_path):
    d = daemon("--gpus", "0")
    ds = tmp_path / "mnist"
    (ds / "train").mkdir(parents=True)
    (ds / "train" / "x.npy").write_bytes(os.urandom(1 << 20))
    (ds / "labels.txt").write_text("0 1 2\n")
    d.cli("push", "admin/mnist", str(ds))
    d.cli("alias", "admin/mnist", "1", "production")
    one = tmp_path / "vocab.txt"
    one.write_text("a b c\n")
    d.cli("push", "admin/vocab", str(one))
    proj = code_dir(tmp_path)
    script = ("import os, hashlib\n"
              "p = 'data/mnist/train/x.npy'\n"
              "print('sha', hashlib.sha256(open(p, 'rb').read()).hexdigest())\n"
              "print('labels', open('data/mnist/labels.txt').read().strip(), 'vocab', open('vocab.txt').read().strip())\n"
              "print('ino', os.stat(p).st_ino, 'mode', oct(os.stat(p).st_mode & 0o777))\n"
              "try:\n    open(p, 'ab').write(b'x'); print('wrote')\nexcept OSError as e:\n    print('refused', e.errno)\n")
    (proj / "read.py").write_text(script)
    jobs = []
    for _ in range(2):
        r = d.cli("-o", "json", "submit", "--code", str(proj), "--data", "admin/mnist@production",
                  "--data", "admin/vocab:vocab.txt", "--", sys.executable, "read.py")
        jobs.append(json.loads(r.stdout)["id"])
    outs = []
    for jid in jobs:
        j = d.wait(jid)
        log = d.cli("logs", jid).stdout
        assert j["state"] == "SUCCEEDED", log
        assert [(m["ref"], m["path"]) for m in j["spec"]["data"]] == [("admin/mnist@1", "data/mnist"),
                                                                     ("admin/vocab@1", "vocab.txt")]
        assert "admin/mnist@1 at data/mnist" in d.cli("status", jid).stdout
        outs.append(dict(line.split(" ", 1) for line in log.splitlines() if line.split(" ", 1)[0] in
                         ("sha", "labels", "ino")))
        import hashlib
        assert outs[-1]["sha"] == hashlib.sha256((ds / "train" / "x.npy").read_bytes()).hexdigest()
        assert outs[-1]["labels"] == "0 1 2 vocab a b c"
        if os.geteuid() == 0:   # the job's identity is not the files' owner: it cannot write them
            assert "refused 13" in log and "wrote" not in log, log
    # the second job linked the same bytes: one inode, not a second copy
    assert outs[0]["ino"] == outs[1]["ino"]


def test_a_dataset_the_disk_cannot_hold_is_refused_and_a_cancelled_copy_stops(daemon, tmp_path):
    """A version's size is not what it stores: files naming one chunk again and again (a hostile test
    committed 300 GB from one 1 MiB chunk, and kestreld copied it as root until the disk was full,
    on after the job was cancelled). The host's copy is refused where the data dir's disk could not
    keep its reserve, saying why; a copy no queued job asks for any more stops."""
    import hashlib
    import struct
    import time
    from repo_api import raw
    d = daemon("--gpus", "0")
    c = os.urandom(4 << 20)
    digest = hashlib.sha256(c).hexdigest()
    body = hashlib.sha256(c).digest() + struct.pack(">I", len(c)) + c
    assert raw(d, "POST", "/api/v1/chunks/pack", body, "application/octet-stream")[0] == 200

    def commit(name, files):
        m = {"size": str(files * len(c)), "chunks": [{"digest": digest, "size": str(len(c))}] * files,
             "files": [{"path": f"f{i:06d}.bin", "size": str(len(c)), "sha256": digest, "chunks": 1}
                       for i in range(files)]}
        status, answer = raw(d, "POST", f"/api/v1/models/admin/{name}/versions", json.dumps(m).encode())
        assert status == 201, answer

    vfs = os.statvfs(d.data)
    too_many = (vfs.f_bavail * vfs.f_frsize + (2 << 30)) // len(c)
    if too_many > 60000:
        pytest.skip("this disk is too big for a manifest of the test's size")
    commit("bomb", too_many)
    j = d.wait(d.submit("--data", "admin/bomb@1", "--", "true"))
    assert j["state"] == "FAILED" and "GiB free" in j["reason"] and "admin/bomb@1" in j["reason"], j
    staged = lambda: [p for p in (d.data / "staging").glob("data-*")] if (d.data / "staging").exists() else []
    cached = lambda: list((d.data / "cache" / "data").glob("*"))   # glob of a missing dir: []
    assert staged() == [] and cached() == []
    # a copy that fits, cancelled while it runs: it stops within seconds, leaving nothing
    vfs = os.statvfs(d.data)
    room = vfs.f_bavail * vfs.f_frsize - max(1 << 30, vfs.f_blocks * vfs.f_frsize // 20)
    big = min(3000, room // len(c) // 2)   # up to 12 GiB from one chunk: more than the seconds a cancel takes
    if big < 500:
        pytest.skip("too little free disk here for a copy that takes seconds")
    commit("big", big)
    jid = d.submit("--data", "admin/big@1", "--", "true")
    deadline = time.time() + 30
    while not staged() and time.time() < deadline:   # the copy runs
        time.sleep(0.05)
    assert staged() and "copying dataset" in d.explain(jid)["reason"]
    d.cli("cancel", jid)
    deadline = time.time() + 15
    while staged() and time.time() < deadline:
        time.sleep(0.2)
    assert staged() == [], "the copy went on after its only job was cancelled"
    time.sleep(1)
    assert cached() == []


def test_bad_datasets_are_refused_and_write_nothing(daemon, tmp_path):
    d = daemon("--gpus", "0")
    f = tmp_path / "v.txt"
    f.write_text("x")
    d.cli("push", "admin/v", str(f))
    for data, why in (([{"ref": "admin/nope@1", "path": "x"}], "'data'"),
                      ([{"ref": "admin/v@1", "path": "../x"}], "inside the work dir"),
                      ([{"ref": "admin/v@1", "path": "/etc/x"}], "inside the work dir"),
                      ([{"ref": "admin/v@1", "path": "a/."}], "empty segments"),
                      ([{"ref": "admin/v@1", "path": "x/"}], "empty segments"),
                      ([{"ref": "admin/v@1", "path": "./d"}], "empty segments"),
                      ([{"ref": "admin/v@1", "path": "a"}, {"ref": "admin/v@1", "path": "a/b"}], "overlap"),
                      ([{"ref": "admin/v@1", "path": f"p{i}"} for i in range(65)], "at most 64")):
        status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "data": data})
        assert status in (400, 413) and why in body["message"], (data[:2], body)
    status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "git_url": "https://example.invalid/x.git",
                                                  "data": [{"ref": "admin/v@1", "path": "v"}]})
    assert status == 400 and "git_url" in body["message"]
    assert d.api("GET", "/api/v1/jobs")[1].get("jobs", []) == []
    # a dataset path the code already holds: the job fails before it starts, saying which
    proj = code_dir(tmp_path)
    r = d.cli("-o", "json", "submit", "--code", str(proj), "--data", "admin/v:train.py", "--", "true")
    j = d.wait(json.loads(r.stdout)["id"])
    assert j["state"] == "FAILED" and "already taken (by the job's code)" in j["reason"], j


@needs_binding
def test_python_submit_with_data(daemon, tmp_path):
    d = daemon("--gpus", "0")
    c = kestrel.Client(d.url, d.token)
    f = tmp_path / "v.txt"
    f.write_text("hello data\n")
    c.push("admin/v", str(f))
    job = c.submit(["cat", "in/v.txt"], data={"in/v.txt": "admin/v"})
    assert job.data == {"in/v.txt": "admin/v@1"}
    job.wait()
    assert job.state == "SUCCEEDED" and [l.text for l in job.logs()][-1] == "hello data"


def test_a_model_pushed_by_a_job_carries_its_lineage_and_reproduces(daemon, tmp_path):
    d = daemon("--gpus", "0")
    f = tmp_path / "v.txt"
    f.write_text("7\n")
    d.cli("push", "admin/ds", str(f))
    proj = code_dir(tmp_path)
    (proj / "fit.sh").write_text('echo "$KESTREL_PARAMS $(cat d.txt)" > model.txt && '
                                 '"$CLI_BIN" push admin/m model.txt && echo pushed\n')
    r = d.cli("-o", "json", "submit", "--code", str(proj), "--data", "admin/ds:d.txt", "--param", "lr=0.1",
              "--env", f"CLI_BIN={os.environ['KESTREL_CLI']}", "--", "sh", "fit.sh")
    jid = json.loads(r.stdout)["id"]
    assert d.wait(jid)["state"] == "SUCCEEDED", d.cli("logs", jid).stdout
    meta = json.loads(d.api("GET", "/api/v1/models/admin/m/versions")[1]["versions"][0]["metadata_json"])
    assert meta["lineage"] == {"job_id": int(jid), "code": "admin/code/proj@1",
                               "data": [{"ref": "admin/ds@1", "path": "d.txt"}], "params": {"lr": "0.1"},
                               "argv": ["sh", "fit.sh"]}, meta
    assert '"lineage"' in d.cli("models", "admin/m").stdout
    # a client cannot write lineage itself: only a job's push gets it
    g = tmp_path / "g.txt"
    g.write_text("x")
    d.cli("push", "admin/forged", str(g), "--meta", f"lineage={jid}", "--meta", "lineage=again", "--meta", "note=kept")
    forged = json.loads(d.api("GET", "/api/v1/models/admin/forged/versions")[1]["versions"][0]["metadata_json"])
    assert forged == {"note": "kept", "filename": "g.txt"}, forged   # kestrel push records the file's name
    assert d.cli("reproduce", "admin/forged@1", check=False).returncode == 1
    # reproduce: a new job with the same inputs, which pushes version 2
    r = d.cli("reproduce", "admin/m@1")
    new = re.search(r"submitted job (\d+)", r.stdout).group(1)
    assert "code admin/code/proj@1" in r.stdout and "data admin/ds@1" in r.stdout, r.stdout
    j = d.wait(new)
    assert j["state"] == "SUCCEEDED" and j["spec"]["params"] == [{"key": "lr", "value": "0.1"}], j
    assert len(d.api("GET", "/api/v1/models/admin/m/versions")[1]["versions"]) == 2
    # what can no longer be found is named, and nothing is queued
    d.cli("rm", "admin/ds@1")
    before = len(d.api("GET", "/api/v1/jobs")[1]["jobs"])
    r = d.cli("reproduce", "admin/m@1", check=False)
    assert r.returncode == 1 and "dataset admin/ds@1" in r.stderr and "can no longer be found" in r.stderr, r.stderr
    assert len(d.api("GET", "/api/v1/jobs")[1]["jobs"]) == before
    # another user cannot rerun it (its secrets and inputs are its owner's)
    bob = d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]
    count = len(d.api("GET", "/api/v1/jobs")[1]["jobs"])
    assert d.api("POST", f"/api/v1/jobs/{jid}/rerun", token=bob)[0] == 404
    assert len(d.api("GET", "/api/v1/jobs")[1]["jobs"]) == count   # nothing was queued
    assert d.cli("reproduce", "admin/nothing@1", check=False).returncode == 1


def test_a_deleted_dataset_is_not_served_and_its_cached_copy_goes(daemon, tmp_path):
    d = daemon("--gpus", "0", "--repo-gc-grace", "0")
    f = tmp_path / "v.txt"
    f.write_text("old bytes\n")
    d.cli("push", "admin/ds", str(f))
    first = d.submit("--data", "admin/ds:v.txt", "--", "cat", "v.txt")
    assert d.wait(first)["state"] == "SUCCEEDED"
    cache = d.data / "cache" / "data"
    assert len([p for p in cache.iterdir() if p.suffix == ".ref"]) == 1
    flag = tmp_path / "go"   # the gate ends once the version is deleted, not after 3 s
    gate = d.submit("--", "sh", "-c", f"until [ -e '{flag}' ]; do sleep 0.05; done")
    later = d.submit("--after-ok", gate, "--data", "admin/ds:v.txt", "--", "cat", "v.txt")
    d.cli("rm", "admin/ds@1")
    flag.touch()
    j = d.wait(later)
    assert j["state"] == "FAILED" and "dataset admin/ds@1" in j["reason"], j
    assert "old bytes" not in d.cli("logs", later).stdout
    assert d.api("POST", "/api/v1/repo/gc?grace_s=0")[0] == 200
    assert list(cache.iterdir()) == []
    status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "data": [{"ref": "admin/ds@1", "path": "v"}]})
    assert status == 400 and "'data'" in body["message"]


def test_staging_left_by_a_killed_kestreld_is_emptied_at_start(daemon):
    d = daemon("--gpus", "0")
    left = d.data / "staging" / "work-XXXXXX"
    left.mkdir(parents=True)
    (left / "half.bin").write_bytes(b"x" * 1000)
    d.proc.kill()
    d.proc.wait()
    d.restart()
    assert not (d.data / "staging").exists() or list((d.data / "staging").iterdir()) == []
