"""Data-parallel Keras 3 (JAX backend, CPU, gloo collectives) in a gang of 2 ranks against the real
kestreld: it ends with the weights one process reaches on the same global batches, and so does the
same gang preempted mid-epoch by an urgent job and resumed."""
import json
import pathlib
import sys

import pytest

pytest.importorskip("jax")
SCRIPT = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "keras" / "data_parallel.py")
TOLERANCE = 1e-4   # float32 sums in another order (per-rank gradients averaged): about 1e-6 seen


def trainer(d, *flags, delay="0"):
    return d.submit(*flags, "--env", "KERAS_BACKEND=jax", "--", sys.executable, SCRIPT, "--epochs", "3",
                    "--step-delay", delay)


def weights(d, jid):
    out = d.cli("logs", jid).stdout
    found = [json.loads(l.split("weights ", 1)[1]) for l in out.splitlines() if "weights [" in l]
    assert len(found) == 1, out[-3000:]
    return found[0]


def test_two_ranks_end_like_one_process_also_when_preempted(daemon):
    d = daemon("--gpus", "2", "--grace-period", "60")
    one = trainer(d)
    assert d.wait(one, timeout=300)["state"] == "SUCCEEDED", d.cli("logs", one).stdout[-3000:]
    single = weights(d, one)

    gang = trainer(d, "--replicas", "2", "--gpus", "1")
    job = d.wait(gang, timeout=300)
    logs = d.cli("logs", gang).stdout
    assert job["state"] == "SUCCEEDED", logs[-3000:]
    assert "[rank 0] rank 0 of 2" in logs and "[rank 1] rank 1 of 2" in logs
    assert "[rank 1] done: optimizer steps 48" in logs and "[rank 0] done: optimizer steps 48" in logs
    assert "[rank 1] weights" not in logs   # rank 0 alone reports
    assert max(abs(a - b) for a, b in zip(single, weights(d, gang))) < TOLERANCE

    # preempted mid-epoch: every rank stops after the same step, rank 0 checkpoints, all resume from it
    # 0.15 s a step: the 28 steps after step 20 leave seconds for the log poll, the submit and the TERM
    slow = trainer(d, "--replicas", "2", "--gpus", "1", delay="0.15")
    d.wait_for_line(slow, "optimizer step 20", timeout=180)
    urgent = d.submit("--priority", "urgent", "--gpus", "2", "--", "sh", "-c", "sleep 0.5")
    assert d.wait(urgent, timeout=120)["state"] == "SUCCEEDED"
    job = d.wait(slow, timeout=300)
    logs = d.cli("logs", slow).stdout
    assert job["state"] == "SUCCEEDED" and job["restart_count"] == 1, logs[-3000:]
    reasons = [e["reason"] for e in job["events"]]
    assert "checkpoint acknowledged" in reasons and "resumed 2 ranks on node local (run 2)" in reasons
    stopped = [l for l in logs.splitlines() if "preempted: optimizer steps" in l]
    assert len(stopped) == 2 and len({l.rsplit(" ", 1)[1] for l in stopped}) == 1, stopped   # the same step
    assert max(abs(a - b) for a, b in zip(single, weights(d, slow))) < TOLERANCE
