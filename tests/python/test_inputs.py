"""What a job runs with, checked against the real kestreld: parameters (--param), recorded on the
job, given to it as KESTREL_PARAMS, listed and filterable; uploaded code (--code), pinned to a
version, run in a fresh copy, re-sent only where it changed; bad ones refused with nothing written."""
import json
import os
import re
import sys

import pytest

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
    table = d.cli("jobs").stdout
    assert "PARAMS" in table and "lr=0.01" in table
    only = json.loads(d.cli("-o", "json", "jobs", "--param", "lr=0.001").stdout)
    assert [j["id"] for j in only] == [a]
    assert json.loads(d.cli("-o", "json", "jobs", "--param", "lr=1").stdout) == []
    assert d.api("GET", "/api/v1/jobs?param=lr")[0] == 400
    assert d.wait(b)["state"] == "SUCCEEDED"


def test_bad_params_are_refused_and_write_nothing(daemon):
    d = daemon("--gpus", "0")
    before = d.api("GET", "/api/v1/jobs")[1].get("jobs", [])
    for params, why in (([{"key": "bad key", "value": "1"}], "bad key"),
                        ([{"key": "k", "value": "x" * 5000}], "at most 4096"),
                        ([{"key": "k", "value": "1"}, {"key": "k", "value": "2"}], "twice"),
                        ([{"key": f"k{i}", "value": "1"} for i in range(300)], "at most 256")):
        status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "params": params})
        assert status in (400, 413) and why in body["message"], (status, body)
    r = d.cli("submit", "--param", "novalue", "--", "true", check=False)
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
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
