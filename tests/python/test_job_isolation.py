"""A job's processes and environment kept to the job, checked from outside against the real kestreld
(as root, as CI runs it): what it inherits of kestreld's environment, its cgroup (which it cannot
leave, and which its end empties), its account's process limit."""
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
from conftest import no_process, token, wait_line

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="per-user identities need kestreld as root (CI is root)")


def as_user(d, tok):
    return d.env(KESTREL_TOKEN=tok)


def logs(d, jid):
    return d.cli("logs", str(jid)).stdout


def test_kestrelds_environment_stays_its_own_but_what_it_passes_on(daemon):
    """PIP_* in kestreld's environment configure the environment builds (a team index, often with its
    credentials): a job does not inherit them (a hostile test read kestreld's environment from a job).
    Nor anything else not named: a later hostile test read AWS keys and a terraform config. A job gets
    PATH, the locale and the toolchains' own (KERAS_*, CUDA_*, ...), and what --job-env names."""
    env = dict(os.environ, PIP_INDEX_URL="https://team:S3CRET@pypi.example/simple", KX_PLAIN="kept",
               AWS_SECRET_ACCESS_KEY="AKIASECRETKEY", KERAS_BACKEND="torch", MYORG_A="a", MYORG_B="b")
    d = daemon("--gpus", "0", "--job-env", "KX_PLAIN", "--job-env", "MYORG_*", env=env)
    probe = "echo index=[$PIP_INDEX_URL] plain=[$KX_PLAIN] aws=[$AWS_SECRET_ACCESS_KEY] keras=[$KERAS_BACKEND] " \
            "org=[$MYORG_A$MYORG_B] path=[${PATH:+set}]"
    j = d.wait(d.submit("--", "sh", "-c", probe))
    logs = d.cli("logs", str(j["id"])).stdout
    assert "index=[] plain=[kept] aws=[] keras=[torch] org=[ab] path=[set]" in logs and "S3CRET" not in logs, logs
    for bad in ("A=B", "1X", "*", "X*Y", ""):
        r = subprocess.run([os.environ["KESTRELD"], "--job-env", bad, "--check-config"], capture_output=True, text=True)
        assert r.returncode == 2 and "--job-env: a variable's name" in r.stderr, (bad, r.stderr)


def test_a_process_left_outside_the_jobs_group_holds_neither_the_job_nor_kestreld(daemon):
    """A job's setsid child keeps the job's output pipe open: a hostile test held a job RUNNING (its
    GPUs, a preemption, its cancel) for good, and kestreld's stop for 327 s. The job ends when its
    process does, and what it left running is stopped then (found by its KESTREL_CHECKPOINT_DIR): a
    later hostile test saw a cancelled job's 47 detached processes hold its user's process limit."""
    d = daemon("--gpus", "1", "--grace-period", "2")
    try:
        jid = d.submit("--gpus", "1", "--", "sh", "-c", "setsid sleep 3017 & sleep 0.5; echo started; exit 0")
        j = d.wait(jid, timeout=30)
        assert j["state"] == "SUCCEEDED", j
        assert "no longer read" in wait_line(d, jid, "[kestrel] the job's processes ended", timeout=10)
        assert "started" in logs(d, jid)
        assert "1 process the job left" in wait_line(d, jid, "[kestrel] stopped", timeout=10)
        assert no_process("^sleep 3017$", timeout=5)
        busy = d.submit("--gpus", "1", "--", "sh", "-c", "setsid sleep 3017 & while :; do sleep 1; done")
        d.wait_state(busy, "RUNNING")
        time.sleep(0.5)
        d.cli("cancel", busy)
        assert d.wait(busy, timeout=30)["state"] == "CANCELLED"
        assert no_process("^sleep 3017$", timeout=5)   # what the cancelled run left is gone too
        last = d.submit("--gpus", "1", "--", "sh", "-c", "setsid sleep 3017 & while :; do sleep 1; done")
        d.wait_state(last, "RUNNING")
        t = time.time()
        assert d.stop() == 0 and time.time() - t < 15, time.time() - t
    finally:
        subprocess.run(["pkill", "-KILL", "-f", "^sleep 3017$"], capture_output=True)


def cgroup2_writable():
    """Root, and a cgroup v2 mount where a cgroup can be made (as kestreld makes its jobs')."""
    if os.geteuid() != 0:
        return False
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        if " - cgroup2 " in line:
            probe = pathlib.Path(line.split()[4]) / f"kestrel-test-probe-{os.getpid()}"
            try:
                probe.mkdir()
                probe.rmdir()
                return True
            except OSError:
                return False
    return False


def test_a_process_that_drops_the_jobs_marker_is_stopped_with_the_job(daemon):
    """What a job left outside its process group was found by KESTREL_CHECKPOINT_DIR in its
    environment, which the job controls: `setsid env -i sleep` outlived its cancel for good, and a
    kill -9 of kestreld (a hostile test). Each job's processes are in a cgroup of their own, which no
    job can leave: its end stops them, and so does the next start after a crash."""
    if not cgroup2_writable():
        pytest.skip("no cgroup v2 kestreld may write here (it then finds a job's processes by their environment)")
    escape = "setsid env -u KESTREL_CHECKPOINT_DIR sleep 3018 & setsid env -i sleep 3019 & "
    d = daemon("--gpus", "0", "--grace-period", "2")
    try:
        busy = d.submit("--", "sh", "-c", escape + "echo up; while :; do sleep 1; done")
        d.wait_for_line(busy, "up")
        d.cli("cancel", busy)
        assert d.wait(busy, timeout=30)["state"] == "CANCELLED"
        assert no_process("^sleep 301[89]$", timeout=5)
        assert re.search(r"\d+ processes the job left running", wait_line(d, busy, "[kestrel] stopped",
                                                                                 timeout=10))
        left = d.submit("--no-retry", "--", "sh", "-c", escape + "echo up; while :; do sleep 1; done")
        d.wait_for_line(left, "up")
        d.proc.kill()
        d.proc.wait()
        d.restart()
        assert no_process("^sleep 301[89]$", timeout=10)
        assert re.search(r"job-%s: stopped \d+ processes left by the daemon before" % left,
                         (d.root / "kestreld.log").read_text())
    finally:
        subprocess.run(["pkill", "-KILL", "-f", "^sleep 301[89]$"], capture_output=True)


# The job looks for its own cgroup (/proc/self/cgroup) below the cgroup2 mount, then tries to move
# itself into its parent's and the mount's root cgroup, and to make a cgroup below its own.
LEAVE = r"""m=$(awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break }}' /proc/self/mountinfo | head -1)
cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
echo "in=$cg"
for t in "$m${cg%/*}" "$m"; do echo $$ 2>/dev/null > "$t/cgroup.procs" && echo "moved to $t"; done
mkdir "$m$cg/sub" 2>/dev/null && echo "made $m$cg/sub"
echo "still=$(sed -n 's/^0:://p' /proc/self/cgroup)"
"""


def test_a_job_cannot_leave_its_cgroup(daemon):
    """A job's cgroup and its parent are root's: the job can neither write its pid into another
    cgroup's cgroup.procs nor make a cgroup of its own below it (either would take its processes out
    of what its end kills)."""
    if not cgroup2_writable():
        pytest.skip("no cgroup v2 kestreld may write here (it then finds a job's processes by their environment)")
    d = daemon("--gpus", "0")
    jid = d.submit("--", "sh", "-c", LEAVE)
    assert d.wait(jid, timeout=30)["state"] == "SUCCEEDED"
    out = logs(d, jid)
    inside = wait_line(d, jid, "in=")
    assert inside.endswith(f"/job-{jid}"), out
    assert "moved to" not in out and "made " not in out, out
    assert wait_line(d, jid, "still=") == inside, out


@root_only
def test_a_fork_bomb_stops_at_its_accounts_process_limit(daemon, tmp_path):
    """Jobs had no process limit: one user's fork bomb could take every pid of the host, and
    kestreld's own forks with them (a hostile test). Each job account has --max-job-processes
    (RLIMIT_NPROC, set before root is dropped): the bomb stops there, and another user's job runs
    meanwhile."""
    d = daemon("--gpus", "0", "--max-job-processes", "40")
    mallory, alice = token(d, "mallory"), token(d, "alice")
    script = tmp_path / "bomb.py"
    script.write_text(FORK_BOMB)
    script.chmod(0o644)
    done = tmp_path / "done"
    bomb = json.loads(d.cli("-o", "json", "submit", "--", sys.executable, str(script), str(done),
                            env=as_user(d, mallory)).stdout)["id"]
    line = wait_line(d, bomb, "forked ", timeout=60)
    n = int(line.split()[0])
    assert "then Resource temporarily unavailable" in line and 5 <= n < 40, line   # 300 before
    other = json.loads(d.cli("-o", "json", "submit", "--", "sh", "-c", "echo alice ran",
                             env=as_user(d, alice)).stdout)["id"]
    assert d.wait(other, timeout=60)["state"] == "SUCCEEDED" and "alice ran" in logs(d, other)
    assert d.job(bomb)["state"] == "RUNNING"   # its processes still at the limit while alice's job ran
    # mallory's next jobs: one more process passes the kernel's check (it counts those before it), the
    # one after fails, saying why (it read "Resource temporarily unavailable")
    sleeper = json.loads(d.cli("-o", "json", "submit", "--", "sleep", "60", env=as_user(d, mallory)).stdout)["id"]
    d.wait_state(sleeper, "RUNNING")
    late = json.loads(d.cli("-o", "json", "submit", "--", "sh", "-c", "echo ran", env=as_user(d, mallory)).stdout)["id"]
    j = d.wait(late, timeout=60)
    assert j["state"] == "FAILED" and "at its process limit (--max-job-processes 40" in logs(d, late), (j, logs(d, late))
    d.cli("cancel", str(sleeper))
    done.write_text("")
    assert d.wait(bomb, timeout=60)["state"] == "SUCCEEDED"


FORK_BOMB = """import os, sys, time
pids = []
try:
    while len(pids) < 300:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
    print("forked", len(pids), "no limit", flush=True)
except OSError as e:
    print("forked", len(pids), "then", os.strerror(e.errno), flush=True)
for _ in range(600):   # the account held at its limit until the test says (sys.argv[1] appears)
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.1)
for pid in pids:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""
