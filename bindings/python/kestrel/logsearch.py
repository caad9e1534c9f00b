"""Client.search_logs (lines matching a substring or a regex across every job the caller may see),
Client.alerts (kestreld's own alerts) and Job.gpu_telemetry (a job's GPU use as kestreld sampled it)."""
import time
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from .errors import check, on_callback_error
from .ffi import C, ffi
from .job import LogLine, _STREAMS

if TYPE_CHECKING:
    from .client import Client

LogHit = namedtuple("LogHit", "job_id job_name line before after")
_STATES = {"QUEUED": 1, "RUNNING": 2, "SUCCEEDED": 3, "FAILED": 4, "CANCELLED": 5, "PREEMPTED": 6}


def _line(l: Any) -> LogLine:
    return LogLine(l.offset, l.time_ms, _STREAMS.get(l.stream, "?"),
                   ffi.string(l.text, l.len).decode("utf-8", "replace"))


class _Hits:
    def __init__(self) -> None:
        self.hits: List[LogHit] = []
        self.stored_exception: Optional[BaseException] = None


@ffi.def_extern(onerror=on_callback_error)  # type: ignore[untyped-decorator]  # cffi is untyped
def _kestrel_hit_tramp(hit: Any, payload: Any) -> int:
    sink = ffi.from_handle(payload)
    try:
        sink.hits.append(LogHit(hit.job_id, ffi.string(hit.job_name).decode("utf-8", "replace"), _line(hit.line),
                                [_line(hit.before[i]) for i in range(hit.n_before)],
                                [_line(hit.after[i]) for i in range(hit.n_after)]))
        return 0
    except BaseException as e:
        sink.stored_exception = e
        return int(C.KESTREL_EUSER)


def search_logs(client: "Client", pattern: str, *, regex: bool = False, ignore_case: bool = False, job: Optional[int] = None,
                state: Optional[str] = None, since: Optional[float] = None, context: int = 0,
                limit: int = 100) -> List[LogHit]:
    """Matching lines, newest first: LogHit(job_id, job_name, line, before, after).

    pattern is a substring of at least 3 characters, or with regex=True a POSIX extended regex;
    since is a number of seconds back from now; state a job state name ("failed")."""
    opts = ffi.new("kestrel_log_search_options *")
    check(C.kestrel_log_search_options_init(opts, C.KESTREL_LOG_SEARCH_OPTIONS_VERSION))
    opts.regex = 1 if regex else 0
    opts.ignore_case = 1 if ignore_case else 0
    opts.job_id = int(job or 0)
    if state:
        if state.upper() not in _STATES:
            raise ValueError(f"state must be one of {', '.join(s.lower() for s in _STATES)}")
        opts.state = _STATES[state.upper()]
    if since:
        opts.since_ms = int((time.time() - float(since)) * 1000)
    opts.context = int(context)
    opts.limit = int(limit)
    sink = _Hits()
    handle = ffi.new_handle(sink)
    with client._lock:
        rc = C.kestrel_logs_search(client._p(), pattern.encode(), opts, C._kestrel_hit_tramp, handle)
    check(rc, sink)
    return sink.hits


_DELIVERY = {0: "pending", 1: "delivered", 2: "given-up", 3: "none"}


def alerts(client: "Client", job: Optional[int] = None, limit: int = 100) -> List[Dict[str, Any]]:
    """kestreld's alerts (log policies, NaN loss, idle GPUs) the caller may see, newest first, as dicts."""
    out = ffi.new("kestrel_alert_list **")
    with client._lock:
        check(C.kestrel_alerts_get(out, client._p(), int(job or 0), int(limit)))
    lst = ffi.gc(out[0], C.kestrel_alert_list_free)
    s: Callable[[Any], str] = lambda p: str(ffi.string(p).decode("utf-8", "replace"))
    return [{"id": a.id, "time_ms": a.time_ms, "job_id": a.job_id, "job_name": s(a.job_name), "owner": s(a.owner),
             "kind": s(a.kind), "severity": s(a.severity), "message": s(a.message),
             "delivery": _DELIVERY.get(a.delivery, "?")}
            for a in (C.kestrel_alert_list_at(lst, i) for i in range(C.kestrel_alert_list_count(lst)))]


def gpu_telemetry(client: "Client", job_id: int) -> Dict[str, Any]:
    """{"usage": [{uuid, samples, mean_utilization, max_utilization, peak_memory}], "samples": [...]}"""
    out = ffi.new("kestrel_gpu_telemetry **")
    with client._lock:
        check(C.kestrel_job_gpu_telemetry(out, client._p(), int(job_id)))
    t = ffi.gc(out[0], C.kestrel_gpu_telemetry_free)
    s: Callable[[Any], str] = lambda p: str(ffi.string(p).decode())
    usage = [C.kestrel_gpu_telemetry_usage_at(t, i) for i in range(C.kestrel_gpu_telemetry_usage_count(t))]
    samples = [C.kestrel_gpu_telemetry_sample_at(t, i) for i in range(C.kestrel_gpu_telemetry_sample_count(t))]
    return {"usage": [{"uuid": s(u.uuid), "samples": u.samples, "mean_utilization": u.mean_utilization,
                       "max_utilization": u.max_utilization, "peak_memory": u.peak_memory} for u in usage],
            "samples": [{"time_ms": x.time_ms, "uuid": s(x.uuid), "utilization": x.utilization,
                         "memory_used": x.memory_used} for x in samples]}
