"""Owned C handles: freed deterministically by close() or the context manager, else by the GC;
every call on a handle takes its lock (the GIL is released during C calls)."""
import threading

from .ffi import ffi


class Handle:
    _free = None   # the C destructor, set by subclasses

    def __init__(self, ptr):
        self._lock = threading.Lock()
        self._ptr = ffi.gc(ptr, type(self)._free)

    def _p(self):
        if self._ptr is None:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self):
        with self._lock:
            if self._ptr is not None:
                ptr, self._ptr = self._ptr, None
                ffi.release(ptr)   # runs the destructor now

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
