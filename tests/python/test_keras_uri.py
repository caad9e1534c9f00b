"""kestrel:// in Keras 3 against the real kestreld: model.save / keras.saving.save_model /
keras.models.save_model push versions; load_model pulls @alias, @N and latest; weights too."""
import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")
kestrel = pytest.importorskip("kestrel")
import kestrel.keras  # noqa: E402,F401  (installs the hooks)


def model_and_data():
    keras.utils.set_random_seed(3)
    x = np.random.rand(64, 8).astype("float32")
    y = np.random.rand(64, 1).astype("float32")
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    m.compile("adam", "mse")
    m.fit(x, y, epochs=1, verbose=0)
    return m, x, y


def test_save_and_load_through_the_repository(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_URL", kestreld.url)
    monkeypatch.setenv("KESTREL_TOKEN", kestreld.token)
    monkeypatch.setenv("KESTREL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KESTREL_JOB_ID", "42")
    m, x, y = model_and_data()
    before = m.predict(x, verbose=0)
    m.save("kestrel://team/reg")                                   # v1
    m.fit(x, y, epochs=2, verbose=0)
    after = m.predict(x, verbose=0)
    keras.saving.save_model(m, "kestrel://team/reg.keras")         # v2 (the suffix is optional)
    keras.models.save_model(m, "kestrel://team/reg")               # v3
    c = kestrel.Client(kestreld.url, kestreld.token)
    vs = c.versions("team/reg")
    assert [v.version for v in vs] == [1, 2, 3]
    meta = vs[0].metadata
    assert meta["framework"] == "keras" and meta["keras_version"] == keras.__version__
    assert meta["backend"] == keras.backend.backend() and meta["job_id"] == "42"
    c.set_alias("team/reg", "production", 1)
    np.testing.assert_allclose(keras.saving.load_model("kestrel://team/reg@production").predict(x, verbose=0), before,
                               rtol=1e-6)
    np.testing.assert_allclose(keras.models.load_model("kestrel://team/reg@2").predict(x, verbose=0), after, rtol=1e-6)
    np.testing.assert_allclose(keras.saving.load_model("kestrel://team/reg").predict(x, verbose=0), after, rtol=1e-6)
    # weights
    m.save_weights("kestrel://team/reg-weights")
    fresh, _, _ = model_and_data()
    fresh.load_weights("kestrel://team/reg-weights")
    np.testing.assert_allclose(fresh.predict(x, verbose=0), after, rtol=1e-6)
    # plain paths are untouched
    m.save(tmp_path / "local.keras")
    assert (tmp_path / "local.keras").exists()
    assert [v.version for v in c.versions("team/reg")] == [1, 2, 3]
    # a save says which version it made, takes alias= and metadata=, and keeps the .keras name
    assert m.save("kestrel://team/reg.keras", alias="staging", metadata={"dataset": "toy@1"}) == "team/reg@4"
    v4 = c.versions("team/reg")[-1]
    assert "staging" in v4.aliases and v4.metadata["dataset"] == "toy@1" and v4.metadata["filename"] == "reg.keras"
    assert m.save_weights("kestrel://team/reg-weights") == "team/reg-weights@2"
    # errors are clear
    with pytest.raises(ValueError, match="versions are numbered"):
        m.save("kestrel://team/reg@7")
    with pytest.raises(kestrel.NotFoundError):
        keras.saving.load_model("kestrel://team/nothing-here")
    assert not [p for p in os.listdir(tmp_path) if "kestrel-tmp" in p]


def test_autolog_pushes_plain_saves_but_not_backups(kestreld, tmp_path, monkeypatch):
    monkeypatch.setenv("KESTREL_URL", kestreld.url)
    monkeypatch.setenv("KESTREL_TOKEN", kestreld.token)
    m, x, y = model_and_data()
    kestrel.keras.autolog(name="team/auto")
    try:
        ckpt = keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt.keras"))
        m.fit(x, y, epochs=2, verbose=0, callbacks=[ckpt])           # backups: not versions
        assert (tmp_path / "ckpt.keras").exists()
        with pytest.raises(kestrel.NotFoundError):
            kestrel.Client(kestreld.url, kestreld.token).versions("team/auto")
        out = tmp_path / "out" / "model.keras"
        out.parent.mkdir()
        m.save(out)
        m.fit(x, y, epochs=1, verbose=0)
        m.save(out)                                                  # same path, a second version
        (tmp_path / "b").mkdir()
        m.save(tmp_path / "b" / "model.keras")                       # same basename, a third
    finally:
        kestrel.keras.autolog(None)
    assert out.exists()
    vs = kestrel.Client(kestreld.url, kestreld.token).versions("team/auto")
    assert [v.version for v in vs] == [1, 2, 3]
    assert vs[1].metadata["saved_as"] == str(out) and "loss" in vs[1].metadata["metrics"]
    m.save(tmp_path / "after.keras")                                 # autolog off: nothing pushed
    assert len(kestrel.Client(kestreld.url, kestreld.token).versions("team/auto")) == 3


JOB_SCRIPT = """
import numpy as np, keras
import kestrel.keras                      # inside a job: autolog is on by itself
x = np.random.rand(256, 8).astype("float32"); y = np.random.rand(256, 1).astype("float32")
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
m.compile("adam", "mse")
m.fit(x, y, epochs=2, batch_size=32, verbose=0)   # no callbacks passed: metrics still reported
m.save("model.keras")                             # a plain save: also a version of jobs/<id>
print("saved", flush=True)
"""


def test_inside_a_job_autolog_reports_metrics_and_pushes_saves(daemon, tmp_path):
    import sys
    d = daemon("--gpus", "1")
    script = tmp_path / "train.py"
    script.write_text(JOB_SCRIPT)
    jid = d.submit("--env", "KERAS_BACKEND=torch", "--", sys.executable, str(script))
    job = d.wait(jid, timeout=300)
    assert job["state"] == "SUCCEEDED", d.cli("logs", str(jid)).stdout
    names = {m["name"] for m in d.api("GET", f"/api/v1/jobs/{jid}/metrics")[1]["metrics"]}
    assert "loss" in names
    vs = kestrel.Client(d.url, d.token).versions(f"jobs/{jid}")
    assert len(vs) == 1 and vs[0].metadata["job_id"] == str(jid) and "loss" in vs[0].metadata["metrics"]
