"""Exceptions, one per libkestrel error code, each also a familiar builtin where one fits."""
import threading
from typing import Any, Optional

from .ffi import C, ffi

_tls = threading.local()


class KestrelError(Exception):
    """A libkestrel call failed. `code` is the KESTREL_E* value; `http_status` the server's status.
    `outcome_unknown` is True when its request went out whole and its answer was lost, so what it
    asked may have been done all the same (a push's version may exist: list the model's versions
    before pushing again); kestrel_error_outcome_unknown() in C."""

    def __init__(self, message: str, code: int = -1, http_status: int = 0, transport_code: int = 0,
                 outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status
        self.transport_code = transport_code
        self.outcome_unknown = outcome_unknown


class InvalidArgumentError(KestrelError, ValueError):
    pass


class MisuseError(KestrelError, RuntimeError):
    """The library was used wrongly (a closed handle, a bad options version): a binding bug."""


class NotFoundError(KestrelError, LookupError):
    pass


class AlreadyExistsError(KestrelError):
    """409: a conflict with the server's state."""


class AuthError(KestrelError, PermissionError):
    pass


class NetworkError(KestrelError, ConnectionError):
    pass


class HTTPError(KestrelError):
    pass


class ProtocolError(KestrelError):
    pass


class KestrelTimeoutError(KestrelError, TimeoutError):
    pass


class CancelledError(KestrelError):
    pass


class UnsupportedError(KestrelError):
    pass


class KestrelIOError(KestrelError, OSError):
    pass


class TooLargeError(KestrelError):
    pass


_BY_CODE: dict[int, type[KestrelError]] = {
    C.KESTREL_EINVALID: InvalidArgumentError,
    C.KESTREL_EMISUSE: MisuseError,
    C.KESTREL_ENOTFOUND: NotFoundError,
    C.KESTREL_EEXISTS: AlreadyExistsError,
    C.KESTREL_EAUTH: AuthError,
    C.KESTREL_ENET: NetworkError,
    C.KESTREL_EHTTP: HTTPError,
    C.KESTREL_EPROTO: ProtocolError,
    C.KESTREL_ETIMEOUT: KestrelTimeoutError,
    C.KESTREL_ECANCELLED: CancelledError,
    C.KESTREL_EUNSUPPORTED: UnsupportedError,
    C.KESTREL_EIO: KestrelIOError,
    C.KESTREL_ETOOLARGE: TooLargeError,
}


def _note(exc: BaseException, note: str) -> None:
    """exc.add_note(note), also before Python 3.11 (the same list; shown by 3.11's traceback)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        setattr(exc, "__notes__", [*getattr(exc, "__notes__", []), note])


def check(rc: int, payload: object = None, *, maybe_made: bool = False) -> int:
    """Raise the exception for a negative return code (callback exceptions win, as themselves).
    maybe_made: a push whose error record was cleared before it; a callback's exception that stopped
    it while its commit was unanswered gets the library's word that the version may have been made."""
    if rc >= 0:
        return rc
    pending = getattr(_tls, "pending", None)
    _tls.pending = None
    stored = getattr(payload, "stored_exception", None)
    if stored is not None:
        setattr(payload, "stored_exception", None)
    exc: Optional[BaseException] = pending if pending is not None else stored
    if exc is not None:
        if maybe_made and C.kestrel_error_outcome_unknown():
            said = C.kestrel_error_last().message
            _note(exc, ffi.string(said).decode("utf-8", "replace") if said != ffi.NULL else "")
        raise exc
    if rc == C.KESTREL_ENOMEM:
        raise MemoryError("libkestrel: out of memory")
    err: Any = C.kestrel_error_last()
    msg = ffi.string(err.message).decode("utf-8", "replace") if err.message != ffi.NULL else ""
    cls: type[KestrelError] = _BY_CODE.get(rc, KestrelError)
    raise cls(msg or f"error {rc}", rc, int(err.http_status), int(err.transport_code),
              bool(C.kestrel_error_outcome_unknown()))


def on_callback_error(exc_type: type, exc: BaseException, tb: object) -> int:
    """A signal (KeyboardInterrupt) fired before a trampoline's try: remember it, stop the call."""
    _tls.pending = exc
    return 1
