"""kestrel.Job: a snapshot of a job, and what can be done with it."""
import html
import time
import warnings
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .errors import check, on_callback_error
from .ffi import C, cstr, ffi

if TYPE_CHECKING:
    import pandas

    from .client import Client

LogLine = namedtuple("LogLine", "offset time_ms stream text")
Metric = namedtuple("Metric", "name step value wall_time_ms")
Event = namedtuple("Event", "time_ms from_state to_state reason")
_STREAMS = {1: "stdout", 2: "stderr", 3: "system"}
_FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def _s(p: Any) -> str:
    return str(ffi.string(p).decode("utf-8", "replace")) if p != ffi.NULL else ""


class _Lines:
    """Payload of the log trampoline: collects lines; keeps a callback's exception."""

    def __init__(self) -> None:
        self.lines: List[LogLine] = []
        self.stored_exception: Optional[BaseException] = None


@ffi.def_extern(onerror=on_callback_error)  # type: ignore[untyped-decorator]  # cffi is untyped
def _kestrel_log_tramp(line: Any, payload: Any) -> int:
    sink = ffi.from_handle(payload)
    try:
        sink.lines.append(LogLine(line.offset, line.time_ms, _STREAMS.get(line.stream, "?"),
                                  ffi.string(line.text, line.len).decode("utf-8", "replace")))
        return 0
    except BaseException as e:   # includes KeyboardInterrupt from a notebook's interrupt button
        sink.stored_exception = e
        return int(C.KESTREL_EUSER)


def _job_from_ptr(client: "Client", ptr: Any) -> "Job":
    """Copy an owned C job into a Job and free it."""
    try:
        return Job._from_c(client, ptr)
    finally:
        C.kestrel_job_free(ptr)


class Job:
    """A job as the server last reported it. Attributes are plain values; refresh() re-reads them.

    Attributes:
        id (int): the job's id.
        name (str): its display name ("" if none).
        state (str): QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED or PREEMPTED.
        reason (str): why it is in that state ("exit code 0", "preempted by job 7 (urgent)").
        exit_code (int | None): the exit status once it ended with one.
        owner (str): the user who submitted it.
        priority (str): its class: NORMAL, HIGH or URGENT.
        gpus (int): GPUs it asked for (of a gang: each rank's); node (str | None): where it runs or ran.
        replicas (int): the ranks of a gang job (1: one process).
        restart_count (int): how many times it was requeued (preemption, daemon restart, retries).
        submit_time_ms, start_time_ms, end_time_ms (int | None): Unix times in milliseconds.
        params (dict[str, str]): its parameters (hyperparameters).
        data (dict[str, str]): {path in the work dir: the exact repository version staged there}.
        code (str | None): the repository version of its code ("USER/code/DIR@N").
        git_commit (str | None): the commit it ran, for a --git job.
        environment (str | None): the digest of the environment it ran in; packages: its pip freeze.
        gpu_usage (list[dict]): per real GPU it held: uuid, samples, mean/max utilisation, peak memory.
        events (list[Event]): every state change: (time_ms, from_state, to_state, reason).
    """

    def __init__(self, client: "Client", job_id: int) -> None:
        self._client = client   # keeps the session alive as long as the job is used
        self.id = int(job_id)

    @classmethod
    def _from_c(cls, client: "Client", p: Any) -> "Job":
        j = cls(client, int(C.kestrel_job_id(p)))
        j._fill(p)
        return j

    def _fill(self, p: Any) -> None:
        self.state = _s(C.kestrel_job_state_name(C.kestrel_job_state(p)))
        code = int(C.kestrel_job_exit_code(p))
        self.exit_code: Optional[int] = code if code >= 0 else None
        self.name = _s(C.kestrel_job_name(p))
        self.owner = _s(C.kestrel_job_owner(p))
        self.reason = _s(C.kestrel_job_reason(p))
        self.git_commit = _s(C.kestrel_job_git_commit(p)) or None
        self.code = _s(C.kestrel_job_code(p)) or None
        self.environment = _s(C.kestrel_job_environment(p)) or None
        self.packages: List[str] = [x for x in _s(C.kestrel_job_packages(p)).splitlines() if x]
        self.gpu_usage: List[Dict[str, Any]] = []   # per real device it held: uuid, samples, mean/max utilisation, peak memory
        u = ffi.new("kestrel_gpu_usage *")
        for i in range(C.kestrel_job_gpu_usage_count(p)):
            check(C.kestrel_job_gpu_usage_at(p, i, u))
            self.gpu_usage.append({"uuid": _s(u.uuid), "samples": u.samples, "mean_utilization": u.mean_utilization,
                                   "max_utilization": u.max_utilization, "peak_memory": u.peak_memory})
        self.priority = _s(C.kestrel_priority_name(C.kestrel_job_priority(p)))
        self.gpus = int(C.kestrel_job_gpus(p))
        self.replicas = int(C.kestrel_job_replicas(p))
        self.node = _s(C.kestrel_job_node(p)) or None
        self.restart_count = int(C.kestrel_job_restart_count(p))
        self.submit_time_ms = int(C.kestrel_job_submit_time(p))
        self.start_time_ms: Optional[int] = int(C.kestrel_job_start_time(p)) or None
        self.end_time_ms: Optional[int] = int(C.kestrel_job_end_time(p)) or None
        self.data: Dict[str, str] = {}
        for i in range(C.kestrel_job_data_count(p)):
            r, q = ffi.new("const char **"), ffi.new("const char **")
            check(C.kestrel_job_data_at(p, i, r, q))
            self.data[_s(q[0])] = _s(r[0])
        self.params: Dict[str, str] = {}
        for i in range(C.kestrel_job_param_count(p)):
            k, v = ffi.new("const char **"), ffi.new("const char **")
            check(C.kestrel_job_param_at(p, i, k, v))
            self.params[_s(k[0])] = _s(v[0])
        self.events: List[Event] = [Event(e.time_ms, _s(C.kestrel_job_state_name(e.from_state)),
                             _s(C.kestrel_job_state_name(e.to_state)), _s(e.reason))
                       for e in (C.kestrel_job_event_at(p, i) for i in range(C.kestrel_job_event_count(p)))]

    def _call(self, fn: Callable[..., int], *args: Any) -> "Job":
        c = self._client
        out = ffi.new("kestrel_job **")
        with c._lock:
            check(fn(out, c._p(), self.id, *args))
        if out[0] != ffi.NULL:
            try:
                self._fill(out[0])
            finally:
                C.kestrel_job_free(out[0])
        return self

    @property
    def done(self) -> bool:
        """True once the job is final: SUCCEEDED, FAILED or CANCELLED."""
        return self.state in _FINAL

    def refresh(self) -> "Job":
        """Read the job from the server again (this object is updated and returned)."""
        return self._call(C.kestrel_job_get)

    def wait(self, timeout: Optional[float] = None) -> "Job":
        """Block until the job is final (raises KestrelTimeoutError after timeout seconds)."""
        ms = -1 if timeout is None else int(timeout * 1000)
        # long waits in slices so that Ctrl-C is seen between them
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 5000 if deadline is None else max(0, min(5000, int((deadline - time.monotonic()) * 1000)))
            try:
                return self._call(C.kestrel_job_wait, left)
            except Exception as e:
                if getattr(e, "code", None) != C.KESTREL_ETIMEOUT or (deadline is not None and time.monotonic() >= deadline):
                    raise
            if ms == 0:
                raise TimeoutError(f"job {self.id} is not final")

    def cancel(self) -> "Job":
        """Cancel the job (queued: it leaves the queue; running: SIGTERM, then SIGKILL after its grace
        period). A job that already ended is left as it is (no error: this object is refreshed)."""
        return self._call(C.kestrel_job_cancel)

    def set_priority(self, priority: str) -> "Job":
        """Move a QUEUED job to another class: "normal", "high" or "urgent" (ValueError otherwise)."""
        from .client import PRIORITIES
        priority = str(priority).lower()
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
        return self._call(C.kestrel_job_set_priority, PRIORITIES[priority])

    def ack_preempt(self) -> None:
        """Tell the server this job just saved a checkpoint."""
        with self._client._lock:
            check(C.kestrel_job_ack_preempt(self._client._p(), self.id))

    def explain(self) -> str:
        """Where the job stands and why it waits: "position 2: needs 4 x a100 ..." for a queued job."""
        buf = ffi.new("kestrel_buf *")
        pos = ffi.new("int *")
        try:
            with self._client._lock:
                check(C.kestrel_job_explain(buf, pos, self._client._p(), self.id))
            reason = _s(buf.ptr)
        finally:
            C.kestrel_buf_dispose(buf)
        return f"position {pos[0]}: {reason}" if pos[0] else reason

    def logs(self, follow: bool = False, offset: int = 0) -> Iterator[LogLine]:
        """The job's log lines; with follow=True, keep yielding until the job ends."""
        c = self._client._clone() if follow else self._client   # a follow must not hold the shared session
        try:
            while True:
                sink = _Lines()
                handle = ffi.new_handle(sink)
                opts = ffi.new("kestrel_logs_options *")
                nxt = ffi.new("int64_t *")
                check(C.kestrel_logs_options_init(opts, C.KESTREL_LOGS_OPTIONS_VERSION))
                opts.offset = offset
                opts.follow = 1 if follow else 0
                opts.timeout_ms = 1000   # come back to Python at least every second (Ctrl-C, yielding)
                with c._lock:
                    rc = C.kestrel_job_logs(nxt, c._p(), self.id, opts, C._kestrel_log_tramp, handle)
                yield from sink.lines
                offset = nxt[0]
                if rc == C.KESTREL_ETIMEOUT and follow:
                    continue
                check(rc, sink)
                return
        finally:
            if c is not self._client:
                c.close()

    def gpu_telemetry(self) -> Dict[str, Any]:
        """This job's GPU use as kestreld sampled it: {"usage": [...per device...], "samples": [...]}."""
        from .logsearch import gpu_telemetry
        return gpu_telemetry(self._client, self.id)

    def metrics(self, name: Optional[str] = None) -> List[Metric]:
        """The metric points the job reported (all, or only name's): Metric(name, step, value, wall_time_ms)."""
        out = ffi.new("kestrel_metric_list **")
        with self._client._lock:
            check(C.kestrel_job_metrics(out, self._client._p(), self.id, cstr(name, "a metric name") if name else ffi.NULL))
        ml = ffi.gc(out[0], C.kestrel_metric_list_free)
        if C.kestrel_metric_list_more(ml):   # said, where they were cut in silence
            warnings.warn(f"job {self.id} holds more metric points than the 100,000 given (the first by name, then "
                          "step)" + ("" if name else ": read one name at a time"), stacklevel=2)
        return [Metric(_s(m.name), m.step, m.value, m.wall_time_ms)
                for m in (C.kestrel_metric_list_at(ml, i) for i in range(C.kestrel_metric_list_count(ml)))]

    def metrics_frame(self, name: Optional[str] = None) -> "pandas.DataFrame":
        """The metrics as a pandas DataFrame: a row a step, a column a metric name (needs pandas:
        pip install pandas). Series of other step counts (batch/loss) are columns of their own."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("Job.metrics_frame() needs pandas: pip install pandas "
                              "(Job.metrics() gives the same points as a list)") from e
        points = self.metrics(name)
        if not points:
            return pd.DataFrame()
        frame = pd.DataFrame(points, columns=list(Metric._fields))
        pivot: "pandas.DataFrame" = frame.pivot_table(index="step", columns="name", values="value", aggfunc="last").sort_index()
        return pivot

    def report_metrics(self, points: Union[Dict[str, float], Sequence[Tuple[Any, ...]]], step: int = 0) -> None:
        """Report {name: value} at step, or [(name, step, value[, wall_time_ms]), ...], in one request."""
        out = ffi.new("kestrel_metric_list **")
        check(C.kestrel_metric_list_new(out))
        ml = ffi.gc(out[0], C.kestrel_metric_list_free)
        items: Sequence[Tuple[Any, ...]] = [(k, step, v) for k, v in points.items()] if isinstance(points, dict) else points
        for item in items:
            name, st, value = item[0], item[1], item[2]
            wall = item[3] if len(item) > 3 else 0
            try:
                check(C.kestrel_metric_list_add(ml, cstr(name, "a metric name"), int(st), float(value), int(wall)))
            except OverflowError:   # cffi's own words ("int too big to convert") name neither
                raise ValueError(f"metric {name!r}: step {st} or wall time {wall} does not fit in 64 bits") from None
        with self._client._lock:
            check(C.kestrel_job_report_metrics(self._client._p(), self.id, ml))

    def __repr__(self) -> str:
        return f"<kestrel.Job {self.id} {self.name or '-'} {self.state}>"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in (
            ("state", self.state), ("reason", self.reason), ("priority", self.priority), ("gpus", self.gpus),
            ("node", self.node or "-"), ("restarts", self.restart_count), ("owner", self.owner)))
        return f"<b>job {self.id}</b> {html.escape(self.name or '')}<table>{rows}</table>"
