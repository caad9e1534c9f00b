"""The model repository from Python: push, pull, versions, aliases (file:// or a kestreld)."""
import json
import sys
import time
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._html import HtmlList
from .errors import check, on_callback_error
from .ffi import C, cstr, ffi

if TYPE_CHECKING:
    from .client import Client

class Version(namedtuple("Version", "version size sha256 created_ms chunks aliases metadata")):
    """One version of a model."""
    __slots__ = ()

    def _repr_html_(self) -> str:
        return Versions([self])._repr_html_()


class Versions(HtmlList):
    """A model's versions, oldest first (a table in Jupyter)."""
    HEADERS = ("version", "size", "created", "aliases", "sha256", "metadata")

    @staticmethod
    def row(v: Version) -> Sequence[Any]:
        """One table row of a version."""
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.created_ms / 1000))
        return (v.version, f"{v.size / 1048576:.1f} MiB", created, ", ".join(v.aliases), v.sha256[:12],
                json.dumps(v.metadata))
Progress = namedtuple("Progress", "phase bytes_done bytes_total bytes_new chunks_done chunks_new")


class _Payload:
    def __init__(self, fn: Callable[[Progress], None]) -> None:
        self.fn = fn
        self.stored_exception: Optional[BaseException] = None


@ffi.def_extern(onerror=on_callback_error)  # type: ignore[untyped-decorator]  # cffi is untyped
def _kestrel_progress_tramp(p: Any, payload: Any) -> int:
    sink = ffi.from_handle(payload)
    try:
        sink.fn(Progress("push" if p.phase == C.KESTREL_PHASE_PUSH else "pull", p.bytes_done, p.bytes_total,
                         p.bytes_new, p.chunks_done, p.chunks_new))
        return 0
    except BaseException as e:   # KeyboardInterrupt stops the transfer and comes back as itself
        sink.stored_exception = e
        return int(C.KESTREL_EUSER)


def _c(s: Any, what: str) -> bytes:
    """s as the C string the library takes: a NUL inside would cut it there, and the library would act
    on a shorter name, alias or path than the one given (as open() does, refused)."""
    return cstr(str(s), what)


def _quiet(p: Progress) -> None:
    """The progress callback when none is wanted (a script, no terminal)."""


def _bar(desc: str) -> Tuple[Any, Optional[Callable[[Progress], None]]]:
    """A tqdm bar when tqdm is there and we are in a terminal or notebook, else nothing."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None, None
    if not (sys.stderr.isatty() or "ipykernel" in sys.modules):
        return None, None
    bar = tqdm(total=0, unit="B", unit_scale=True, desc=desc)

    def update(p: Progress) -> None:
        bar.total = max(p.bytes_total, 0)
        bar.n = p.bytes_done
        bar.refresh()
    return bar, update


def _options(progress: Optional[Callable[[Progress], None]], keep: List[Any], metadata: Optional[Dict[str, Any]] = None,
             alias: Optional[str] = None, desc: str = "") -> Tuple[Any, Optional[_Payload], Any]:
    opts = ffi.new("kestrel_transfer_options *")
    check(C.kestrel_transfer_options_init(opts, C.KESTREL_TRANSFER_OPTIONS_VERSION))
    bar = None
    if progress is None:
        bar, progress = _bar(desc)
    if progress is None:   # still called: Python runs its signal handlers then, so Ctrl-C stops the transfer
        progress = _quiet
    payload = None
    if progress is not None:
        payload = _Payload(progress)
        handle = ffi.new_handle(payload)
        keep.append(handle)
        opts.progress = C._kestrel_progress_tramp
        opts.progress_payload = handle
    if metadata is not None:
        keep.append(ffi.new("char[]", json.dumps(metadata).encode()))
        opts.metadata_json = keep[-1]
    if alias:
        keep.append(ffi.new("char[]", _c(alias, "alias")))
        opts.alias = keep[-1]
    return opts, payload, bar


def _raise_stored(payload: object) -> None:
    """An exception the progress callback raised at the last report, which comes once the transfer is
    complete (the version committed, dest in place) and so could not stop it, still comes back."""
    stored = getattr(payload, "stored_exception", None)
    if stored is not None:
        setattr(payload, "stored_exception", None)
        raise stored


def push(client: "Client", name: str, path: str, *, alias: Optional[str] = None, metadata: Optional[Dict[str, Any]] = None,
         progress: Optional[Callable[[Progress], None]] = None) -> int:
    """Push path (a file or a directory) as the next version of name; only chunks the server lacks travel. Returns the new version number."""
    keep: List[Any] = []
    opts, payload, bar = _options(progress, keep, metadata, alias, f"push {name}")
    out = ffi.new("int64_t *")
    try:
        with client._lock:
            C.kestrel_error_clear()   # what the push records is its own (check's maybe_made)
            rc = C.kestrel_model_push(out, client._p(), _c(name, "name"), _c(path, "path"), opts)
        check(rc, payload, maybe_made=True)
        _raise_stored(payload)
    finally:
        if bar is not None:
            bar.close()
    return int(out[0])


def push_code(client: "Client", directory: str, *, max_bytes: Optional[int] = None, name: Optional[str] = None) -> str:
    """Snapshot directory (what git would keep: .gitignore and .kestrelignore honoured) as the next
    version of USER/code/DIRNAME (or name); the exact reference, e.g. "alice/code/proj@4"."""
    opts = ffi.new("kestrel_code_options *")
    check(C.kestrel_code_options_init(opts, C.KESTREL_CODE_OPTIONS_VERSION))
    keep: List[Any] = []
    if max_bytes:
        opts.max_bytes = int(max_bytes)
    if name:
        keep.append(ffi.new("char[]", _c(name, "name")))
        opts.name = keep[-1]
    buf = ffi.new("kestrel_buf *")
    try:
        with client._lock:
            check(C.kestrel_code_push(buf, client._p(), _c(directory, "directory"), opts))
        return str(ffi.string(buf.ptr).decode())
    finally:
        C.kestrel_buf_dispose(buf)


def pull(client: "Client", ref: str, dest: str, *, progress: Optional[Callable[[Progress], None]] = None) -> str:
    """Pull ref (NAME, NAME@N or NAME@ALIAS) to dest, every byte verified; returns dest."""
    keep: List[Any] = []
    opts, payload, bar = _options(progress, keep, desc=f"pull {ref}")
    try:
        with client._lock:
            rc = C.kestrel_model_pull(client._p(), _c(ref, "ref"), _c(dest, "dest"), opts)
        check(rc, payload)
        _raise_stored(payload)
    finally:
        if bar is not None:
            bar.close()
    return str(dest)


def versions(client: "Client", name: str, one: bool = False) -> List[Version]:
    """name's versions, oldest first; one: the version the ref name names alone (KESTREL_ENOTFOUND: none)."""
    out = ffi.new("kestrel_model_versions **")
    with client._lock:
        check((C.kestrel_model_version_get if one else C.kestrel_model_versions_get)(out, client._p(), _c(name, "name")))
    vl = ffi.gc(out[0], C.kestrel_model_versions_free)
    s: Callable[[Any], str] = lambda p: str(ffi.string(p).decode())  # noqa: E731
    return Versions(Version(v.version, v.size, s(v.sha256), v.created_ms, v.chunks,
                            [a for a in s(v.aliases).split(",") if a], json.loads(s(v.metadata_json)))
                    for v in (C.kestrel_model_versions_at(vl, i) for i in range(C.kestrel_model_versions_count(vl))))


def models(client: "Client") -> List[str]:
    """The names of the models the caller may read."""
    buf = ffi.new("kestrel_buf *")
    try:
        with client._lock:
            check(C.kestrel_model_list(buf, client._p()))
        return [str(n) for n in ffi.string(buf.ptr).decode().split("\n") if n] if buf.ptr != ffi.NULL else []
    finally:
        C.kestrel_buf_dispose(buf)


def set_alias(client: "Client", name: str, alias: str, version: int) -> None:
    """Point name@alias at version."""
    with client._lock:
        check(C.kestrel_model_alias_set(client._p(), _c(name, "name"), _c(alias, "alias"), int(version)))


GcResult = namedtuple("GcResult", "chunks_live chunks_removed temps_removed bytes_freed")


def gc(client: "Client", grace_s: Optional[int] = None) -> GcResult:
    """Collect the repository (kestrel_repo_gc): a file:// store here, a kestreld as an admin."""
    out = ffi.new("kestrel_repo_gc_result *")
    out.version = 1
    with client._lock:
        check(C.kestrel_repo_gc(client._p(), -1 if grace_s is None else int(grace_s), out))
    return GcResult(out.chunks_live, out.chunks_removed, out.temps_removed, out.bytes_freed)


def delete(client: "Client", name: str, version: int) -> None:
    """Delete one version of name."""
    with client._lock:
        check(C.kestrel_model_delete(client._p(), _c(name, "name"), int(version)))
