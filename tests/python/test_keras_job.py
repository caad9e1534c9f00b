"""A real Keras 3 training job (torch backend, CPU) run by kestreld end to end."""
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_keras_job_end_to_end(kestreld):
    script = ROOT / "examples" / "keras" / "train_mnist_like.py"
    job = json.loads(kestreld.cli("-o", "json", "submit", "--name", "mnist-like", "--env", "KERAS_BACKEND=torch",
                                  "--", sys.executable, str(script), "--epochs", "3").stdout)
    jid = job["id"]
    logs = kestreld.cli("logs", "-f", jid, timeout=600).stdout
    for epoch in (1, 2, 3):
        assert f"Epoch {epoch}/3" in logs
    assert "backend=torch" in logs and f"job={jid}" in logs
    final = json.loads(kestreld.cli("-o", "json", "wait", jid).stdout)
    assert final["state"] == "SUCCEEDED", logs
    # the job reported its metrics with its own job-scoped token
    status, body = kestreld.api("GET", f"/api/v1/jobs/{jid}/metrics?name=val_accuracy")
    assert status == 200
    steps = [int(m["step"]) for m in body["metrics"]]
    assert steps == [1, 2, 3]
    assert body["metrics"][-1]["value"] > 0.5
    ckpt = kestreld.data / "jobs" / jid / "checkpoint" / "model.keras"
    assert ckpt.exists() and ckpt.stat().st_size > 0
