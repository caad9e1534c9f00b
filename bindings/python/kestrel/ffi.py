"""The compiled cffi module: `ffi` and the C library as `C`; `cstr`, a Python string as the C string
the library takes."""
from typing import Union

from ._libkestrel import ffi, lib as C

__all__ = ["ffi", "C", "cstr"]


def cstr(s: Union[str, bytes], what: str = "a string") -> bytes:
    """s as UTF-8 bytes for C. A NUL inside would cut it there, and the library would act on a shorter
    name, argument or value than the one given (a hostile test: argv "a\\0b" ran as "a", a metric
    "a\\0b" joined the series "a"): refused, as open() refuses it."""
    if isinstance(s, str):
        b = s.encode("utf-8")
    elif isinstance(s, (bytes, bytearray)):
        b = bytes(s)
    else:   # bytes(4) would be four NULs
        raise TypeError(f"{what}: expected str or bytes, not {type(s).__name__}")
    if b"\0" in b:
        raise ValueError(f"embedded null byte in {what}")
    return b
