"""kestreld on a real Slurm cluster (scripts/slurm-local.sh: 4 slurmd nodes on loopback with fake
typed GPUs, slurmdbd + MariaDB for QOS, a power-saved node5). Pools poola/poolb/poolc are handed to
Slurm; Slurm places, preempts and powers nodes up, kestreld records and follows.
Needs SLURM_CONF (ctest's slurm fixture starts the cluster and sets it)."""
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import Daemon

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESUMABLE = str(ROOT / "examples" / "keras" / "resumable_train.py")
SLURM_CONF = os.environ.get("SLURM_CONF", "")
pytestmark = pytest.mark.skipif(not SLURM_CONF, reason="no Slurm cluster (SLURM_CONF unset)")
FLAGS = ("--grace-period", "5", "--slurm-pool", "poola", "--slurm-pool", "poolb", "--slurm-pool", "poolc",
         "--slurm-grace", "10", "--slurm-poll-ms", "200")


def slurm(*args):
    return subprocess.run(list(args), capture_output=True, text=True, check=True, timeout=60).stdout


def slurm_job(sid):
    """scontrol's fields of one Slurm job."""
    out = slurm("scontrol", "show", "job", "-o", sid)
    return dict(re.findall(r"(\w+)=(\S*)", out))


def slurm_id(d, jid):
    for line in d.cli("logs", str(jid)).stdout.splitlines():
        m = re.search(r"submitted to Slurm as job (\d+)", line)
        if m:
            return m.group(1)
    raise AssertionError(f"job {jid} was not submitted to Slurm")


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    # kestreld's PIP_* configure its environment builds (an index's credentials): no job gets them,
    # nor anything else of kestreld's not named (a review: sbatch handed all of it to Slurm's jobs)
    daemon = Daemon(tmp_path_factory.mktemp("slurm"), *FLAGS,
                    env=dict(os.environ, PIP_INDEX_URL="https://team:S3CRET@pypi.example/simple",
                             AWS_SECRET_ACCESS_KEY="AKIAS3CRET", KERAS_BACKEND="torch"))
    yield daemon
    subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True)
    assert daemon.stop() == 0


@pytest.fixture(autouse=True)
def clean_cluster():
    yield
    subprocess.run(["scancel", "-u", "root", "--state", "PENDING"], capture_output=True)
    subprocess.run(["scancel", "-u", "root", "--state", "RUNNING"], capture_output=True)


def test_autoscaler_powers_up_a_node_for_a_waiting_job(d):
    # node5 is powered down (State=CLOUD): Slurm's ResumeProgram starts its slurmd for this job
    jid = d.submit("--pool", "poolc", "--gpus", "1", "--gpu-type", "t4", "--", "sh", "-c",
                   "echo on $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES")
    job = d.wait(jid, timeout=120)
    assert job["state"] == "SUCCEEDED", d.cli("logs", str(jid)).stdout
    assert job["node"] == "node5"
    assert "on node5 gpus=0" in d.cli("logs", str(jid)).stdout
    power = (pathlib.Path(SLURM_CONF).parents[1] / "log" / "power.log").read_text()
    assert "resume node5" in power


def test_a_job_per_pool_and_gpu_type(d):
    probe = "echo node=$SLURMD_NODENAME partition=$SLURM_JOB_PARTITION gpus=$CUDA_VISIBLE_DEVICES env=$MYVAR"
    a = d.submit("--pool", "poola", "--gpus", "1", "--gpu-type", "a100", "--env", "MYVAR=it's set", "--",
                 "sh", "-c", probe)
    b = d.submit("--pool", "poolb", "--gpus", "2", "--gpu-type", "t4", "--", "sh", "-c", probe)
    c = d.submit("--pool", "poolb", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    for jid, nodes, part in ((a, ("node1", "node2"), "poola"), (b, ("node3", "node4"), "poolb")):
        job = d.wait(jid, timeout=60)
        logs = d.cli("logs", str(jid)).stdout
        assert job["state"] == "SUCCEEDED", logs
        assert job["node"] in nodes
        assert f"node={job['node']} partition={part}" in logs
        assert "env=it's set" in logs or jid != a
    assert "gpus=0,1" in d.cli("logs", str(b)).stdout
    job = d.wait(c, timeout=60)
    assert job["state"] == "FAILED" and job["exit_code"] == 3, job
    assert "exit code 3" in job["reason"]
    lines = [json.loads(l) for l in d.cli("-o", "json", "logs", str(c)).stdout.splitlines()]
    streams = {(l.get("stream"), l.get("text")) for l in lines}
    assert ("STDOUT", "out") in streams and ("STDERR", "err") in streams, lines


def test_git_source_and_work_dir_on_the_shared_data_dir(d, tmp_path):
    repo = tmp_path / "src"
    script = ("set -e; git init -q -b main {r}; mkdir -p {r}/sub; echo v1 > {r}/VERSION;"
              " echo 'echo from-git $(cat ../VERSION) in $(basename $PWD)' > {r}/sub/run.sh;"
              " git -C {r} add -A; git -C {r} -c user.name=t -c user.email=t@t commit -q -m one").format(r=repo)
    subprocess.run(["sh", "-c", script], check=True)
    jid = d.submit("--pool", "poolb", "--git", f"file://{repo}", "--ref", "main", "--workdir", "sub", "--",
                   "sh", "run.sh")
    job = d.wait(jid, timeout=60)
    logs = d.cli("logs", str(jid)).stdout
    assert job["state"] == "SUCCEEDED", logs
    assert "from-git v1 in sub" in logs and len(job["git_commit"]) == 40, logs
    bad = d.submit("--pool", "poolb", "--git", f"file://{repo}", "--ref", "nope", "--", "true")
    job = d.wait(bad, timeout=60)
    assert job["state"] == "FAILED" and "git checkout of nope failed" in job["reason"], job


def test_uploaded_code_and_a_dataset_are_staged_before_sbatch(d, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "run.sh").write_text("echo code-$(cat VERSION) data-$(cat data/ds/x.txt) in $(basename $PWD)\n")
    (proj / "VERSION").write_text("v7\n")
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "x.txt").write_text("42\n")
    d.cli("push", "admin/ds", str(ds))
    jid = d.submit("--pool", "poolb", "--code", str(proj), "--data", "admin/ds", "--", "sh", "run.sh")
    job = d.wait(jid, timeout=60)
    logs = d.cli("logs", str(jid)).stdout
    assert job["state"] == "SUCCEEDED", logs
    assert "code-v7 data-42 in work" in logs and job["spec"]["code"] == "admin/code/proj@1", logs
    slurm_id(d, jid)   # it ran through Slurm, not locally


def test_a_slurm_job_runs_as_its_users_identity(d):
    if os.geteuid() != 0:
        pytest.skip("identities need kestreld as root")
    jid = d.submit("--pool", "poola", "--", "sh", "-c",
                   f"echo who=$(id -un); cat {d.data}/admin.token 2>&1 | head -c 300; echo; echo dir=$(stat -c %U .); "
                   "echo index=[$PIP_INDEX_URL] aws=[$AWS_SECRET_ACCESS_KEY] keras=[$KERAS_BACKEND]")
    job = d.wait(jid, timeout=60)
    logs = d.cli("logs", str(jid)).stdout
    assert job["state"] == "SUCCEEDED", logs
    assert "who=kestrel-admin" in logs and "Permission denied" in logs and "dir=kestrel-admin" in logs, logs
    assert "S3CRET" not in logs and "index=[] aws=[] keras=[torch]" in logs, logs
    assert slurm_job(slurm_id(d, jid))["UserId"].startswith("kestrel-admin(")


def test_pending_on_exhausted_gpus_then_cancel(d):
    # poolb has 2 nodes x 2 t4: two 2-GPU jobs fill it, the third waits for Slurm's resources
    hogs = [d.submit("--pool", "poolb", "--gpus", "2", "--gpu-type", "t4", "--", "sleep", "300") for _ in range(2)]
    for h in hogs:
        d.wait_state(h, "RUNNING", timeout=30)
    waiting = d.submit("--pool", "poolb", "--gpus", "2", "--gpu-type", "t4", "--", "true")
    deadline = time.time() + 30
    while "Resources" not in d.explain(waiting)["reason"] and time.time() < deadline:
        time.sleep(0.2)
    ex = d.explain(waiting)
    assert ex["state"] == "QUEUED" and "PENDING: Resources" in ex["reason"], ex
    queue = json.loads(d.cli("-o", "json", "queue").stdout)   # kestrel queue lists it with Slurm's reason
    entry = [e for e in queue["entries"] if e["job"]["id"] == str(waiting)]   # the API's Queue
    assert entry and "PENDING: Resources" in entry[0]["reason"], queue
    # a class change reaches Slurm as the QOS of the pending job
    d.cli("job", "update", str(waiting), "--priority", "high")
    assert slurm_job(slurm_id(d, waiting))["QOS"] == "high" and d.job(waiting)["spec"]["priority"] == "HIGH"
    # a request that can never fit is refused by Slurm at submission: FAILED with its message
    never = d.submit("--pool", "poolb", "--gpus", "3", "--", "true")
    job = d.wait(never, timeout=30)
    assert job["state"] == "FAILED" and "sbatch" in job["reason"], job
    # cancel a running job: CANCELLED, never a requeue
    d.cli("cancel", str(hogs[0]))
    job = d.wait(hogs[0], timeout=30)
    assert job["state"] == "CANCELLED" and job.get("restart_count", 0) == 0, job
    assert "PREEMPTED" not in [e["to_state"] for e in job["events"]]
    assert d.wait(waiting, timeout=60)["state"] == "SUCCEEDED"
    sid = slurm_id(d, hogs[0])
    assert slurm_job(sid)["JobState"] == "CANCELLED" and slurm_job(sid)["Restarts"] == "0"
    d.cli("cancel", str(hogs[1]))
    assert d.wait(hogs[1], timeout=30)["state"] == "CANCELLED"


def test_logs_follow_while_running(d):
    jid = d.submit("--pool", "poola", "--", "sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done")
    p = subprocess.run([os.environ["KESTREL_CLI"], "logs", "-f", str(jid)], capture_output=True, text=True,
                       env=d.env(), timeout=60)
    assert [l for l in p.stdout.splitlines() if l.startswith("line")] == [f"line {i}" for i in range(1, 6)]
    assert d.job(jid)["state"] == "SUCCEEDED"


def test_dependency_chain(d):
    a = d.submit("--pool", "poola", "--", "sh", "-c", "sleep 1; echo a")
    b = d.submit("--pool", "poolb", "--after-ok", str(a), "--", "sh", "-c", "echo b")
    c = d.submit("--pool", "poola", "--after-ok", str(b), "--", "sh", "-c", "echo c")
    bad = d.submit("--pool", "poola", "--", "false")
    after_bad = d.submit("--pool", "poola", "--after-ok", str(bad), "--", "echo", "never")
    anyway = d.submit("--pool", "poola", "--after-any", str(bad), "--", "echo", "anyway")
    jobs = {j: d.wait(j, timeout=90) for j in (a, b, c, after_bad, anyway)}
    assert [jobs[j]["state"] for j in (a, b, c)] == ["SUCCEEDED"] * 3
    assert int(jobs[b]["start_time_ms"]) >= int(jobs[a]["end_time_ms"]) - 1000
    assert int(jobs[c]["start_time_ms"]) >= int(jobs[b]["end_time_ms"]) - 1000
    # the chain reached Slurm as Slurm dependencies (Slurm clears them once satisfied: read the sbatch line)
    assert f"dependency=afterok:{slurm_id(d, a)})" in d.cli("logs", str(b)).stdout
    assert f"dependency=afterok:{slurm_id(d, b)})" in d.cli("logs", str(c)).stdout
    assert jobs[after_bad]["state"] == "FAILED" and "dependency" in jobs[after_bad]["reason"], jobs[after_bad]
    assert jobs[anyway]["state"] == "SUCCEEDED"
    # handed over oldest first: Slurm orders a class by submission
    sids = [int(slurm_id(d, j)) for j in (a, b, c, bad, anyway)]
    assert sids == sorted(sids), sids


def test_affinity_runs_on_the_node_of_the_earlier_job(d):
    first = d.submit("--pool", "poolb", "--gpus", "1", "--", "true")
    first_node = d.wait(first, timeout=60)["node"]
    # fill first_node's other pool node so that only an explicit --nodelist keeps the next job there
    second = d.submit("--pool", "poolb", "--gpus", "1", "--affinity", f"job:{first}", "--affinity-required",
                      "--", "sh", "-c", "echo on $SLURMD_NODENAME")
    job = d.wait(second, timeout=60)
    assert job["state"] == "SUCCEEDED" and job["node"] == first_node
    assert slurm_job(slurm_id(d, second))["ReqNodeList"] == first_node


def test_urgent_preempts_normal_which_checkpoints_and_resumes(d):
    epochs, samples, batch = 2, 3200, 32
    steps = epochs * math.ceil(samples / batch)
    victim = d.submit("--pool", "poola", "--gpus", "2", "--gpu-type", "a100", "--name", "victim",
                      "--env", "KERAS_BACKEND=torch", "--", sys.executable, RESUMABLE, "--epochs", str(epochs),
                      "--samples", str(samples), "--batch-size", str(batch), "--step-delay", "0.05")
    # the other a100 node is held by a high-priority job: QOS high is not preemptible by urgent
    holder = d.submit("--pool", "poola", "--gpus", "2", "--priority", "high", "--", "sleep", "600")
    d.wait_state(holder, "RUNNING", timeout=60)
    deadline = time.time() + 120
    while "optimizer step 20" not in d.cli("logs", str(victim)).stdout:
        assert time.time() < deadline, d.cli("logs", str(victim)).stdout
        time.sleep(0.2)
    urgent = d.submit("--pool", "poola", "--gpus", "2", "--priority", "urgent", "--", "sh", "-c",
                      "echo urgent on $SLURMD_NODENAME")
    assert d.wait(urgent, timeout=90)["state"] == "SUCCEEDED"
    job = d.wait(victim, timeout=180)
    logs = d.cli("logs", str(victim)).stdout
    assert job["state"] == "SUCCEEDED", logs
    assert job["restart_count"] == 1
    reasons = [e["reason"] for e in job["events"]]
    assert any(r.startswith(f"preempted by job {urgent} through Slurm") for r in reasons), reasons
    assert "checkpoint acknowledged" in reasons
    assert "run 2: starting" in logs
    assert f"done: optimizer steps {steps}" in logs, logs
    urgent_events = [e["reason"] for e in d.job(urgent)["events"]]
    assert any(r.startswith(f"preempting job {victim}") for r in urgent_events), urgent_events
    sj = slurm_job(slurm_id(d, victim))
    assert sj["JobState"] == "COMPLETED" and sj["Restarts"] == "1"
    d.cli("cancel", str(holder))


def test_node_failure_requeues_the_job_with_the_reason(d):
    jid = d.submit("--pool", "poolb", "--", "sh", "-c",
                   'echo run $KESTREL_RESTART_COUNT; [ "$KESTREL_RESTART_COUNT" = 0 ] && exec sleep 300; exit 0')
    node = d.wait_state(jid, "RUNNING", timeout=30)["node"]
    # RUNNING is Slurm's allocation: the node goes down once the job has printed, not before its script
    # ran (a node downed 17 ms after the allocation requeued a run that had printed nothing)
    d.wait_for_line(jid, "run 0", timeout=60)
    slurm("scontrol", "update", f"nodename={node}", "state=down", "reason=kestrel-test")
    try:
        job = d.wait(jid, timeout=120)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
    logs = d.cli("logs", str(jid)).stdout
    assert job["state"] == "SUCCEEDED" and job["restart_count"] == 1, logs
    reasons = [e["reason"] for e in job["events"]]
    assert any(r.startswith(f"requeued by Slurm after node {node} failed") for r in reasons), reasons
    assert "run 0" in logs and "run 1" in logs


def test_kestreld_restart_follows_jobs_already_in_slurm(d):
    # a restart reads on from the file offset kept with the lines. It used the stored lines' length,
    # which a masked secret makes shorter than the file's: the restart read the first line again from
    # inside the secret, and logged the secret's tail unmasked, then "before" a second time
    secret = "s3cr3t-" + "x" * 40 + "-tail0123456789"
    jid = d.submit("--pool", "poolb", "--secret-env", f"TOK={secret}", "--", "sh", "-c",
                   'echo "tok=$TOK"; echo before; sleep 4; echo after')
    d.wait_for_line(jid, "before", timeout=60)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.restart()
    job = d.wait(jid, timeout=60)
    logs = d.cli("logs", str(jid)).stdout
    assert job["state"] == "SUCCEEDED", logs
    assert logs.count("before") == 1 and logs.count("after") == 1, logs
    assert "tok=***" in logs and "tail0123456789" not in logs, logs


def test_autoscaler_powers_the_idle_node_down(d):
    # SuspendTime=20: node5 has been idle since the first test; SuspendProgram stops its slurmd
    power = pathlib.Path(SLURM_CONF).parents[1] / "log" / "power.log"
    deadline = time.time() + 90
    while "suspend node5" not in power.read_text():
        assert time.time() < deadline, power.read_text()
        time.sleep(1)


def test_a_gang_runs_as_one_slurm_job_of_a_task_a_rank(d):
    """--replicas 3 --gpus 1 on poola (2 nodes x 2 a100): one sbatch of 3 tasks with a GPU each, srun
    starting the ranks, every rank wired from Slurm's variables, its lines "[rank R] "; a failing rank
    fails the gang."""
    script = ("echo rank=$RANK of=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE kr=$KESTREL_RANK "
              "coord=$KESTREL_COORDINATOR master=$MASTER_ADDR:$MASTER_PORT "
              "keras=$KERAS_DISTRIBUTION_NUM_PROCESSES/$KERAS_DISTRIBUTION_PROCESS_ID node=$SLURMD_NODENAME "
              "gpu=$CUDA_VISIBLE_DEVICES")
    jid = d.submit("--pool", "poola", "--replicas", "3", "--gpus", "1", "--", "sh", "-c", script)
    job = d.wait(jid, timeout=120)
    logs = d.cli("logs", str(jid)).stdout
    assert job["state"] == "SUCCEEDED", logs
    ranks = {}
    for line in logs.splitlines():
        if line.startswith("[rank ") and "rank=" in line:
            ranks[int(line[6])] = dict(kv.split("=", 1) for kv in line.split("] ", 1)[1].split())
    assert sorted(ranks) == [0, 1, 2], logs
    assert {r["of"] for r in ranks.values()} == {"3"} and [ranks[i]["kr"] for i in range(3)] == ["0", "1", "2"]
    assert [ranks[i]["keras"] for i in range(3)] == ["3/0", "3/1", "3/2"]
    assert len({r["coord"] for r in ranks.values()}) == 1 and ranks[0]["coord"] == ranks[0]["master"]
    nodes = [ranks[i]["node"] for i in range(3)]
    assert sorted(nodes) == ["node1", "node1", "node2"], nodes   # packed: two on one node, one on the other
    local = {ranks[i]["node"]: [] for i in range(3)}
    for i in range(3):
        local[ranks[i]["node"]].append(ranks[i]["local"])
    assert sorted(local["node1"]) == ["0/2", "1/2"] and local["node2"] == ["0/1"], local
    assert all(r["gpu"] for r in ranks.values())   # each rank its own GPU (Slurm's CUDA_VISIBLE_DEVICES)
    only = d.cli("logs", "--rank", "2", str(jid)).stdout.splitlines()
    assert len(only) == 1 and only[0].startswith("rank=2 ")
    # one rank fails: srun stops the others, the gang fails
    bad = d.submit("--pool", "poola", "--replicas", "2", "--", "sh", "-c",
                   "if [ $RANK = 1 ]; then exit 3; fi; sleep 60")
    job = d.wait(bad, timeout=120)
    assert job["state"] == "FAILED", d.cli("logs", str(bad)).stdout


def test_a_preempted_gang_is_requeued_whole_through_slurm(d):
    # each rank leaves a file when it gets the SIGTERM. A rank waits in a loop of short sleeps, not in
    # "sleep 300 & wait": the test cluster's proctrack/linuxproc signals a step's processes one by one,
    # children first, so a rank's sleep could die before its shell got the TERM, and "wait" (no
    # operand) then returned 0 and the shell ended without its trap (two loaded CI runs: rank 0 left
    # no file and no "term" line, and srun ended 0). A shell in the loop lives on to run its trap.
    script = ('trap "touch term.$RANK; echo term $RANK; exit 0" TERM; echo up $RANK run $KESTREL_RESTART_COUNT; '
              'if [ $KESTREL_RESTART_COUNT = 0 ]; then while :; do sleep 0.2; done; fi')
    gang = d.submit("--pool", "poola", "--replicas", "2", "--gpus", "2", "--gpu-type", "a100", "--", "sh", "-c", script)
    d.wait_for_line(gang, "run 0", timeout=90, count=2)
    urgent = d.submit("--pool", "poola", "--gpus", "2", "--priority", "urgent", "--", "sh", "-c", "echo urgent")
    assert d.wait(urgent, timeout=90)["state"] == "SUCCEEDED"
    job = d.wait(gang, timeout=180)
    logs = d.cli("logs", str(gang)).stdout
    assert job["state"] == "SUCCEEDED" and job["restart_count"] == 1, logs
    work = d.data / "jobs" / str(gang) / "work"
    assert (work / "term.0").exists() and (work / "term.1").exists(), logs   # every rank got the SIGTERM
    assert "[rank 0] up 0 run 1" in logs and "[rank 1] up 1 run 1" in logs   # and every rank ran again
    reasons = [e["reason"] for e in job["events"]]
    assert any(r.startswith(f"preempted by job {urgent} through Slurm") for r in reasons), reasons


def test_a_job_name_forges_no_state(d):
    """kestreld reads Slurm's view as JSON: in scontrol's words a job's name could say its own state,
    or (with a newline) another job's, which a hostile test used to end another user's running job in
    Kestrel and to have kestreld cancel one. Here the job names itself finished and successful, then
    runs on and fails: Kestrel records what the job did."""
    jid = d.submit("--pool", "poola", "--", "sh", "-c",
                   'scontrol update JobId=$SLURM_JOB_ID JobName="x JobState=COMPLETED ExitCode=0:0 '
                   'Reason=DependencyNeverSatisfied" && echo renamed; sleep 3; echo still-here; exit 7')
    job = d.wait(jid, timeout=90)
    logs = d.cli("logs", str(jid)).stdout
    assert "renamed" in logs and "still-here" in logs, logs
    assert job["state"] == "FAILED" and "exit code 7" in job["reason"], job
    assert "instead, where a job's name can forge" not in (d.root / "kestreld.log").read_text()   # JSON read


def test_a_sparse_output_file_holds_up_no_other_job(d):
    """A job owns its output file: made an 8 GiB hole, it was read as zeros for minutes on the one
    follower thread, and no other job was submitted or followed meanwhile (a hostile test). Holes are
    skipped, and a poll reads a bounded part of any file."""
    big = d.submit("--pool", "poolb", "--", "sh", "-c",
                   'truncate -s 8G "$KESTREL_CHECKPOINT_DIR/../slurm.out"; sleep 8')
    d.wait_state(big, "RUNNING", timeout=60)
    time.sleep(1)
    quick = d.submit("--pool", "poola", "--", "sh", "-c", "echo quick")
    assert d.wait(quick, timeout=60)["state"] == "SUCCEEDED"
    assert d.wait(big, timeout=60)["state"] == "SUCCEEDED"
    assert (d.data / "catalog.db").stat().st_size < 64 << 20


def test_a_flood_of_short_lines_holds_up_no_other_job(d):
    """Each line is a catalog row: `yes ""` (a line a byte) held the follower, and every other job
    with it, for minutes (a hostile test). A poll takes a bounded number of lines."""
    flood = d.submit("--pool", "poolb", "--", "sh", "-c", 'yes "" | head -c 200000000; sleep 15; echo end')
    d.wait_state(flood, "RUNNING", timeout=60)
    time.sleep(2)
    quick = d.submit("--pool", "poola", "--", "sh", "-c", "echo quick")
    assert d.wait(quick, timeout=60)["state"] == "SUCCEEDED"
    d.cli("cancel", str(flood), check=False)
