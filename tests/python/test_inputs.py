"""What a job runs with, checked against the real kestreld: parameters (--param), recorded on the
job, given to it as KESTREL_PARAMS, listed and filterable; bad ones refused with nothing written."""
import json
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
