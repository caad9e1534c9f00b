"""The compiled cffi module: `ffi` and the C library as `C`."""
from ._libkestrel import ffi, lib as C

__all__ = ["ffi", "C"]
