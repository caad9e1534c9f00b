"""Python bindings for libkestrel (cffi API mode over include/kestrel.h).

    import kestrel
    c = kestrel.Client()                       # KESTREL_URL / KESTREL_TOKEN or ~/.config/kestrel/config
    job = c.submit(["python", "train.py"], gpus=1, priority="high")
    for line in job.logs(follow=True):
        print(line.text)
    job.wait()
    kestrel.devices(); kestrel.select_devices(2, min_memory=40 << 30)

`kestrel.keras` (imported separately) holds the Keras callbacks.
"""
import atexit

from .errors import (AlreadyExistsError, AuthError, CancelledError, HTTPError, InvalidArgumentError, KestrelError,
                     KestrelIOError, KestrelTimeoutError, MisuseError, NetworkError, NotFoundError, ProtocolError,
                     TooLargeError, UnsupportedError, check)
from .ffi import C, ffi

check(C.kestrel_init())
atexit.register(C.kestrel_shutdown)

__version__: str = ffi.string(C.kestrel_version()).decode()
if C.kestrel_version_number() < C.KESTREL_VERSION_NUMBER:
    raise ImportError(f"libkestrel {__version__} is older than the headers this module was built with")

from .client import Client  # noqa: E402
from .gpu import GPU, Selection, devices, select_devices, use_devices  # noqa: E402
from .job import Event, Job, LogLine, Metric  # noqa: E402
from .logsearch import LogHit  # noqa: E402
from .repo import Progress, Version  # noqa: E402


def params() -> dict[str, str]:
    """The parameters this job was submitted with (--param / submit(params=)), as strings; {} outside
    a job."""
    import json
    import os
    found: dict[str, str] = json.loads(os.environ.get("KESTREL_PARAMS") or "{}")
    return found


__all__ = [
    "Client", "Job", "LogLine", "Metric", "Event", "Progress", "Version", "GPU", "Selection", "devices", "select_devices", "use_devices",
    "KestrelError", "InvalidArgumentError", "MisuseError", "NotFoundError", "AlreadyExistsError", "AuthError",
    "NetworkError", "HTTPError", "ProtocolError", "KestrelTimeoutError", "CancelledError", "UnsupportedError",
    "KestrelIOError", "TooLargeError", "params", "__version__",
]
