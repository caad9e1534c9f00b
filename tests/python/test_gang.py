"""Gang jobs (kestrel submit --replicas N) against the real kestreld: every rank wired, placed all at
once, its lines prefixed, the gang failing, cancelled, preempted and requeued as one job, and kept
from those who may not see it."""
import json
import os
import pathlib
import time

from conftest import no_process, processes

WIRING = ("echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE kr=$KESTREL_RANK "
          "kw=$KESTREL_WORLD_SIZE coord=$KESTREL_COORDINATOR master=$MASTER_ADDR:$MASTER_PORT "
          "keras=$KERAS_DISTRIBUTION_JOB_ADDRESSES/$KERAS_DISTRIBUTION_NUM_PROCESSES/$KERAS_DISTRIBUTION_PROCESS_ID "
          "cvd=$CUDA_VISIBLE_DEVICES")


def test_every_rank_is_wired_and_its_lines_are_its_own(kestreld):
    k = kestreld
    jid = k.submit("--replicas", "2", "--gpus", "1", "--name", "gang", "--", "sh", "-c", WIRING)
    job = k.wait(jid)
    assert job["state"] == "SUCCEEDED" and job["spec"]["replicas"] == 2, job
    assert "started 2 ranks on node local" in [e["reason"] for e in job["events"]][1]
    lines = k.cli("logs", jid).stdout.splitlines()
    assert lines[0].startswith("[kestrel] starting 2 ranks (coordinator 127.0.0.1:")
    by_rank = {}
    for l in lines[1:]:
        assert l.startswith("[rank "), l
        by_rank[int(l[6])] = dict(kv.split("=", 1) for kv in l.split("] ", 1)[1].split())
    r0, r1 = by_rank[0], by_rank[1]
    assert (r0["rank"], r1["rank"], r0["world"], r0["kr"], r1["kw"]) == ("0", "1", "2", "0", "2")
    assert (r0["local"], r1["local"]) == ("0/2", "1/2")   # both on the one node
    assert r0["coord"] == r1["coord"] == r0["master"] == r1["master"] and r0["coord"].startswith("127.0.0.1:")
    assert r0["keras"] == f"{r0['coord']}/2/0" and r1["keras"] == f"{r0['coord']}/2/1"
    assert r0["cvd"] != r1["cvd"] and r0["cvd"].startswith("GPU-") and r1["cvd"].startswith("GPU-")
    # one rank's lines, without the prefix; the JSON is the API's LogLine, prefix and all
    only = k.cli("logs", "--rank", "1", jid).stdout.splitlines()
    assert len(only) == 1 and only[0].startswith("rank=1 ")
    js = [json.loads(l) for l in k.cli("-o", "json", "logs", "--rank", "0", jid).stdout.splitlines()]
    assert len(js) == 1 and js[0]["text"].startswith("[rank 0] rank=0")
    assert k.cli("logs", "--rank", "x", jid, check=False).returncode == 2
    row = [l for l in k.cli("jobs").stdout.splitlines() if l.startswith(jid)][0]
    assert " 2x1 " in row   # RANKS x GPUs


def test_a_gang_is_placed_all_at_once_or_not_at_all(kestreld):
    k = kestreld
    hold = k.submit("--gpus", "1", "--", "sleep", "30")
    k.wait_state(hold, "RUNNING")
    gang = k.submit("--replicas", "2", "--gpus", "1", "--", "true")   # 1 GPU free: neither rank starts
    time.sleep(1)
    assert k.job(gang)["state"] == "QUEUED"
    why = k.api("GET", f"/api/v1/jobs/{gang}/explain")[1]["reason"]
    assert "gang of 2 ranks: needs 1 x GPU each, on up to 2 nodes: 1 GPU free for it" in why, why
    k.cli("cancel", hold)
    assert k.wait(gang)["state"] == "SUCCEEDED"
    # more than the nodes can ever hold, or past the bound: refused at submit
    p = k.cli("submit", "--replicas", "3", "--gpus", "1", "--", "true", check=False)
    assert p.returncode == 1 and "3 ranks of 1 GPUs each, but the nodes hold at most 2" in p.stderr
    p = k.cli("submit", "--replicas", "65", "--", "true", check=False)
    assert p.returncode != 0 and "replicas must be 1..64" in p.stderr
    status, body = k.api("POST", "/api/v1/jobs", {"argv": ["true"], "replicas": 1000})
    assert status == 400 and "replicas" in body["message"]


def test_one_failing_rank_stops_the_others_and_a_retry_is_whole(kestreld):
    k = kestreld
    # rank 1 fails once rank 0 has set its trap (the ranks share a working folder), not after 0.5 s
    script = ('trap "echo stopped; exit 143" TERM; echo up $KESTREL_RESTART_COUNT; '
              'if [ $RANK = 1 ]; then until [ -e up0.$KESTREL_RESTART_COUNT ]; do sleep 0.05; done; exit 3; fi; '
              'touch up0.$KESTREL_RESTART_COUNT; sleep 60 & wait')
    jid = k.submit("--replicas", "2", "--retries", "1", "--", "sh", "-c", script)
    job = k.wait(jid, timeout=60)
    assert job["state"] == "FAILED" and job["exit_code"] == 3 and job["restart_count"] == 1, job
    logs = k.cli("logs", jid).stdout
    assert logs.count("[kestrel] rank 1 exited with code 3: stopping the other ranks") == 2
    assert logs.count("[rank 0] stopped") == 2   # rank 0 was stopped, both runs
    assert "[rank 0] up 1" in logs and "[rank 1] up 1" in logs   # the retry ran every rank again


def test_cancel_and_preemption_take_the_whole_gang(kestreld):
    k = kestreld
    script = 'trap "echo term $RANK; exit 0" TERM; echo up $RANK run $KESTREL_RESTART_COUNT; sleep 67 & wait'
    jid = k.submit("--replicas", "2", "--gpus", "1", "--", "sh", "-c", script)
    k.wait_state(jid, "RUNNING")
    k.wait_for_line(jid, " up ", timeout=30, count=2)   # each rank has set its trap
    urgent = k.submit("--priority", "urgent", "--gpus", "1", "--", "true")
    assert k.wait(urgent)["state"] == "SUCCEEDED"
    k.wait_state(jid, "RUNNING")
    k.wait_for_line(jid, " run 1", timeout=30, count=2)
    job = k.job(jid)
    reasons = [e["reason"] for e in job["events"]]
    assert "preempted by job %s (urgent)" % urgent in reasons and "resumed 2 ranks on node local (run 2)" in reasons
    logs = k.cli("logs", jid).stdout
    assert "[rank 0] term 0" in logs and "[rank 1] term 1" in logs   # both ranks got SIGTERM
    k.cli("cancel", jid)
    job = k.wait(jid)
    assert job["state"] == "CANCELLED"
    assert k.cli("logs", jid).stdout.count("term ") == 4   # and both again on cancel
    assert no_process("^sleep 67$")   # no rank left behind


def test_another_user_sees_no_gang(kestreld):
    k = kestreld
    jid = k.submit("--replicas", "2", "--", "sh", "-c", "echo secret-$RANK")
    k.wait(jid)
    status, body = k.api("POST", "/api/v1/tokens", {"user": "mallory"})
    assert status == 201
    other = k.env(KESTREL_TOKEN=body["token"])
    p = k.cli("logs", "--rank", "0", jid, check=False, env=other)
    assert p.returncode == 1 and "not found" in p.stderr and "secret" not in p.stdout
    assert k.cli("cancel", jid, check=False, env=other).returncode == 1
    assert k.api("GET", f"/api/v1/jobs/{jid}/logs", token=body["token"])[0] == 404


def test_a_gang_left_by_a_killed_daemon_is_stopped_whole_and_requeued(kestreld):
    k = kestreld
    script = 'echo up $RANK run $KESTREL_RESTART_COUNT; if [ $KESTREL_RESTART_COUNT = 0 ]; then sleep 71; fi'
    jid = k.submit("--replicas", "2", "--", "sh", "-c", script)
    k.wait_for_line(jid, " run 0", timeout=30, count=2)
    sleeps = processes("^sleep 71$", 2)   # a rank prints before its shell starts the sleep
    shells = [pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] for pid in sleeps]
    k.proc.kill()   # kill -9: each rank's shell dies with it (PR_SET_PDEATHSIG), its sleep lives on
    k.proc.wait()
    deadline = time.time() + 10   # until init has reaped the shells: the next daemon finds no leader
    while any(pathlib.Path(f"/proc/{pid}").exists() for pid in shells) and time.time() < deadline:
        time.sleep(0.1)
    # (ranks die with kestreld where it forks them as root, to change identity: as CI runs it)
    assert os.geteuid() != 0 or not any(pathlib.Path(f"/proc/{pid}").exists() for pid in shells), shells
    assert not no_process("^sleep 71$", timeout=0)   # what the ranks started outlived them
    k.restart()
    assert no_process("^sleep 71$")   # both stopped
    job = k.wait(jid)
    assert job["state"] == "SUCCEEDED" and job["restart_count"] == 1, job
    assert k.cli("logs", jid).stdout.count(" run 1") == 2
