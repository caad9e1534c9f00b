# The cffi module kestrel/_build.py compiles: its objects are untyped, as every cffi module's are.
from typing import Any

ffi: Any
lib: Any
