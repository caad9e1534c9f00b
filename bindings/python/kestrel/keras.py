"""Keras integration: live metrics to kestreld, and preemption that loses no step.

    import kestrel.keras
    model.fit(x, y, callbacks=[kestrel.keras.MetricsCallback()])       # inside a Kestrel job
    kestrel.keras.fit(model, x, y, epochs=5, batch_size=64)           # + resumes after preemption

    kestrel.keras.distribute()     # in a gang (kestrel submit --replicas N): data parallel over every rank
    kestrel.keras.fit(model, x, y, epochs=5, batch_size=64)           # 64: the global batch, split over ranks

    model.save("kestrel://team/mnist")                               # a new version in the repository
    keras.saving.load_model("kestrel://team/mnist@production")

Inside a Kestrel job (KESTREL_JOB_ID set) both talk to the job's kestreld with the job's own token.
This module imports keras; `import kestrel` alone never does.
"""
import hashlib
import os
import zipfile
import queue
import signal
import tempfile
import threading
import time
import warnings
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np

from .client import Client
from . import _gang, keras_uri

keras_uri.install()   # kestrel:// paths in model.save / load_model / save_weights / load_weights
autolog = keras_uri.autolog


_warned_outside: List[int] = []


def _job_context(client: Optional[Client] = None, job_id: Optional[int] = None,
                 who: str = "MetricsCallback") -> Tuple[Optional[Client], Optional[int]]:
    found = job_id or os.environ.get("KESTREL_JOB_ID")
    if found and not job_id and not _gang.is_leader():
        return None, None   # a gang reports through rank 0
    if not found:
        if not _warned_outside:   # once a process: the metrics go nowhere, and the user should know
            _warned_outside.append(1)
            warnings.warn(f"kestrel.keras.{who}: not inside a Kestrel job (no KESTREL_JOB_ID) and no job_id= "
                          "given: nothing is reported. Pass job_id=ID (and client=) to report to a job.",
                          stacklevel=3)
        return None, None
    return client or Client(), int(found)


class MetricsCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """Reports loss, metrics, learning rate and throughput per epoch, and every `every` batches,
    in batches from a background thread (training never waits on the network)."""

    def __init__(self, every: int = 50, batch_size: Optional[int] = None, client: Optional[Client] = None,
                 job_id: Optional[int] = None, flush_seconds: float = 2.0) -> None:
        super().__init__()
        self.every = max(1, int(every))
        self.batch_size = batch_size
        self.flush_seconds = flush_seconds
        self._client, self._job_id = _job_context(client, job_id)
        self._queue: "queue.Queue[Optional[List[Tuple[str, int, float, int]]]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._step = 0
        self.errors = 0   # reports that failed (refused by kestreld, or the network); the first is warned
        self.last_error: Optional[str] = None

    # -- the reporting thread ------------------------------------------------------------------
    def _run(self) -> None:
        from .job import Job
        assert self._client is not None and self._job_id is not None   # started only with both
        job = Job(self._client, self._job_id)
        pending: List[Tuple[str, int, float, int]] = []
        stop = False
        while not stop:
            try:
                item = self._queue.get(timeout=self.flush_seconds)
                if item is None:
                    stop = True
                else:
                    pending.extend(item)
                while len(pending) < 1000:   # take whatever else is already there
                    item = self._queue.get_nowait()
                    if item is None:
                        stop = True
                        break
                    pending.extend(item)
            except queue.Empty:
                pass
            if pending:
                try:
                    job.report_metrics(pending)
                except Exception as e:   # metrics must never break training, nor go silently (a hostile test)
                    self.errors += 1
                    self.last_error = str(e)
                    if self.errors == 1:
                        warnings.warn(f"kestrel.keras.MetricsCallback: a report of {len(pending)} points failed "
                                      f"({e}); training goes on, and later failures are counted in .errors (the "
                                      "last in .last_error)", stacklevel=1)
                pending = []

    def _emit(self, points: List[Tuple[str, int, float, int]]) -> None:
        if self._client is not None and points:
            self._queue.put(points)

    # -- Keras hooks ---------------------------------------------------------------------------
    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        if self._client is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kestrel-metrics", daemon=True)
            self._thread.start()
        self._epoch_t0 = time.perf_counter()

    def on_epoch_begin(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self._epoch_t0 = time.perf_counter()
        self._epoch_steps = 0

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self._step += 1
        self._epoch_steps = getattr(self, "_epoch_steps", 0) + 1
        if self._step % self.every == 0 and logs:
            now = int(time.time() * 1000)
            t = time.perf_counter()
            points = [(f"batch/{k}", self._step, float(v), now) for k, v in logs.items() if _is_number(v)]
            last = getattr(self, "_batch_t", None)
            if last is not None and t > last:   # batch speed since the last report
                points.append(("batch/steps_per_second", self._step, self.every / (t - last), now))
                if self.batch_size:
                    points.append(("batch/samples_per_second", self._step, self.every * self.batch_size / (t - last),
                                   now))
            self._batch_t = t
            lr = _learning_rate(self.model)
            if lr is not None:
                points.append(("batch/learning_rate", self._step, lr, now))
            self._emit(points)

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        now = int(time.time() * 1000)
        elapsed = max(time.perf_counter() - self._epoch_t0, 1e-9)
        points = [(k, epoch + 1, float(v), now) for k, v in (logs or {}).items() if _is_number(v)]
        steps = getattr(self, "_epoch_steps", 0)
        points.append(("steps_per_second", epoch + 1, steps / elapsed, now))
        if self.batch_size:
            points.append(("samples_per_second", epoch + 1, steps * self.batch_size / elapsed, now))
        lr = _learning_rate(self.model)
        if lr is not None:
            points.append(("learning_rate", epoch + 1, lr, now))
        self._emit(points)

    def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None


def _is_number(v: Any) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def _learning_rate(model: Any) -> Optional[float]:
    try:
        return float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))
    except Exception:
        return None


# -- preemption that loses no step --------------------------------------------------------------

class _Preempted(Exception):
    pass


class PreemptionCheckpoint(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
    """On SIGTERM (kestreld's preemption signal): finish the current batch, write weights,
    optimizer state, epoch and batch position atomically into KESTREL_CHECKPOINT_DIR, acknowledge
    the checkpoint, and stop training. In a gang every rank votes at the end of each batch (a
    collective), so that all stop after the same one; rank 0 writes and acknowledges."""

    def __init__(self, directory: str, state: Dict[str, int], client: Optional[Client] = None,
                 job_id: Optional[int] = None, fit: str = "") -> None:
        super().__init__()
        self.directory = directory
        self.fit = fit              # the fingerprint kept with the checkpoint (save_checkpoint)
        self.state = state          # {"epoch": e, "batch": b} of the fit in progress
        self._client, self._job_id = _job_context(client, job_id, "PreemptionCheckpoint")
        self.requested = False
        self._previous: Any = None

    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.requested = True   # acted on at the end of the batch in progress

    def on_epoch_begin(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self.state["epoch"] = epoch

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self.state["batch"] += 1
        if _gang.agree(self.requested, keras.backend.backend()):
            if _gang.is_leader():
                save_checkpoint(self.model, self.directory, self.state, self.fit)
            if self._client is not None and self._job_id is not None:
                try:
                    from .job import Job
                    Job(self._client, self._job_id).ack_preempt()
                except Exception:
                    pass
            self.model.stop_training = True
            raise _Preempted()

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self.state["epoch"] = epoch + 1
        self.state["batch"] = 0

    def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def save_checkpoint(model: Any, directory: str, state: Dict[str, int], fit: str = "") -> None:
    """Weights, optimizer variables and position, written to temp names and renamed into place; fit,
    the fingerprint of the fit they belong to (kestrel.keras.fit's), is kept with the position."""
    os.makedirs(directory, exist_ok=True)
    arrays = {f"w{i}": np.asarray(keras.ops.convert_to_numpy(v)) for i, v in enumerate(model.weights)}
    arrays.update({f"o{i}": np.asarray(keras.ops.convert_to_numpy(v))
                   for i, v in enumerate(model.optimizer.variables)})
    for name in ("state.npz", "position.json"):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "wb") as f:
            if name == "state.npz":
                np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy types **kwds as allow_pickle
            else:
                f.write(json.dumps({**state, "fit": fit} if fit else state).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, name))


def load_checkpoint(model: Any, directory: str, fit: str = "") -> Optional[Dict[str, int]]:
    """Restore weights and optimizer state; returns the saved position, or None. fit: the fingerprint
    of the fit asking; a checkpoint saved by another fit (other data, model or batch size) is refused
    (ValueError), where it was taken up in silence (a hostile test: a second experiment in the same
    folder skipped its training and kept the first one's weights). One without a fingerprint (older
    bindings) is taken up."""
    pos = os.path.join(directory, "position.json")
    if not os.path.exists(pos):
        return None
    try:
        with open(pos) as f:
            saved = json.load(f)
        state: Dict[str, int] = {"epoch": int(saved["epoch"]), "batch": int(saved["batch"])}
        with np.load(os.path.join(directory, "state.npz"), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{directory} holds no readable kestrel.keras checkpoint ({type(e).__name__}: {e}): "
                         "remove it, or give another checkpoint_dir") from None
    if fit and saved.get("fit", fit) != fit:
        raise ValueError(f"{directory} holds the checkpoint of another fit (other data, model or batch size): "
                         "remove it to train from the start, or give this fit its own checkpoint_dir")
    for i, v in enumerate(model.weights):
        v.assign(arrays[f"w{i}"])
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    for i, v in enumerate(model.optimizer.variables):
        v.assign(arrays[f"o{i}"])
    return state


def _fingerprint(model: Any, x: Any, y: Any, batch_size: int, values: bool) -> str:
    """What makes a checkpoint this fit's: the model's variables (shape, dtype, in order), its optimizer,
    the batch size, the data's shape and dtype, and with values its first and last 64 Ki values (not
    all of it: a fit over gigabytes would hash them at every start). Inside a job values are left out:
    a requeued run may load its data in another order (an unseeded split), and must resume (a review)."""
    h = hashlib.sha256()
    for v in model.weights:
        h.update(f"{tuple(v.shape)}:{v.dtype};".encode())   # not its name: Keras numbers them per process
    h.update(f"{type(model.optimizer).__name__};{batch_size};".encode())
    for a in (x, y):
        arr = np.asarray(a)
        flat = arr.reshape(-1)
        h.update(f"{arr.shape}:{arr.dtype};".encode())
        if values and arr.dtype != object:   # an object array's bytes are pointers
            h.update(np.ascontiguousarray(flat[:65536]).tobytes())
            h.update(np.ascontiguousarray(flat[-65536:]).tobytes())
    return h.hexdigest()


def fit(model: Any, x: Any, y: Any, *, epochs: int, batch_size: int, callbacks: Sequence[Any] = (),
        checkpoint_dir: Optional[str] = None, **kwargs: Any) -> str:
    """model.fit over (x, y) that survives preemption inside a Kestrel job: on SIGTERM it saves at
    the end of the current batch and exits the fit; run again, it restores weights, optimizer and
    position and continues from the next batch, so the run makes exactly the optimizer steps of an
    uninterrupted one. Batches are taken in order (no shuffling), which is what makes positions
    meaningful. Returns "preempted" or "done".

    In a gang (after distribute()), batch_size is the global batch: each rank trains on its part of
    every one (rank r the r-th of KESTREL_WORLD_SIZE equal parts), so the ranks together take the
    optimizer steps one process would on the same global batches; rank 0 writes the checkpoints
    and every rank resumes from them."""
    directory = checkpoint_dir or os.environ.get("KESTREL_CHECKPOINT_DIR") or "kestrel-checkpoint"
    if not model.built:
        model(x[:1])
    in_job = bool(os.environ.get("KESTREL_CHECKPOINT_DIR"))
    fit_id = _fingerprint(model, x, y, batch_size, not in_job)   # the whole data's, the same on every rank
    rows, batch_size = _gang.shard(len(x), batch_size)
    if len(rows) != len(x):
        x, y = x[rows], y[rows]
    n = len(x)
    steps = -(-n // batch_size)
    state = load_checkpoint(model, directory, fit_id) or {"epoch": 0, "batch": 0}
    if (state["epoch"] or state["batch"]) and not in_job:
        warnings.warn(f"kestrel.keras.fit: resuming from the checkpoint in {directory} (epoch {state['epoch']}, "
                      f"batch {state['batch']}); remove it to train from the start", stacklevel=2)
    guard = PreemptionCheckpoint(directory, state, fit=fit_id)
    kwargs["shuffle"] = False
    try:
        while state["epoch"] < epochs:
            start = state["batch"] * batch_size
            if start >= n:
                state["epoch"] += 1
                state["batch"] = 0
                continue
            # the rest of this epoch from the saved batch (a whole epoch when batch is 0)
            model.fit(x[start:], y[start:], batch_size=batch_size, epochs=state["epoch"] + 1,
                      initial_epoch=state["epoch"], callbacks=[guard, *callbacks], **kwargs)
            if state["batch"] not in (0, steps):
                return "preempted"
    except _Preempted:
        return "preempted"
    if _gang.is_leader():
        save_checkpoint(model, directory, {"epoch": epochs, "batch": 0}, fit_id)
    return "done"


def distribute() -> Any:
    """Data parallelism over every rank of a gang (kestrel submit --replicas N), set up from the
    variables kestreld gives each rank. Call it before building the model. Returns the
    keras.distribution.DataParallel in use (JAX), or None.

    JAX backend: keras.distribution.initialize() (KERAS_DISTRIBUTION_*), then DataParallel over
    every rank's devices; on CPU the collectives are gloo's, on GPUs XLA's (NCCL). Each rank feeds
    its own part of each global batch (kestrel.keras.fit does it), so auto-sharding is off.
    torch backend: torch.distributed's process group (gloo on CPU, NCCL with CUDA) from MASTER_ADDR,
    MASTER_PORT, RANK and WORLD_SIZE; Keras 3 has no DataParallel for torch, so the model is not
    distributed (average gradients yourself, e.g. in a custom train step). Outside a gang it sets up
    nothing but the single-process DataParallel (JAX) and returns it."""
    _, size = _gang.world()
    backend = keras.backend.backend()
    if backend == "jax":
        import jax
        if size > 1:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")  # type: ignore[no-untyped-call]
            keras.distribution.initialize()
        dist = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
        dist.auto_shard_dataset = False
        keras.distribution.set_distribution(dist)
        return dist
    if backend == "torch":
        import torch
        import torch.distributed as tdist
        if size > 1 and not tdist.is_initialized():
            tdist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return None
    raise RuntimeError(f"kestrel.keras.distribute(): the {backend} backend is not supported (jax or torch)")


def _hook_fit() -> None:
    """Under autolog inside a Kestrel job, every Model.fit reports its metrics (a MetricsCallback is
    added unless the caller passed one)."""
    Model = keras.Model
    if getattr(Model.fit, "_kestrel_hooked", False):
        return
    original = Model.fit

    def fit_with_metrics(self: Any, *args: Any, callbacks: Optional[Sequence[Any]] = None, **kwargs: Any) -> Any:
        if keras_uri._autolog["name"] and os.environ.get("KESTREL_JOB_ID"):
            extended = list(callbacks or [])
            if not any(isinstance(c, MetricsCallback) for c in extended):
                extended.append(MetricsCallback(batch_size=kwargs.get("batch_size")))
            callbacks = extended
        return original(self, *args, callbacks=callbacks, **kwargs)

    setattr(fit_with_metrics, "_kestrel_hooked", True)
    fit_with_metrics.__doc__ = original.__doc__
    setattr(fit_with_metrics, "__wrapped__", original)
    Model.fit = fit_with_metrics


_hook_fit()
