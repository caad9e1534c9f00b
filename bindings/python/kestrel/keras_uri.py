"""kestrel:// paths in Keras 3: saving pushes a new version, loading pulls one.

    import kestrel.keras
    model.save("kestrel://team/mnist")                          # -> a new version team/mnist@N
    model = keras.saving.load_model("kestrel://team/mnist@production")   # or @3, or latest
    model.save_weights("kestrel://team/mnist-weights")
    model.load_weights("kestrel://team/mnist-weights@2")

Installed by `import kestrel.keras`. It wraps the four entry points of keras.src.saving.saving_api
(Model.save, save_weights and load_weights call them at run time) and re-binds the public aliases
(keras.saving.*, keras.models.*). Any other path goes to Keras untouched. Saving writes a temp file
and pushes it (the archive is streamed from disk, never held whole in memory); the version's
metadata records the framework, Keras version, backend and, inside a Kestrel job, the job id.
Supported: Keras 3.0 up to (not including) 4; elsewhere the hooks are not installed and a warning
says so.
"""
import functools
import os
import tempfile
import warnings
import zipfile

SCHEME = "kestrel://"
SUPPORTED = ((3, 0), (4, 0))
_installed = False


def _version(text):
    parts = []
    for p in text.split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _is_uri(filepath):
    return isinstance(filepath, (str, os.PathLike)) and str(filepath).startswith(SCHEME)


def _name(filepath, suffixes):
    name = str(filepath)[len(SCHEME):]
    for s in suffixes:
        if name.endswith(s):
            return name[:-len(s)]
    return name


def _client():
    from .client import Client
    return Client()


def _metadata(kind):
    import keras
    meta = {"framework": "keras", "keras_version": keras.__version__, "backend": keras.backend.backend(),
            "artifact": kind}
    for env, key in (("KESTREL_JOB_ID", "job_id"), ("KESTREL_GIT_COMMIT", "git_commit"), ("USER", "user")):
        if os.environ.get(env):
            meta[key] = os.environ[env]
    return meta


def _push(path, filepath, suffixes, kind):
    name = _name(filepath, suffixes)
    if "@" in name:
        raise ValueError(f"{filepath}: save to a model name; versions are numbered by the repository")
    with _client() as client:
        version = client.push(name, path, metadata=_metadata(kind))
    return version


def _pull(filepath, tmp, suffixes):
    ref = _name(filepath, suffixes)
    raw = os.path.join(tmp, "pulled")
    with _client() as client:
        client.pull(ref, raw)
    # a full model is a .keras zip archive; weights are an HDF5 file
    local = os.path.join(tmp, "model.keras" if zipfile.is_zipfile(raw) else "model.weights.h5")
    os.rename(raw, local)
    return local


def install():
    """Hook kestrel:// into Keras (idempotent)."""
    global _installed
    if _installed:
        return
    import keras
    from keras.src.saving import saving_api
    if not SUPPORTED[0] <= _version(keras.__version__) < SUPPORTED[1]:
        warnings.warn(f"kestrel: Keras {keras.__version__} is outside the tested range "
                      f"{SUPPORTED[0]}..{SUPPORTED[1]}: kestrel:// paths are not installed")
        return
    orig = {n: getattr(saving_api, n) for n in ("save_model", "load_model", "save_weights", "load_weights")}

    @functools.wraps(orig["save_model"])
    def save_model(model, filepath, *args, **kwargs):
        if not _is_uri(filepath):
            return orig["save_model"](model, filepath, *args, **kwargs)
        with tempfile.TemporaryDirectory(prefix="kestrel-save-") as tmp:
            path = os.path.join(tmp, "model.keras")
            orig["save_model"](model, path, *args, **kwargs)
            _push(path, filepath, (".keras",), "model")

    @functools.wraps(orig["load_model"])
    def load_model(filepath, *args, **kwargs):
        if not _is_uri(filepath):
            return orig["load_model"](filepath, *args, **kwargs)
        with tempfile.TemporaryDirectory(prefix="kestrel-load-") as tmp:
            return orig["load_model"](_pull(filepath, tmp, (".keras",)), *args, **kwargs)

    @functools.wraps(orig["save_weights"])
    def save_weights(model, filepath, *args, **kwargs):
        if not _is_uri(filepath):
            return orig["save_weights"](model, filepath, *args, **kwargs)
        with tempfile.TemporaryDirectory(prefix="kestrel-save-") as tmp:
            path = os.path.join(tmp, "model.weights.h5")
            orig["save_weights"](model, path, *args, **kwargs)
            _push(path, filepath, (".weights.h5",), "weights")

    @functools.wraps(orig["load_weights"])
    def load_weights(model, filepath, *args, **kwargs):
        if not _is_uri(filepath):
            return orig["load_weights"](model, filepath, *args, **kwargs)
        with tempfile.TemporaryDirectory(prefix="kestrel-load-") as tmp:
            return orig["load_weights"](model, _pull(filepath, tmp, (".weights.h5", ".keras")), *args, **kwargs)

    hooks = {"save_model": save_model, "load_model": load_model, "save_weights": save_weights,
             "load_weights": load_weights}
    for n, fn in hooks.items():
        setattr(saving_api, n, fn)
    for module in (keras.saving, keras.models):   # the public aliases hold the original objects
        for n, fn in hooks.items():
            if getattr(module, n, None) is orig[n]:
                setattr(module, n, fn)
    _installed = True
