"""The compiled cffi module: `ffi` and the C library as `C`."""
from ._libkestrel import ffi, lib as C  # noqa: F401
