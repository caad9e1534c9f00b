"""kestrel:// in Keras 3 against the real kestreld: model.save / keras.saving.save_model /
keras.models.save_model push versions; load_model pulls @alias, @N and latest; weights too."""
import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")
kestrel = pytest.importorskip("kestrel")
import kestrel.keras  # noqa: E402,F401  (installs the hooks)
from kestrel import keras_uri  # noqa: E402

# a Keras below SAFE_LOAD (the oldest supported, 3.2.1, in test_keras_range.py) refuses to load a
# kestrel:// model under safe_mode, and loads it with safe_mode=False
SAFE = keras_uri._version(keras.__version__, 3) >= keras_uri.SAFE_LOAD


def load(fn, uri, **kw):
    if not SAFE:
        with pytest.raises(RuntimeError, match="safe_mode bypasses"):
            fn(uri, **kw)
        kw["safe_mode"] = False
    return fn(uri, **kw)


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
    np.testing.assert_allclose(load(keras.saving.load_model, "kestrel://team/reg@production").predict(x, verbose=0),
                               before, rtol=1e-6)
    np.testing.assert_allclose(load(keras.models.load_model, "kestrel://team/reg@2").predict(x, verbose=0), after,
                               rtol=1e-6)
    np.testing.assert_allclose(load(keras.saving.load_model, "kestrel://team/reg").predict(x, verbose=0), after,
                               rtol=1e-6)
    # the suffix Keras wants may stand before the @ (it was taken for part of the model's name)
    np.testing.assert_allclose(load(keras.saving.load_model, "kestrel://team/reg.keras@production").predict(
        x, verbose=0), before, rtol=1e-6)
    # weights
    m.save_weights("kestrel://team/reg-weights")
    fresh, _, _ = model_and_data()
    fresh.load_weights("kestrel://team/reg-weights")
    np.testing.assert_allclose(fresh.predict(x, verbose=0), after, rtol=1e-6)
    fresh, _, _ = model_and_data()
    fresh.load_weights("kestrel://team/reg-weights.weights.h5@1")
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
    with pytest.raises(ValueError, match="versions are numbered"):
        m.save("kestrel://team/reg.keras@7")
    with pytest.raises(ValueError, match="at most 200 bytes"):   # not the temp file's "File name too long"
        m.save("kestrel://team/" + "a" * 300)
    with pytest.raises(kestrel.NotFoundError):
        keras.saving.load_model("kestrel://team/nothing-here", safe_mode=SAFE)
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


@pytest.mark.parametrize("version,refused", [("3.8.0", True), ("3.11.2", True), ("3.11.2rc1", True), ("3.11.3", False),
                                             ("3.15.1", False)])
def test_a_keras_with_a_safe_mode_bypass_loads_a_kestrel_model_only_when_told_to_trust_it(
        kestreld, tmp_path, monkeypatch, version, refused):
    """A model in the repository may be another user's: a Keras whose safe_mode has a published bypass
    (CVE-2025-1550 before 3.9, CVE-2025-8747/9906 before 3.11, CVE-2025-9905 before 3.11.3) refuses
    to load one before anything is pulled, unless safe_mode=False (by keyword or position) says the
    model is trusted. The version is faked here; test_keras_range.py runs this file on a real 3.2.1."""
    monkeypatch.setenv("KESTREL_URL", kestreld.url)
    monkeypatch.setenv("KESTREL_TOKEN", kestreld.token)
    m, x, _ = model_and_data()
    m.save("kestrel://team/gate")
    monkeypatch.setattr(keras, "__version__", version)
    if refused:
        with pytest.raises(RuntimeError, match=r"upgrade Keras to 3\.11\.3 or later, or pass safe_mode=False"):
            keras.saving.load_model("kestrel://team/nothing-here")      # refused before the pull: no NotFound
        with pytest.raises(RuntimeError, match="CVE-2025-1550"):
            keras.saving.load_model("kestrel://team/gate", safe_mode=True)
        with pytest.raises(RuntimeError):
            keras.saving.load_model("kestrel://team/gate", None, True, True)
        m.save(tmp_path / "local.keras")                                 # plain paths: Keras' own rules
        keras.saving.load_model(tmp_path / "local.keras")
    got = [keras.saving.load_model("kestrel://team/gate", safe_mode=False),
           keras.saving.load_model("kestrel://team/gate", None, True, False)]
    if not refused:
        got.append(keras.saving.load_model("kestrel://team/gate"))
    for g in got:
        np.testing.assert_allclose(g.predict(x, verbose=0), m.predict(x, verbose=0), rtol=1e-6)


def test_a_refused_metrics_report_is_said_once_and_training_goes_on(kestreld):
    """MetricsCallback counted a refused report (a name of 300 bytes, a job past its points, a job
    that ended) in .errors alone: the user never heard why their charts stayed empty (a hostile
    test). The first refusal is a warning with kestreld's reason; later ones are counted."""
    import warnings
    c = kestrel.Client(kestreld.url, kestreld.token)
    jid = kestreld.submit("--", "true")
    kestreld.wait(jid)   # ended: kestreld takes no more points from its owner
    cb = kestrel.keras.MetricsCallback(client=c, job_id=int(jid), flush_seconds=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cb.on_train_begin()
        cb._emit([("loss", 1, 0.5, 0)])
        cb._emit([("x" * 300, 2, 0.5, 0)])
        cb.on_train_end()
    said = [str(w.message) for w in seen if "MetricsCallback" in str(w.message)]
    assert len(said) == 1 and "points failed" in said[0], said
    assert cb.errors >= 1 and cb.last_error, (cb.errors, cb.last_error)
    c.close()
