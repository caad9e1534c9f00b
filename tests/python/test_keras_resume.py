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


def test_a_checkpoint_of_another_fit_is_refused_not_taken_up(tmp_path, monkeypatch):
    """Outside a job fit() keeps its checkpoint in ./kestrel-checkpoint: a second experiment there (other
    data) is refused rather than handed the first one's weights with no training (a hostile test); the
    same fit again says it resumes; a damaged checkpoint is a clear error, not numpy's."""
    import warnings
    import numpy as np
    import keras
    import kestrel.keras
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KESTREL_CHECKPOINT_DIR", raising=False)

    def run(seed):
        keras.utils.set_random_seed(seed)
        x = np.random.rand(64, 3).astype("float32")
        y = (x @ np.array([[1.0], [2.0], [3.0]]) * seed).astype("float32")
        m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        m.compile(keras.optimizers.SGD(0.1), "mse")
        return kestrel.keras.fit(m, x, y, epochs=2, batch_size=16, verbose=0), m

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert run(1)[0] == "done"
    assert not [w for w in seen if "resuming" in str(w.message)]
    with pytest.raises(ValueError, match="checkpoint of another fit"):
        run(5)
    with pytest.warns(UserWarning, match="resuming from the checkpoint"):
        assert run(1)[0] == "done"
    (tmp_path / "kestrel-checkpoint" / "state.npz").write_bytes(b"\0" * 100)
    with pytest.raises(ValueError, match="no readable kestrel.keras checkpoint"):
        run(1)
    (tmp_path / "kestrel-checkpoint" / "position.json").write_text("{")
    with pytest.raises(ValueError, match="no readable kestrel.keras checkpoint"):
        run(1)
    # inside a job a requeued run may load its data in another order: the values are not compared
    monkeypatch.setenv("KESTREL_CHECKPOINT_DIR", str(tmp_path / "job-checkpoint"))
    assert run(1)[0] == "done"
    assert run(5)[0] == "done"   # resumed (here: already done), not refused
