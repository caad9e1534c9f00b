"""The standard environments in examples/environments/ build here and train a Keras model with
kestrel's autolog in each (the torch and JAX ones in every run; TensorFlow's, a 600 MB download,
with KESTREL_TEST_TF=1)."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINDINGS = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or str(ROOT / "build" / "python")
if not (pathlib.Path(BINDINGS) / "kestrel").exists():
    pytest.skip("the kestrel bindings are built in the plain build only", allow_module_level=True)

TRAIN = """
import numpy as np, keras, kestrel.keras   # inside a job: autolog is on by itself
x = np.random.rand(128, 4).astype("float32"); y = x.sum(axis=1, keepdims=True)
m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
m.compile("sgd", "mse")
m.fit(x, y, epochs=2, batch_size=32, verbose=0)
m.save("model.keras")
print("backend", keras.backend.backend(), "keras", keras.__version__)
"""


def example(name, tmp_path):
    text = (ROOT / "examples" / "environments" / f"{name}.txt").read_text()
    if name == "keras-torch-cpu" and "/opt/wheels" in os.environ.get("PIP_FIND_LINKS", ""):
        # this machine has the CPU wheel locally (PIP_FIND_LINKS) and no route to pytorch.org
        text = "\n".join(l for l in text.splitlines() if not l.startswith("--extra-index-url"))
    f = tmp_path / f"{name}.txt"
    f.write_text(text + "\n")
    return f


@pytest.mark.parametrize("name,backend", [
    ("keras-torch-cpu", "torch"), ("keras-jax", "jax"),
    pytest.param("keras-tensorflow", "tensorflow", marks=pytest.mark.skipif(
        os.environ.get("KESTREL_TEST_TF") != "1", reason="KESTREL_TEST_TF=1 builds TensorFlow's (600 MB)")),
])
def test_a_standard_environment_builds_and_trains_with_autolog(daemon, tmp_path, name, backend):
    d = daemon("--gpus", "0", "--environment", f"{name}={example(name, tmp_path)}", "--env-python-path", BINDINGS)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    jid = d.submit("--environment", name, "--env", f"KERAS_BACKEND={backend}", "--", "python", str(script))
    job = d.wait(jid, timeout=900)
    log = d.cli("logs", str(jid)).stdout
    assert job["state"] == "SUCCEEDED", log[-3000:]
    assert f"backend {backend}" in log, log[-2000:]
    names = {m["name"] for m in d.api("GET", f"/api/v1/jobs/{jid}/metrics")[1]["metrics"]}
    assert "loss" in names
    assert d.api("GET", f"/api/v1/models/jobs/{jid}/versions")[1]["versions"], "the save was not pushed"
    assert "keras==" in job["packages"] and job["environment"].startswith("sha256:")
