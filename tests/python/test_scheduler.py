"""The scheduler against the real kestreld and real processes: preemption with checkpoint and
resume, ordering, requeue position, affinity, dependencies, quotas, opt-out, priority updates."""
import os
import pathlib
import subprocess
import textwrap

from conftest import KESTREL_CLI, KESTRELD

CLI_DIR = str(pathlib.Path(KESTREL_CLI).parent)

TRAINER = textwrap.dedent("""\
    #!/bin/sh
    # A trainer that checkpoints on SIGTERM, acknowledges it, and resumes from it when rerun.
    CK="$KESTREL_CHECKPOINT_DIR/step"
    step=0
    if [ -f "$CK" ]; then step=$(cat "$CK"); echo "resumed from step $step (restart $KESTREL_RESTART_COUNT)"; fi
    trap 'echo $step > "$CK"; kestrel ack "$KESTREL_JOB_ID"; echo "checkpointed at step $step"; exit 0' TERM
    echo "training from step $step"
    # a first run trains until it is preempted (however slow the machine, it cannot end first); a
    # resumed one goes on to STEPS, or a step past where it stopped
    end=1000000000
    if [ -f "$CK" ]; then end=${STEPS:-40}; [ $end -gt $step ] || end=$((step + 1)); fi
    while [ $step -lt $end ]; do
        step=$((step + 1)); [ $step -eq 1 ] && echo "first step done"; sleep 0.05
    done
    echo "done at step $step"
    """)


def trainer(tmp_path):
    path = tmp_path / "trainer.sh"
    path.write_text(TRAINER)
    path.chmod(0o755)
    return str(path)


def reasons(job):
    return [e["reason"] for e in job["events"]]


def test_urgent_preempts_normal_which_resumes_from_its_checkpoint(daemon, tmp_path):
    d = daemon("--gpus", "4", "--grace-period", "10")
    path_env = f"PATH={CLI_DIR}:{os.environ['PATH']}"
    normal = d.submit("--gpus", "4", "--name", "pretrain", "--env", path_env, "--env", "STEPS=60", "--", trainer(tmp_path))
    d.wait_for_line(normal, "first step done")   # its trap is set and a step is done: there is work to keep
    urgent = d.submit("--gpus", "4", "--priority", "urgent", "--name", "hotfix", "--", "sh", "-c", "echo urgent; sleep 0.3")
    assert d.wait(urgent)["state"] == "SUCCEEDED"
    final = d.wait(normal)
    assert final["state"] == "SUCCEEDED", final
    assert final["restart_count"] == 1
    states = [e["to_state"] for e in final["events"]]
    assert states == ["QUEUED", "RUNNING", "RUNNING", "PREEMPTED", "QUEUED", "RUNNING", "SUCCEEDED"], final["events"]
    assert f"preempted by job {urgent} (urgent)" in reasons(final)
    assert "checkpoint acknowledged" in reasons(final)
    assert any(r.startswith("resumed on node local") for r in reasons(final))
    assert int(final["checkpoint_time_ms"]) > 0
    logs = d.cli("logs", normal).stdout
    assert "checkpointed at step" in logs and "resumed from step" in logs
    resumed_at = int(logs.split("resumed from step ")[1].split()[0])
    assert resumed_at > 0            # no work lost beyond the checkpoint
    assert f"done at step {max(60, resumed_at + 1)}" in logs, logs[-500:]
    u = d.job(urgent)
    assert f"preempting job {normal} on node local" in reasons(u)
    preempted = next(e for e in final["events"] if e["to_state"] == "PREEMPTED")
    # the urgent job ran within the grace period, after the victim stopped
    assert int(u["start_time_ms"]) >= int(preempted["time_ms"])
    assert int(u["start_time_ms"]) - int(u["submit_time_ms"]) < 10000


def test_equal_priority_is_first_come_first_served(daemon):
    d = daemon("--gpus", "1")
    blocker = d.submit("--gpus", "1", "--not-preemptible", "--", "sleep", "30")
    d.wait_state(blocker, "RUNNING")
    a = d.submit("--gpus", "1", "--", "sleep", "0.2")
    b = d.submit("--gpus", "1", "--", "sleep", "0.2")
    assert d.explain(a)["position"] == 1 and d.explain(b)["position"] == 2
    d.cli("cancel", blocker)
    ja, jb = d.wait(a), d.wait(b)
    assert int(ja["end_time_ms"]) <= int(jb["start_time_ms"])


def test_preempted_job_keeps_its_place_before_later_jobs(daemon, tmp_path):
    d = daemon("--gpus", "4", "--grace-period", "10")
    path_env = f"PATH={CLI_DIR}:{os.environ['PATH']}"
    first = d.submit("--gpus", "4", "--env", path_env, "--env", "STEPS=30", "--", trainer(tmp_path))
    d.wait_for_line(first, "first step done")   # it runs until preempted: urgent is certain to preempt it
    later = d.submit("--gpus", "4", "--", "sleep", "0.1")
    urgent = d.submit("--gpus", "4", "--priority", "urgent", "--", "sleep", "0.3")
    d.wait(urgent)
    jf, jl = d.wait(first), d.wait(later)
    assert jf["state"] == jl["state"] == "SUCCEEDED"
    assert jf["restart_count"] == 1
    assert int(jf["end_time_ms"]) <= int(jl["start_time_ms"])   # resumed before the later job


def test_affinity_chain_and_groups(daemon):
    d = daemon("--node", "a:gpus=2,pool=cpu-ish", "--node", "b:gpus=2,pool=big")
    pre = d.submit("--gpus", "1", "--pool", "big", "--group", "bert", "--", "sleep", "0.2")
    fine = d.submit("--gpus", "1", "--after-ok", pre, "--affinity", f"job:{pre}", "--affinity-required", "--",
                    "sleep", "0.1")
    evalj = d.submit("--gpus", "1", "--after-ok", fine, "--affinity", "group:bert", "--affinity-required", "--", "true")
    for j in (pre, fine, evalj):
        assert d.wait(j)["state"] == "SUCCEEDED"
    assert d.job(pre)["node"] == d.job(fine)["node"] == d.job(evalj)["node"] == "b"
    # a required affinity to a job that never ran waits, and says why
    ghost = d.submit("--", "sleep", "30")
    d.cli("cancel", ghost)
    waiting = d.submit("--affinity", f"job:{ghost}", "--affinity-required", "--", "true")
    assert f"waiting for job {ghost} to be placed (affinity)" in d.explain(waiting)["reason"] or \
        d.job(waiting)["state"] in ("RUNNING", "SUCCEEDED")


def test_dependency_failure_fails_its_dependents(daemon, tmp_path):
    d = daemon()
    flag = tmp_path / "fail-now"   # bad fails once the test has seen its dependents wait (no race with a sleep)
    bad = d.submit("--", "sh", "-c", f"until [ -e '{flag}' ]; do sleep 0.05; done; exit 2")
    ok_dep = d.submit("--after-ok", bad, "--", "true")
    any_dep = d.submit("--after-any", bad, "--", "true")
    assert f"waiting for job {bad} (after_ok)" in d.explain(ok_dep)["reason"]
    flag.touch()
    assert d.wait(bad)["state"] == "FAILED"
    j = d.wait(ok_dep)
    assert j["state"] == "FAILED" and j["reason"] == f"dependency job {bad} ended FAILED (after_ok)"
    assert d.wait(any_dep)["state"] == "SUCCEEDED"


def test_quota_holds_jobs_and_explain_says_so(daemon):
    d = daemon("--gpus", "4", "--quota", "user:admin=2")
    a = d.submit("--gpus", "2", "--", "sleep", "30")
    d.wait_state(a, "RUNNING")
    b = d.submit("--gpus", "1", "--", "true")
    out = d.cli("explain", b).stdout
    assert "quota of user admin: 2 of 2 GPUs in use" in out
    assert "QUEUED at position 1" in out
    d.cli("cancel", a)
    assert d.wait(b)["state"] == "SUCCEEDED"
    # more than the quota at all: it could never start, so it is refused, saying why (a hostile test
    # saw such jobs wait for good)
    for body in ({"argv": ["true"], "gpus": 3}, {"argv": ["true"], "gpus": 2, "replicas": 2}):
        status, answer = d.api("POST", "/api/v1/jobs", body)
        assert status == 400 and "quota of user admin is 2" in answer["message"], answer


def test_non_preemptible_job_is_left_alone(daemon):
    d = daemon("--gpus", "2")
    keep = d.submit("--gpus", "2", "--not-preemptible", "--", "sleep", "30")
    d.wait_state(keep, "RUNNING")
    urgent = d.submit("--gpus", "2", "--priority", "urgent", "--", "true")
    ex = d.explain(urgent)
    assert ex["position"] == 1 and "nothing preemptible of a lower class" in ex["reason"], ex
    assert d.job(keep)["state"] == "RUNNING"
    queue = d.cli("queue").stdout
    assert f"{urgent}" in queue and "urgent" in queue
    d.cli("cancel", keep)
    assert d.wait(urgent)["state"] == "SUCCEEDED"
    assert "PREEMPTED" not in [e["to_state"] for e in d.job(keep)["events"]]


def test_priority_update_reorders_the_queue(daemon):
    d = daemon("--gpus", "1")
    blocker = d.submit("--gpus", "1", "--not-preemptible", "--", "sleep", "30")
    d.wait_state(blocker, "RUNNING")
    a = d.submit("--gpus", "1", "--", "true")
    b = d.submit("--gpus", "1", "--", "true")
    assert d.explain(b)["position"] == 2
    assert "now high" in d.cli("job", "update", b, "--priority", "high").stdout
    assert d.explain(b)["position"] == 1 and d.explain(a)["position"] == 2
    assert "priority changed to high" in reasons(d.job(b))
    d.cli("job", "update", b, "--priority", "high")   # so already: no change, no second event
    assert reasons(d.job(b)).count("priority changed to high") == 1
    p = d.cli("job", "update", blocker, "--priority", "urgent", check=False)
    assert p.returncode == 1 and "only a QUEUED job" in p.stderr
    d.cli("cancel", blocker)
    ja, jb = d.wait(a), d.wait(b)
    assert int(jb["start_time_ms"]) <= int(ja["start_time_ms"])


def test_explain_for_constraints_that_no_node_meets(daemon):
    d = daemon("--node", "n1:gpus=2,type=a100,memory=40G,cc=8.0,pool=enterprise")
    j = d.submit("--gpus", "2", "--gpu-type", "a100", "--min-gpu-memory", "80G", "--", "true")
    assert "needs 2 x a100 with >= 81920 MB" in d.explain(j)["reason"]
    k = d.submit("--gpus", "1", "--min-cc", "9.0", "--pool", "enterprise", "--", "true")
    assert "cc >= 9.0 in pool enterprise" in d.explain(k)["reason"]
    ok = d.submit("--gpus", "2", "--gpu-type", "a100", "--min-gpu-memory", "40G", "--min-cc", "8.0", "--", "true")
    assert d.wait(ok)["state"] == "SUCCEEDED"
    d.cli("cancel", j)
    d.cli("cancel", k)
    # a type is a name: on a Slurm pool it goes into --gres, where ':' and ',' would ask for more
    for odd in ("a100:2,gpu:a100", "a100%x"):
        r = d.cli("submit", "--gpus", "1", "--gpu-type", odd, "--", "true", check=False)
        assert r.returncode != 0 and "'gpu_type'" in r.stderr, r.stderr
        status, body = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "gpus": 1, "gpu_type": odd})
        assert status == 400 and "gpu_type" in body["message"], body


def test_max_priority_bounds_the_class_each_user_may_give(daemon):
    """--max-priority: a class above normal preempts, so it is a right. Everyone normal here, team ops
    high, carol urgent, admins any; a refused submission, rerun or change is 403 and changes nothing."""
    d = daemon("--gpus", "1", "--max-priority", "normal", "--max-priority", "team:ops=high",
               "--max-priority", "user:carol=urgent")

    def token(user, team=None):
        status, body = d.api("POST", "/api/v1/tokens", {"user": user, **({"team": team} if team else {})})
        assert status in (200, 201), body
        return body["token"]

    bob, olive, carol = token("bob"), token("olive", "ops"), token("carol", "ops")
    blocker = d.submit("--gpus", "1", "--not-preemptible", "--", "sleep", "30")
    d.wait_state(blocker, "RUNNING")
    for tok, cls, who in ((bob, "high", "everyone"), (bob, "urgent", "everyone"), (olive, "urgent", "team ops")):
        before = d.api("GET", "/api/v1/jobs", token=tok)[1]["jobs"]
        status, answer = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "gpus": 1, "priority": cls}, token=tok)
        assert status == 403 and f"priority {cls} is above what" in answer["message"] and who in answer["message"], answer
        assert d.api("GET", "/api/v1/jobs", token=tok)[1]["jobs"] == before   # nothing queued
    p = d.cli("submit", "--gpus", "1", "--priority", "high", "--", "true", env=d.env(KESTREL_TOKEN=bob), check=False)
    assert p.returncode != 0 and "priority high is above what bob may give a job (everyone" in p.stderr, p.stderr
    # a job no class may preempt holds off every class as urgent does: the same right (a hostile test)
    for tok in (bob, olive):
        before = d.api("GET", "/api/v1/jobs", token=tok)[1]["jobs"]
        status, answer = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "not_preemptible": True}, token=tok)
        assert status == 403 and "a job no class may preempt (--not-preemptible) is for those who may give urgent" \
            in answer["message"], answer
        assert d.api("GET", "/api/v1/jobs", token=tok)[1]["jobs"] == before
    kept = d.submit("--not-preemptible", "--", "true", env=d.env(KESTREL_TOKEN=carol))
    assert d.wait(kept)["state"] == "SUCCEEDED"
    # and so does a grace of a day: a normal user's job, trapping TERM, held an urgent job and an
    # admin's cancel off for it (a hostile test). Past --max-grace (600 s) it is the same right
    for tok in (bob, olive):
        before = d.api("GET", "/api/v1/jobs", token=tok)[1]["jobs"]
        status, answer = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "grace_period_s": 86400}, token=tok)
        assert status == 403 and "86400 s is past kestreld's --max-grace 600 s" in answer["message"], answer
        assert d.api("GET", "/api/v1/jobs", token=tok)[1]["jobs"] == before
    p = d.cli("submit", "--grace", "601", "--", "true", env=d.env(KESTREL_TOKEN=bob), check=False)
    assert p.returncode != 0 and "--max-grace 600 s" in p.stderr, p.stderr
    for tok in (bob, carol):
        assert d.wait(d.submit("--grace", "600" if tok == bob else "86400", "--", "true",
                               env=d.env(KESTREL_TOKEN=tok)))["state"] == "SUCCEEDED"
    # what each may use is taken
    ids = {who: d.submit("--gpus", "1", "--priority", cls, "--", "true", env=d.env(KESTREL_TOKEN=tok))
           for who, tok, cls in (("bob", bob, "normal"), ("olive", olive, "high"), ("carol", carol, "urgent"))}
    ids["admin"] = d.submit("--gpus", "1", "--priority", "urgent", "--", "true")
    assert {w: d.job(j)["spec"].get("priority") for w, j in ids.items()} == \
        {"bob": "NORMAL", "olive": "HIGH", "carol": "URGENT", "admin": "URGENT"}
    # a change past the caller's class is refused and leaves the job as it was; within it, it is made
    status, answer = d.api("POST", f"/api/v1/jobs/{ids['bob']}/priority", {"priority": "high"}, token=bob)
    assert status == 403 and "priority high is above what bob" in answer["message"], answer
    assert d.job(ids["bob"])["spec"].get("priority") == "NORMAL"
    assert "priority changed" not in reasons(d.job(ids["bob"]))
    assert d.api("POST", f"/api/v1/jobs/{ids['olive']}/priority", {"priority": "urgent"}, token=olive)[0] == 403
    assert d.api("POST", f"/api/v1/jobs/{ids['olive']}/priority", {"priority": "normal"}, token=olive)[0] == 200
    d.cli("cancel", blocker)
    for j in ids.values():
        assert d.wait(j)["state"] == "SUCCEEDED"
    # a rerun is a submission: carol limited to high after a restart cannot rerun her urgent job
    d.stop()
    d.flags = ("--gpus", "1", "--max-priority", "normal", "--max-priority", "user:carol=high")
    d.restart()
    before = d.api("GET", "/api/v1/jobs", token=carol)[1]["jobs"]
    status, answer = d.api("POST", f"/api/v1/jobs/{ids['carol']}/rerun", {}, token=carol)
    assert d.api("GET", "/api/v1/jobs", token=carol)[1]["jobs"] == before   # nothing queued
    assert status == 403 and "this job's priority, urgent, is above what carol may give a job (user carol" in \
        answer["message"] and "submit it again with --priority high" in answer["message"], answer
    # an admin's write-scoped token is a user's (everyone: normal); the admin-scoped one may use any
    status, body = d.api("POST", "/api/v1/tokens", {"user": "admin", "scope": "write"})
    assert status in (200, 201), body
    status, answer = d.api("POST", "/api/v1/jobs", {"argv": ["true"], "priority": "high"}, token=body["token"])
    assert status == 403 and "(everyone" in answer["message"], answer
    assert d.api("POST", "/api/v1/jobs", {"argv": ["true"], "priority": "urgent"})[0] == 201
    # the caps in force are in kestreld's log; names that could never match are refused at start
    assert "priority classes (--max-priority): up to normal for everyone, high for user carol (admins: any)" in \
        (d.root / "kestreld.log").read_text()
    for bad in ("user:bob =high", "team:o/ps=high", "user:" + "u" * 65 + "=high", "team:ops", "low"):
        p = subprocess.run([KESTRELD, "--check-config", "--max-priority", bad], capture_output=True, text=True)
        assert p.returncode == 2 and "--max-priority" in p.stderr, (bad, p.stderr)


def test_one_users_unplaceable_jobs_keep_no_one_elses_out_of_the_pass(daemon):
    """A pass considers a window of the queue. It was the queue's first 1,000 jobs only: bob's 1,000
    jobs for a pool that no node has kept alice's job and the admin's, same class, QUEUED on an idle
    node ("not yet considered by the scheduler"; a hostile test). Each user's first jobs are in it."""
    from concurrent.futures import ThreadPoolExecutor
    d = daemon("--gpus", "1")
    status, body = d.api("POST", "/api/v1/tokens", {"user": "bob"})
    assert status in (200, 201), body
    bob = body["token"]
    # and 16 more users of 64 such jobs each: 64 a user filled the window too (a review); round-robin
    others = [d.api("POST", "/api/v1/tokens", {"user": f"u{i}"})[1]["token"] for i in range(16)]

    def one(tok):
        return d.api("POST", "/api/v1/jobs", {"argv": ["true"], "pool": "nowhere"}, token=tok)[0]

    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(one, [bob] * 1010 + others * 64)) == {201}
    status, body = d.api("POST", "/api/v1/tokens", {"user": "alice"})
    alice = body["token"]
    status, job = d.api("POST", "/api/v1/jobs", {"argv": ["true"]}, token=alice)
    assert status == 201, job
    mine = d.submit("--gpus", "1", "--", "true")
    d.wait_state(job["id"], "SUCCEEDED", timeout=60)
    d.wait_state(mine, "SUCCEEDED", timeout=60)
    status, body = d.api("GET", "/api/v1/jobs?page_size=1", token=bob)
    assert status == 200 and body["jobs"][0]["state"] == "QUEUED"


def test_a_higher_class_takes_the_process_slot_of_a_lower_cpu_job(daemon):
    """--max-jobs 2 held by bob's two `sleep` jobs (no GPU, so no device preemption reached them): an
    urgent job and alice's normal one waited on idle GPUs for good (a hostile test). The urgent one
    now preempts the job of least work lost; the normal one still waits."""
    d = daemon("--gpus", "1", "--max-jobs", "2", "--grace-period", "2")
    bob = d.api("POST", "/api/v1/tokens", {"user": "bob"})[1]["token"]
    sleepers = [d.submit("--", "sleep", "600", env=d.env(KESTREL_TOKEN=bob)) for _ in range(2)]
    for s in sleepers:
        d.wait_state(s, "RUNNING")
    alice = d.api("POST", "/api/v1/tokens", {"user": "alice"})[1]["token"]
    normal = d.submit("--", "true", env=d.env(KESTREL_TOKEN=alice))
    urgent = d.submit("--gpus", "1", "--priority", "urgent", "--", "true")
    d.wait_state(urgent, "SUCCEEDED", timeout=60)
    victims = [s for s in sleepers if any("for its process slot (--max-jobs)" in r for r in reasons(d.job(s)))]
    assert len(victims) == 1, [reasons(d.job(s)) for s in sleepers]
    assert "preempting job" in " ".join(reasons(d.job(urgent)))
    for s in sleepers:   # the victim back in the queue (or running again on the slot the urgent job left)
        assert d.job(s)["state"] in ("QUEUED", "RUNNING"), d.job(s)
    for s in sleepers:
        d.cli("cancel", s, env=d.env(KESTREL_TOKEN=bob))
    d.wait_state(normal, "SUCCEEDED", timeout=60)


def test_a_checkpoint_is_acknowledged_for_a_running_job_once_in_a_row(daemon):
    """A loop of acknowledgements, on the user's own finished job, added an event row each, 3,000 a
    second, and filled the data disk (a hostile test). Only a running job acknowledges; acknowledgements
    in a row are one event."""
    d = daemon("--gpus", "0")
    run = d.submit("--", "sleep", "60")
    d.wait_state(run, "RUNNING")
    for _ in range(50):
        assert d.api("POST", f"/api/v1/jobs/{run}/checkpoint", {})[0] == 200
    assert [e["reason"] for e in d.job(run)["events"]].count("checkpoint acknowledged") == 1
    d.cli("cancel", str(run))
    d.wait(run)
    status, body = d.api("POST", f"/api/v1/jobs/{run}/checkpoint", {})
    assert status == 409 and "not running" in body["message"], (status, body)
    assert [e["reason"] for e in d.job(run)["events"]].count("checkpoint acknowledged") == 1
