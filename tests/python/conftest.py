"""Fixtures: the real kestreld on an ephemeral loopback port, and the kestrel CLI."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

KESTRELD = os.environ["KESTRELD"]
KESTREL_CLI = os.environ["KESTREL_CLI"]


class Daemon:
    def __init__(self, root, *flags, env=None):
        root.mkdir(parents=True, exist_ok=True)
        let_jobs_pass(root)
        self.root = root
        self.flags, self.start_env = flags, env
        self.data = root / "data"
        port_file = root / "port"
        self.log = open(root / "kestreld.log", "a")
        self.proc = subprocess.Popen(
            [KESTRELD, "--port", "0", "--data-dir", str(self.data), "--port-file", str(port_file), *flags],
            stderr=self.log, env=env)
        deadline = time.time() + 20
        while not (port_file.exists() and (self.data / "admin.token").exists()):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("kestreld did not start: " + (root / "kestreld.log").read_text())
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        self.token = (self.data / "admin.token").read_text().strip()

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KESTREL_")}
        env.update(KESTREL_URL=self.url, KESTREL_TOKEN=self.token, HOME=str(self.root))
        env.update(extra)
        return env

    def cli(self, *args, check=True, env=None, timeout=120):
        p = subprocess.run([KESTREL_CLI, *args], capture_output=True, text=True,
                           env=env if env is not None else self.env(), timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kestrel {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def api(self, method, path, body=None, token=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {token or self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def submit(self, *args, env=None):
        """Submit through the CLI; returns the job id."""
        return json.loads(self.cli("-o", "json", "submit", *args, env=env).stdout)["id"]

    def job(self, jid):
        return json.loads(self.cli("-o", "json", "status", str(jid)).stdout)

    def wait_state(self, jid, state, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.job(jid)
            if j["state"] == state:
                return j
            time.sleep(0.05)
        raise AssertionError(f"job {jid} never reached {state}: {self.job(jid)}")

    def wait(self, jid, timeout=60):
        # the CLI's own limit is timeout; the process's is beyond it (cli's default of 120 s cut longer waits short)
        return json.loads(self.cli("-o", "json", "wait", "--timeout", str(timeout), str(jid), check=False,
                                   timeout=timeout + 60).stdout)

    def wait_for_line(self, jid, needle, timeout=120, count=1):
        """The job's log once it holds needle count times (AssertionError with the log after timeout
        seconds)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            out = self.cli("logs", str(jid)).stdout
            if out.count(needle) >= count:
                return out
            time.sleep(0.1)
        raise AssertionError(f"job {jid} never printed {needle!r} {count} times:\n" +
                             self.cli("logs", str(jid)).stdout[-3000:])

    def explain(self, jid):
        return json.loads(self.cli("-o", "json", "explain", str(jid)).stdout)

    def restart(self):
        """Start kestreld again on the same data directory (after it died or was killed)."""
        assert self.proc.poll() is not None, "restart() needs the old kestreld gone"
        self.log.close()
        (self.root / "port").unlink(missing_ok=True)
        self.__init__(self.root, *self.flags, env=self.start_env)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()
        return self.proc.returncode


def drop_cgroup(data):
    """Remove what a kestreld of data left of its jobs' cgroups (job_cgroup.c: kestrel-HASH beside its
    own cgroup, which is this process's), processes killed: a kestreld killed and never started again
    leaves them (it removes them at its stop, or at its next start)."""
    if os.geteuid() != 0 or not os.path.isdir(data):
        return
    h = 2166136261
    for b in os.path.realpath(data).encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    mounts = [line.split() for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
              if " - cgroup2 " in line]
    own = [line[3:] for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")]
    if not mounts or not own:
        return
    mnt, root = mounts[0][4], mounts[0][3]
    below = own[0][len(root):] if root != "/" and own[0].startswith(root) else own[0]
    base = pathlib.Path(mnt + below.rstrip("/")) / f"kestrel-{h:08x}"
    for cg in [*base.glob("job-*"), base]:
        try:
            (cg / "cgroup.kill").write_text("1")
        except OSError:
            pass
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def _reachable(path):
    """Every folder above path can be passed through by other accounts (o+x)."""
    p = os.path.abspath(path)
    while p != "/":
        p = os.path.dirname(p)
        if not os.stat(p).st_mode & 0o001:
            return p
    return None


@pytest.fixture(scope="session", autouse=True)
def _job_accounts_reach_the_tree():
    """kestreld as root runs each user's jobs under an unprivileged account of its own: those jobs
    run this interpreter and import kestrel from the build tree, so both must be reachable."""
    if os.geteuid() != 0:
        return
    for what in (os.path.realpath(sys.executable), KESTRELD, *os.environ.get("PYTHONPATH", "").split(":")):
        if what and (blocked := _reachable(what)) is not None:
            pytest.exit(f"jobs run as unprivileged accounts, which cannot pass through {blocked} to reach {what}: "
                        f"chmod o+x {blocked} (or build the tree elsewhere)", returncode=3)


def write_replacing(path, text):
    """Writes a file that a running daemon (or the fake NVML it loads) rereads: a temp beside it, then a
    rename, so a reader sees the old text or the new, never an emptied file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def processes(pattern, count=1, timeout=20):
    """The pids whose command lines match pattern (pgrep -f), once there are count of them
    (AssertionError after timeout seconds)."""
    deadline = time.time() + timeout
    while len(pids := subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()) < count:
        assert time.time() < deadline, f"fewer than {count} processes match {pattern!r}: {pids}"
        time.sleep(0.1)
    return [int(p) for p in pids]


def no_process(pattern, timeout=10):
    """True once no process's command line matches pattern; False if one still does after timeout."""
    deadline = time.time() + timeout
    while subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0:
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def token(d, user, **extra):
    """A new token of user's (POST /api/v1/tokens as the admin)."""
    status, body = d.api("POST", "/api/v1/tokens", {"user": user, **extra})
    assert status == 201, body
    return body["token"]


def wait_line(d, jid, prefix, timeout=30):
    """The rest of the first line of job jid's log that starts with prefix, once there is one."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for line in d.cli("logs", str(jid)).stdout.splitlines():
            if line.startswith(prefix):
                return line[len(prefix):]
        time.sleep(0.1)
    raise AssertionError(f"job {jid} never printed {prefix!r}: {d.cli('logs', str(jid)).stdout}")


def let_jobs_pass(path):
    """pytest makes its temporary folders 0700; a job (another account) must reach the scripts and
    folders a test writes there. o+x only: nothing becomes listable or readable that was not."""
    p = pathlib.Path(path)
    while str(p).startswith(tempfile.gettempdir() + "/"):
        os.chmod(p, os.stat(p).st_mode | 0o011)
        p = p.parent


@pytest.fixture(autouse=True)
def _tmp_path_reachable(tmp_path):
    let_jobs_pass(tmp_path)


@pytest.fixture
def daemon(tmp_path):
    """Start kestreld with custom flags: daemon(*flags); stopped (exit 0 required) at teardown."""
    started = []

    def start(*flags, env=None):
        d = Daemon(tmp_path / f"d{len(started)}", *flags, env=env)
        started.append(d)
        return d

    yield start
    try:
        for d in started:
            assert d.stop() == 0
    finally:
        for d in started:
            d.stop()
            drop_cgroup(d.data)


@pytest.fixture
def small_fs(tmp_path):
    """A 24 MiB tmpfs of the test's own (root may mount one; elsewhere the test cannot run)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0711", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def kestreld(tmp_path):
    d = Daemon(tmp_path, "--grace-period", "5", "--gpus", "2")
    yield d
    try:
        assert d.stop() == 0
    finally:
        d.stop()
        drop_cgroup(d.data)
