"""kestrel:// paths in Keras 3: saving pushes a new version, loading pulls one.

    import kestrel.keras
    ref = model.save("kestrel://team/mnist.keras")              # -> "team/mnist@N", a new version
    model.save("kestrel://team/mnist", alias="production", metadata={"dataset": "mnist@3"})
    model = keras.saving.load_model("kestrel://team/mnist@production")   # or @3, or latest
    model.save_weights("kestrel://team/mnist-weights")
    model.load_weights("kestrel://team/mnist-weights@2")

Installed by `import kestrel.keras`. It wraps the four entry points of keras.src.saving.saving_api
(Model.save, save_weights and load_weights call them at run time) and re-binds the public aliases
(keras.saving.*, keras.models.*). Any other path goes to Keras untouched. Saving writes a temp file
and pushes it (the archive is streamed from disk, never held whole in memory); the version's
metadata records the framework, Keras version, backend and, inside a Kestrel job, the job id.
autolog(name) (on by default inside a Kestrel job) also pushes every plain model.save("x.keras")
after the local file is written; saves made by ModelCheckpoint / BackupAndRestore are not pushed.
Supported: Keras 3.2 up to (not including) 4; elsewhere the hooks are not installed and a warning
says so. A file suffix Keras wants may be written before @REF ("kestrel://team/m.keras@production").
Loading a kestrel:// model (it may be another user's) needs a Keras whose safe_mode has no published
bypass, 3.11.3 or later (SAFE_LOAD); older Keras loads one only with safe_mode=False, the caller's
word that the model is trusted.
"""
import functools
import os
import sys
import tempfile
import warnings
import zipfile
from types import FrameType
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from .client import Client

SCHEME = "kestrel://"
SUPPORTED = ((3, 2), (4, 0))   # 3.2: save_weights/load_weights joined keras.src.saving.saving_api
# The first Keras whose safe_mode holds against every published bypass: a crafted .keras ran code
# under safe_mode=True before 3.9 (CVE-2025-1550) and before 3.11 (CVE-2025-8747, CVE-2025-9906), and
# a legacy HDF5 model ignored safe_mode before 3.11.3 (CVE-2025-9905). A kestrel:// model may be
# another user's, so older Keras loads one only when the caller says safe_mode=False (trusting it).
SAFE_LOAD = (3, 11, 3)
HOOKED = ("save_model", "load_model", "save_weights", "load_weights")
_installed = False
_autolog: Dict[str, Optional[str]] = {"name": None}   # the model name plain saves are also pushed to (autolog)


def _version(text: str, n: int = 2) -> Tuple[int, ...]:
    parts: List[int] = []
    for p in text.split(".")[:n]:   # "11rc1" is 11 (a review: it read 111, past the safe-load gate)
        digits = p[:len(p) - len(p.lstrip("0123456789"))]
        parts.append(int(digits or 0))
    return tuple(parts)


def _is_uri(filepath: Any) -> bool:
    return isinstance(filepath, (str, os.PathLike)) and str(filepath).startswith(SCHEME)


def _name(filepath: Any, suffixes: Sequence[str]) -> str:
    """The model name (or NAME@REF) a kestrel:// path names: a file suffix Keras wants is dropped from
    the name, before any @REF too ("team/m.keras@production" is team/m@production)."""
    name, at, ref = str(filepath)[len(SCHEME):].partition("@")
    for s in suffixes:
        if name.endswith(s):
            name = name[:-len(s)]
            break
    return name + at + ref


def _save_name(filepath: Any, suffixes: Sequence[str]) -> str:
    name = _name(filepath, suffixes)
    if "@" in name:
        raise ValueError(f"{filepath}: save to a model name; versions are numbered by the repository")
    if len(name.encode()) > 200:   # the repository's bound: said here, before a temp file named after it
        raise ValueError(f"{filepath}: a model name is at most 200 bytes")   # fails with "File name too long"
    return name


def _check_safe_load(args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
    """Refuse to load a kestrel:// model with a Keras whose safe_mode has a published bypass, unless the
    caller passed safe_mode=False (load_model(filepath, custom_objects, compile, safe_mode))."""
    import keras
    safe = kwargs.get("safe_mode", args[2] if len(args) > 2 else True)
    if safe is False or _version(keras.__version__, 3) >= SAFE_LOAD:
        return
    raise RuntimeError(f"kestrel: Keras {keras.__version__} has published safe_mode bypasses (a crafted model runs "
                       f"code when loaded: CVE-2025-1550, CVE-2025-8747, CVE-2025-9906, CVE-2025-9905) and a "
                       f"kestrel:// model may be another user's; upgrade Keras to "
                       f"{'.'.join(map(str, SAFE_LOAD))} or later, or pass safe_mode=False to load a model you trust")


def _client() -> "Client":
    from .client import Client
    return Client()


def _final_metrics(model: Any) -> Dict[str, float]:
    history = getattr(getattr(model, "history", None), "history", None) or {}
    out: Dict[str, float] = {}
    for key, values in history.items():
        try:
            out[key] = float(values[-1])
        except (TypeError, ValueError, IndexError):
            pass
    return out


def _metadata(kind: str, model: Any = None) -> Dict[str, Any]:
    import keras
    meta: Dict[str, Any] = {"framework": "keras", "keras_version": keras.__version__, "backend": keras.backend.backend(),
            "artifact": kind}
    if model is not None and _final_metrics(model):
        meta["metrics"] = _final_metrics(model)
    for env, key in (("KESTREL_JOB_ID", "job_id"), ("KESTREL_GIT_COMMIT", "git_commit"), ("USER", "user")):
        if os.environ.get(env):
            meta[key] = os.environ[env]
    return meta


def _push(path: str, filepath: Any, suffixes: Sequence[str], kind: str, model: Any = None, alias: Optional[str] = None,
          metadata: Optional[Dict[str, Any]] = None) -> str:
    """Push path as the next version of the model filepath names; returns "NAME@N". The version's
    metadata: the framework's facts, the file name it is pulled back as, then the caller's keys."""
    name = _save_name(filepath, suffixes)
    meta = _metadata(kind, model)
    meta["filename"] = os.path.basename(path)
    meta.update(metadata or {})
    with _client() as client:
        return f"{name}@{client.push(name, path, alias=alias, metadata=meta)}"


def _inside_checkpointing() -> bool:
    """A save made by a Keras callback (ModelCheckpoint, BackupAndRestore) is a backup, not a version."""
    f: Optional[FrameType] = sys._getframe(2)
    while f is not None:
        if f"keras{os.sep}src{os.sep}callbacks" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


def autolog(name: Optional[str] = None) -> None:
    """Also push every plain model.save(...) as a new version of name (None: stop). Inside a Kestrel
    job this is on already, as jobs/JOB_ID (or KESTREL_AUTOLOG_NAME). Backups are never pushed."""
    install()
    _autolog["name"] = name


def _autolog_push(model: Any, filepath: Any) -> None:
    name = _autolog["name"]
    if name is None or _inside_checkpointing() or not os.path.isfile(str(filepath)):
        return
    try:
        with _client() as client:
            meta = _metadata("model", model)
            meta["saved_as"] = os.path.abspath(str(filepath))
            client.push(name, str(filepath), metadata=meta)
    except Exception as e:   # the local save succeeded: say why the version is missing, keep training
        warnings.warn(f"kestrel autolog: {filepath} was saved but not pushed to {name}: {e}")


def _pull(filepath: Any, tmp: str, suffixes: Sequence[str]) -> str:
    ref = _name(filepath, suffixes)
    raw = os.path.join(tmp, "pulled")
    with _client() as client:
        client.pull(ref, raw)
    if os.path.isdir(raw):   # a model saved with zipped=False: Keras' directory format, loaded as is
        return raw
    # a full model is a .keras zip archive; weights are an HDF5 file
    local = os.path.join(tmp, "model.keras" if zipfile.is_zipfile(raw) else "model.weights.h5")
    os.rename(raw, local)
    return local


def install() -> None:
    """Hook kestrel:// into Keras (idempotent)."""
    global _installed
    if _installed:
        return
    import keras
    from keras.src.saving import saving_api
    if not SUPPORTED[0] <= _version(keras.__version__) < SUPPORTED[1] or \
            not all(callable(getattr(saving_api, n, None)) for n in HOOKED):
        warnings.warn(f"kestrel: Keras {keras.__version__} is outside the tested range "
                      f"{'.'.join(map(str, SUPPORTED[0]))} <= version < {'.'.join(map(str, SUPPORTED[1]))}: "
                      "kestrel:// paths are not installed")
        return
    orig = {n: getattr(saving_api, n) for n in HOOKED}

    @functools.wraps(orig["save_model"])
    def save_model(model: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_uri(filepath):
            result = orig["save_model"](model, filepath, *args, **kwargs)
            _autolog_push(model, filepath)
            return result
        alias, metadata = kwargs.pop("alias", None), kwargs.pop("metadata", None)
        with tempfile.TemporaryDirectory(prefix="kestrel-save-") as tmp:
            # the file keeps the model's last name segment and .keras (what kestrel pull writes);
            # zipped=False: Keras' directory format, pushed as a directory version
            base = _save_name(filepath, (".keras",)).rsplit("/", 1)[-1]
            path = os.path.join(tmp, base if kwargs.get("zipped") is False else base + ".keras")
            orig["save_model"](model, path, *args, **kwargs)
            return _push(path, filepath, (".keras",), "model", model, alias, metadata)

    @functools.wraps(orig["load_model"])
    def load_model(filepath: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_uri(filepath):
            return orig["load_model"](filepath, *args, **kwargs)
        _check_safe_load(args, kwargs)
        with tempfile.TemporaryDirectory(prefix="kestrel-load-") as tmp:
            return orig["load_model"](_pull(filepath, tmp, (".keras",)), *args, **kwargs)

    @functools.wraps(orig["save_weights"])
    def save_weights(model: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_uri(filepath):
            return orig["save_weights"](model, filepath, *args, **kwargs)
        alias, metadata = kwargs.pop("alias", None), kwargs.pop("metadata", None)
        with tempfile.TemporaryDirectory(prefix="kestrel-save-") as tmp:
            base = _save_name(filepath, (".weights.h5",)).rsplit("/", 1)[-1]
            path = os.path.join(tmp, base + ".weights.h5")
            orig["save_weights"](model, path, *args, **kwargs)
            return _push(path, filepath, (".weights.h5",), "weights", model, alias, metadata)

    @functools.wraps(orig["load_weights"])
    def load_weights(model: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
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
    if os.environ.get("KESTREL_JOB_ID") and _autolog["name"] is None:
        _autolog["name"] = os.environ.get("KESTREL_AUTOLOG_NAME") or f"jobs/{os.environ['KESTREL_JOB_ID']}"
