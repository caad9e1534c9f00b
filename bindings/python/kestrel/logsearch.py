"""Client.search_logs: lines matching a substring or a regex across every job the caller may see."""
import time
from collections import namedtuple
from typing import List, Optional

from .errors import check, on_callback_error
from .ffi import C, ffi
from .job import LogLine, _STREAMS

LogHit = namedtuple("LogHit", "job_id job_name line before after")
_STATES = {"QUEUED": 1, "RUNNING": 2, "SUCCEEDED": 3, "FAILED": 4, "CANCELLED": 5, "PREEMPTED": 6}


def _line(l) -> LogLine:
    return LogLine(l.offset, l.time_ms, _STREAMS.get(l.stream, "?"),
                   ffi.string(l.text, l.len).decode("utf-8", "replace"))


class _Hits:
    def __init__(self):
        self.hits: List[LogHit] = []
        self.stored_exception = None


@ffi.def_extern(onerror=on_callback_error)
def _kestrel_hit_tramp(hit, payload):
    sink = ffi.from_handle(payload)
    try:
        sink.hits.append(LogHit(hit.job_id, ffi.string(hit.job_name).decode("utf-8", "replace"), _line(hit.line),
                                [_line(hit.before[i]) for i in range(hit.n_before)],
                                [_line(hit.after[i]) for i in range(hit.n_after)]))
        return 0
    except BaseException as e:
        sink.stored_exception = e
        return C.KESTREL_EUSER


def search_logs(client, pattern: str, *, regex: bool = False, ignore_case: bool = False, job: Optional[int] = None,
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
