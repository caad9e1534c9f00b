"""kestrel.keras against the real kestreld and real Keras (torch backend): a job preempted
mid-epoch resumes from the next batch and makes exactly the optimizer steps of an uninterrupted
run; its metrics (loss, learning rate, throughput, per-batch loss) reach the server."""
import math
import pathlib
import sys

import pytest

pytest.importorskip("kestrel")
SCRIPT = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "keras" / "resumable_train.py")
EPOCHS, SAMPLES, BATCH = 2, 12800, 32
EXPECTED = EPOCHS * math.ceil(SAMPLES / BATCH)


def trainer(d, gpus="4", delay="0"):
    return d.submit("--gpus", gpus, "--name", "resumable", "--env", "KERAS_BACKEND=torch", "--",
                    sys.executable, SCRIPT, "--epochs", str(EPOCHS), "--samples", str(SAMPLES),
                    "--batch-size", str(BATCH), "--step-delay", delay)


def test_uninterrupted_run_reports_metrics(daemon):
    d = daemon("--gpus", "4")
    jid = trainer(d)
    job = d.wait(jid, timeout=300)
    assert job["state"] == "SUCCEEDED", d.cli("logs", jid).stdout
    assert f"done: optimizer steps {EXPECTED}" in d.cli("logs", jid).stdout
    names = {m["name"] for m in d.api("GET", f"/api/v1/jobs/{jid}/metrics")[1]["metrics"]}
    assert {"loss", "accuracy", "learning_rate", "steps_per_second", "samples_per_second", "batch/loss",
            "batch/learning_rate", "batch/steps_per_second"} <= names
    out = d.cli("metrics", jid, "--name", "loss", "--flat").stdout
    assert "loss" in out and len(out.strip().splitlines()) == 1 + EPOCHS
    pivot = d.cli("metrics", jid).stdout.split("\n\n")[0].splitlines()   # per epoch: a row an epoch
    assert pivot[0] == "per epoch" and "loss" in pivot[1].split() and len(pivot) == 2 + EPOCHS


def test_preempted_mid_epoch_resumes_without_losing_a_step(daemon):
    d = daemon("--gpus", "4", "--grace-period", "30")
    jid = trainer(d, delay="0.01")   # the 740 steps after step 60 leave seconds for the preemption to land
    d.wait_for_line(jid, "progress: epoch 0 optimizer step 60")
    urgent = d.submit("--gpus", "4", "--priority", "urgent", "--", "sh", "-c", "sleep 0.5")
    assert d.wait(urgent, timeout=120)["state"] == "SUCCEEDED"
    job = d.wait(jid, timeout=300)
    logs = d.cli("logs", jid).stdout
    assert job["state"] == "SUCCEEDED", logs
    assert job["restart_count"] == 1
    assert [e["to_state"] for e in job["events"]].count("PREEMPTED") == 1
    assert "checkpoint acknowledged" in [e["reason"] for e in job["events"]]
    assert "run 2: starting" in logs
    assert f"done: optimizer steps {EXPECTED}" in logs, logs
    # the second run went on from the step it stopped at: no step number is printed twice
    steps = [int(l.split()[-1]) for l in logs.splitlines() if l.startswith("progress:")]
    assert steps == sorted(set(steps)), steps
