"""Owned C handles: freed deterministically by close() or the context manager, else by the GC;
every call on a handle takes its lock (the GIL is released during C calls)."""
import threading
from typing import Any, Callable, Optional, TypeVar

from .ffi import ffi

_H = TypeVar("_H", bound="Handle")


class _HandleLock:
    """The handle's lock, which says so when the thread holding it asks again (a progress callback
    calling the Client whose transfer called it) instead of waiting for itself forever."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: Optional[int] = None

    def __enter__(self) -> "_HandleLock":
        if self._owner == threading.get_ident():
            raise RuntimeError("this handle is in use by a call on this same thread (a progress callback cannot "
                               "use the Client whose transfer called it: use another Client)")
        self._lock.acquire()
        self._owner = threading.get_ident()
        return self

    def __exit__(self, *exc: object) -> None:
        self._owner = None
        self._lock.release()


class Handle:
    _free: Optional[Callable[..., Any]] = None   # the C destructor, set by subclasses

    def __init__(self, ptr: Any) -> None:
        self._lock = _HandleLock()
        self._ptr = ffi.gc(ptr, type(self)._free)

    def _p(self) -> Any:
        if self._ptr is None:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self) -> None:
        with self._lock:
            if self._ptr is not None:
                ptr, self._ptr = self._ptr, None
                ffi.release(ptr)   # runs the destructor now

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
