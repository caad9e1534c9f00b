"""`import kestrel`: the cffi binding against the real kestreld (and the stand-in NVML)."""
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest

kestrel = pytest.importorskip("kestrel")
from kestrel.ffi import C, ffi  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_public_function_is_declared():
    names = set()
    for h in (ROOT / "include" / "kestrel").glob("*.h*"):
        names |= set(re.findall(r"KESTREL_API[^;(]*?\b(kestrel_\w+)\s*\(", h.read_text(), re.S))
    assert len(names) > 100
    missing = sorted(n for n in names if not hasattr(C, n))
    assert not missing, f"declare these in bindings/python/kestrel/decl/kestrel.h: {missing}"


@pytest.fixture
def client(kestreld):
    with kestrel.Client(kestreld.url, kestreld.token) as c:
        yield c


def test_jobs_end_to_end(client):
    job = client.submit(["sh", "-c", "echo one; echo two >&2; sleep 0.3; echo three"], name="py-job",
                        labels={"team": "py"}, env={"X": "1"}, priority="high")
    assert job.state == "QUEUED" and job.priority == "high"
    lines = list(job.logs(follow=True))
    assert [(l.stream, l.text) for l in lines] == [("stdout", "one"), ("stderr", "two"), ("stdout", "three")]
    job.wait(timeout=30)
    assert job.state == "SUCCEEDED" and job.exit_code == 0 and job.done
    assert [e.to_state for e in job.events] == ["QUEUED", "RUNNING", "SUCCEEDED"]
    job.report_metrics({"loss": 0.5, "acc": 0.9}, step=3)
    assert [(m.name, m.step, m.value) for m in job.metrics("loss")] == [("loss", 3, 0.5)]
    assert [j.id for j in client.jobs(label="team=py")] == [job.id]
    assert client.job(job.id).name == "py-job"
    assert "<b>job" in job._repr_html_()
    assert client.ping() == kestrel.__version__
    url = client.console_url()   # a one-time login address, never the token
    assert url.startswith(client.url + "/?code=") and len(url.split("=")[1]) == 64


def test_cancel_explain_queue_priority(client):
    hold = client.submit(["sleep", "30"], preemptible=False)
    while hold.refresh().state != "RUNNING":
        pass
    # the default daemon has no GPUs: queue behind a process slot is not possible; use a dependency
    waiting = client.submit(["true"], after_ok=[hold.id])
    assert f"waiting for job {hold.id} (after_ok)" in waiting.explain()
    assert [(j.id, pos) for j, pos, _ in client.queue()] == [(waiting.id, 1)]
    assert waiting.set_priority("urgent").priority == "urgent"
    hold.cancel().wait(timeout=30)
    assert hold.state == "CANCELLED"
    waiting.wait(timeout=30)
    assert waiting.state == "FAILED" and "dependency" in waiting.reason
    with pytest.raises(kestrel.AlreadyExistsError):
        waiting.set_priority("high")   # only a queued job can move


def test_errors_are_familiar_exceptions(client, kestreld):
    with pytest.raises(LookupError):
        client.job(424242)
    with pytest.raises(kestrel.NotFoundError) as e:
        client.job(424242)
    assert e.value.http_status == 404
    with pytest.raises(ValueError):
        client.submit(["true"], env={"KESTREL_TOKEN": "x"})
    with pytest.raises(PermissionError):
        kestrel.Client(kestreld.url, "kst_wrong").jobs()
    with pytest.raises(ConnectionError):
        kestrel.Client("http://127.0.0.1:1", "t", retries=0).ping()
    with pytest.raises(ValueError):
        client.submit()


def test_callback_exceptions_come_back_as_themselves(client):
    job = client.submit(["sh", "-c", "echo a; echo b"])
    job.wait(timeout=30)

    class Boom(Exception):
        pass

    class Sink:
        stored_exception = None

        class lines:  # noqa: N801 - the trampoline appends here
            @staticmethod
            def append(_):
                raise Boom("from the callback")

    sink = Sink()
    opts = ffi.new("kestrel_logs_options *")
    C.kestrel_logs_options_init(opts, C.KESTREL_LOGS_OPTIONS_VERSION)
    rc = C.kestrel_job_logs(ffi.NULL, client._p(), job.id, opts, C._kestrel_log_tramp, ffi.new_handle(sink))
    assert rc == C.KESTREL_EUSER
    with pytest.raises(Boom):
        kestrel.check(rc, sink)


def test_handles_close_deterministically(kestreld):
    c = kestrel.Client(kestreld.url, kestreld.token)
    c.close()
    c.close()   # twice is fine
    with pytest.raises(ValueError, match="closed"):
        c.ping()
    with kestrel.Client(kestreld.url, kestreld.token) as c2:
        job = c2.submit(["true"])
    del c2
    assert job.id > 0   # a job snapshot outlives its session's handle


def test_a_shared_client_is_serialised_across_threads(client):
    ids, errors = [], []

    def work():
        try:
            for _ in range(10):
                ids.append(client.submit(["true"]).id)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(ids)) == 40


GPUS = """\
gpu uuid=GPU-aaaa1111-0000-0000-0000-000000000000 name="NVIDIA T4" bus=0000:10:00.0 cc=7.5 total=17179869184 free=17179869184
gpu uuid=GPU-bbbb2222-0000-0000-0000-000000000000 name="NVIDIA A100-SXM4-80GB" bus=0000:20:00.0 cc=8.0 total=85899345920 free=85899345920
gpu uuid=GPU-cccc3333-0000-0000-0000-000000000000 name="NVIDIA A100-SXM4-80GB" bus=0000:30:00.0 cc=8.0 total=85899345920 free=85899345920
"""


def test_devices_on_the_stand_in_driver(tmp_path, monkeypatch):
    from conftest import KESTRELD
    stub = str(pathlib.Path(KESTRELD).parents[1] / "stubs" / "new" / "libnvidia-ml.so.1")
    desc = tmp_path / "gpus.txt"
    desc.write_text(GPUS)
    monkeypatch.setenv("KESTREL_NVML_LIBRARY", stub)
    monkeypatch.setenv("KESTREL_FAKE_GPU_FILE", str(desc))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = kestrel.devices()
    assert [g.name for g in gpus] == ["NVIDIA T4", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"]
    assert gpus[1].compute_capability == (8, 0) and gpus[1].memory_total == 85899345920
    sel = kestrel.select_devices(2, min_memory=40 << 30)
    assert [d.uuid[:8] for d in sel.devices] == ["GPU-bbbb", "GPU-cccc"]
    assert sel.rejected["GPU-aaaa1111-0000-0000-0000-000000000000"].startswith("total memory 16384 MiB")
    with pytest.raises(kestrel.NotFoundError):
        kestrel.select_devices(3, min_memory=40 << 30)
    # use_devices in a fresh interpreter: os.environ is what a framework loaded later will see
    code = ("import os, kestrel; s = kestrel.use_devices(1, min_memory=40 << 30); "
            "print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CUDA_DEVICE_ORDER'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ)).stdout.split()
    assert out == ["GPU-bbbb2222-0000-0000-0000-000000000000", "PCI_BUS_ID"]
    monkeypatch.setenv("KESTREL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
    assert kestrel.devices() == []


def test_repository_through_file_urls(tmp_path):
    store = kestrel.Client(f"file://{tmp_path}/store")
    data = os.urandom(2 << 20)
    src = tmp_path / "model.keras"
    src.write_bytes(data)
    seen = []
    v1 = store.push("team/net", str(src), metadata={"job": 7}, progress=seen.append)
    assert v1 == 1 and seen[-1].bytes_done == len(data) and seen[-1].bytes_new == len(data)
    assert store.push("team/net", str(src), alias="production", progress=seen.append) == 2
    assert seen[-1].bytes_new == 0
    out = store.pull("team/net@production", str(tmp_path / "out.keras"))
    assert pathlib.Path(out).read_bytes() == data
    vs = store.versions("team/net")
    assert [(v.version, v.aliases) for v in vs] == [(1, []), (2, ["latest", "production"])] or \
        [(v.version, sorted(v.aliases)) for v in vs] == [(1, []), (2, ["latest", "production"])]
    assert vs[0].metadata == {"job": 7}
    assert store.models() == ["team/net"]

    def stop(p):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):   # a callback's exception comes back as itself
        store.push("team/net", str(src), progress=stop)
    with pytest.raises(ValueError):
        store.push("Bad Name", str(src))
    with pytest.raises(kestrel.UnsupportedError):
        store.submit(["true"])


def test_every_public_name_has_a_docstring_and_hints():
    """Walks the package: each public class, function and method says what it does, and each public
    function and method annotates its parameters or return."""
    import importlib
    import inspect
    missing, unhinted = [], []
    for modname in ("kestrel", "kestrel.client", "kestrel.job", "kestrel.repo", "kestrel.errors", "kestrel.gpu",
                    "kestrel.logsearch", "kestrel.tokens"):
        mod = importlib.import_module(modname)
        for n in dir(mod):
            obj = getattr(mod, n)
            if n.startswith("_") or getattr(obj, "__module__", None) != modname:
                continue
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not inspect.getdoc(obj):
                missing.append(f"{modname}.{n}")
            members = [(f"{modname}.{n}.{a}", getattr(obj, a)) for a in vars(obj) if not a.startswith("_")] \
                if inspect.isclass(obj) else [(f"{modname}.{n}", obj)]
            for qual, fn in members:
                if isinstance(fn, property):
                    fn = fn.fget
                if not inspect.isfunction(fn):
                    continue
                if not inspect.getdoc(fn):
                    missing.append(qual)
                sig = inspect.signature(fn)
                params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
                if sig.return_annotation is inspect.Signature.empty and any(
                        p.annotation is inspect.Parameter.empty for p in params) or (not params and
                                                                                      sig.return_annotation is inspect.Signature.empty):
                    unhinted.append(qual)
    assert not missing, f"no docstring: {missing}"
    assert not unhinted, f"no type hints: {unhinted}"


def test_package_passes_mypy_strict():
    """`mypy --strict` over the package source (its settings: bindings/python/pyproject.toml). The
    compiled cffi module is typed by kestrel/_libkestrel.pyi; keras, pandas and tqdm have no stubs."""
    pkg = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "kestrel"], cwd=pkg,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout


def test_python_api_edges(client, tmp_path):
    import sys
    # script= runs this interpreter, not whatever `python` the server's PATH has
    script = tmp_path / "which.py"
    script.write_text("import sys; print(sys.executable)")
    tmp_path.chmod(0o755)
    job = client.submit(script=str(script)).wait(timeout=60)
    assert job.state == "SUCCEEDED", job.reason
    assert [l.text for l in job.logs()][-1] == sys.executable
    with pytest.raises(TypeError, match=r"\['python', 'train.py'\]"):
        client.submit("python train.py")
    with pytest.raises(ValueError, match="queued, running"):
        client.jobs(state="bogus")
    with pytest.raises(ValueError, match="normal, high, urgent"):
        job.set_priority("asap")
    # lists show as tables in Jupyter, their values escaped
    named = client.submit(["true"], name="<b>x</b>").wait(timeout=60)
    html = client.jobs()._repr_html_()
    assert "<table>" in html and "&lt;b&gt;x&lt;/b&gt;" in html and str(named.id) in html
    assert "<table>" in client.queue()._repr_html_() or client.queue()._repr_html_() == "<i>none</i>"
    assert "<table>" in client.nodes()._repr_html_()
    assert client.models()._repr_html_() in ("<i>none</i>",) or "<table>" in client.models()._repr_html_()
    # metrics as a pandas frame: a row a step, a column a name
    named.report_metrics([("loss", 1, 0.5), ("loss", 2, 0.25), ("acc", 1, 0.7), ("acc", 2, 0.8)])
    frame = named.metrics_frame()
    assert list(frame.columns) == ["acc", "loss"] and list(frame.index) == [1, 2]
    assert frame.loc[2, "loss"] == 0.25


def test_metrics_callback_outside_a_job_warns_once(monkeypatch):
    import warnings
    monkeypatch.delenv("KESTREL_JOB_ID", raising=False)
    import kestrel.keras as kk
    kk._warned_outside.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        kk.MetricsCallback()
        kk.MetricsCallback()
    said = [str(x.message) for x in w if "not inside a Kestrel job" in str(x.message)]
    assert len(said) == 1 and "job_id=" in said[0]


def test_repository_strings_with_a_nul_are_refused(client, tmp_path):
    """A NUL inside a name, alias, ref or path would cut the C string there, and the library would act
    on something else (found by a hostile test: set_alias("m", "prod\\0-staging", 2) moved prod; a push
    to "m\\0/../other" went to m): refused as open() does, nothing changed."""
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 1000)
    assert client.push("team/nul", str(src), alias="prod") == 1
    assert client.push("team/nul", str(src)) == 2
    for call in (lambda: client.set_alias("team/nul", "prod\0-staging", 2),
                 lambda: client.push("team/nul\0/../other", str(src)),
                 lambda: client.push("team/nul", str(src) + "\0x"),
                 lambda: client.push("team/nul", str(src), alias="a\0b"),
                 lambda: client.pull("team/nul@1\0junk", str(tmp_path / "out")),
                 lambda: client.pull("team/nul@1", str(tmp_path / "out\0.txt")),
                 lambda: client.delete_version("team/nul\0x", 1)):
        with pytest.raises(ValueError, match="embedded null byte"):
            call()
    assert [(v.version, v.aliases) for v in client.versions("team/nul")] == [(1, ["prod"]), (2, ["latest"])]
    assert not list(tmp_path.glob("out*"))


def test_job_strings_with_a_nul_are_refused(client):
    """The same for a job's argv, env, params and labels, and a metric's name (a hostile test: argv
    "a\\0b" ran as "a", a metric "a\\0b" was stored in the series "a")."""
    before = len(client.jobs())
    for call in (lambda: client.submit(["sh", "-c", "true", "a\0b"]),
                 lambda: client.submit(["sh", "-c", "true"], env={"X": "keep\0dropped"}),
                 lambda: client.submit(["sh", "-c", "true"], params={"lr": "0.1\0evil"}),
                 lambda: client.submit(["sh", "-c", "true"], labels={"team\0x": "a"})):
        with pytest.raises(ValueError, match="embedded null byte"):
            call()
    with pytest.raises(TypeError, match="expected str or bytes"):   # not four NULs (bytes(4))
        client.submit(["sh", "-c", "true"], env={"N": 4})
    assert len(client.jobs()) == before   # nothing submitted
    job = client.submit(["sh", "-c", "sleep 30"])
    try:
        with pytest.raises(ValueError, match="embedded null byte in a metric name"):
            job.report_metrics({"a\0b": 1.0}, step=1)
        with pytest.raises(ValueError, match="does not fit in 64 bits"):
            job.report_metrics({"a": 1.0}, step=2 ** 63)
        assert job.metrics() == []
    finally:
        job.cancel()


def test_a_progress_callback_using_its_own_client_is_an_error_not_a_hang(client, kestreld, tmp_path):
    """A callback calling the Client whose transfer called it waited for itself forever (found by a
    hostile test); now that call raises RuntimeError, which stops the transfer, said as itself.
    Another Client may be used from the callback."""
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 << 20))
    client.push("team/reenter", str(src))
    with pytest.raises(RuntimeError, match="cannot use the Client whose transfer called it"):
        client.pull("team/reenter", str(tmp_path / "out.bin"), progress=lambda p: client.versions("team/reenter"))
    assert not (tmp_path / "out.bin").exists()
    seen = []
    with kestrel.Client(kestreld.url, kestreld.token) as other:
        client.pull("team/reenter", str(tmp_path / "out.bin"),
                    progress=lambda p: seen.append(len(other.versions("team/reenter"))))
    assert seen and set(seen) == {1} and (tmp_path / "out.bin").read_bytes() == src.read_bytes()


@pytest.mark.parametrize("what", ["pull", "push"])
def test_ctrl_c_stops_a_script_transfer_without_a_callback(kestreld, tmp_path, what):
    """A script (no terminal, no progress callback) got Ctrl-C only once the transfer ended: a pull
    from a stalled kestreld wrote dest, then raised; a push committed, then raised (found by a hostile
    test). The binding now always asks progress, so Python's signal handler runs: KeyboardInterrupt
    within seconds, no dest, no version."""
    import signal
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(64 << 20))
    c = kestrel.Client(kestreld.url, kestreld.token)
    if what == "pull":
        c.push("team/stall", str(src))
    code = ("import kestrel, sys\n"
            f"c = kestrel.Client({kestreld.url!r}, {kestreld.token!r})\n"
            "print('go', flush=True)\n"
            "try:\n"
            + (f"    c.pull('team/stall', {str(tmp_path / 'out.bin')!r})\n" if what == "pull" else
               f"    c.push('team/stall2', {str(src)!r})\n") +
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True); sys.exit(3)\n")
    env = dict(os.environ, KESTREL_CACHE_DIR=str(tmp_path / "cache"))
    os.kill(kestreld.proc.pid, signal.SIGSTOP)    # the server stalls: no byte moves, no request ends
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        assert p.stdout.readline().strip() == "go"
        time.sleep(1)                                 # inside the transfer's first request
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
    finally:
        os.kill(kestreld.proc.pid, signal.SIGCONT)
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3 and "interrupted" in out, (p.returncode, out, err)
    assert not (tmp_path / "out.bin").exists()
    if what == "push":
        assert [m for m in c.models() if m == "team/stall2"] == [] or c.versions("team/stall2") == []
