"""Python bindings for libkestrel.

Package skeleton only: the cffi API-mode module over include/kestrel.h, the
pythonic Client/Job layer and kestrel.keras are built by the Python binding issue.
Until then, use the `kestrel` CLI or the JSON API (see the README).
"""

__all__: list = []
