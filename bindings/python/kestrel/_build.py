"""cffi out-of-line API-mode build of kestrel._libkestrel against include/kestrel.h.

Where libkestrel is found (pygit2's way): KESTREL_INCLUDEDIR / KESTREL_LIBDIR, else KESTREL_PREFIX
(default /usr/local), else `pkg-config kestrel`. An in-tree build passes the build tree's dirs and
gets an rpath to them.
"""
import os
import pathlib
import shlex
import subprocess

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent


def _dirs() -> tuple[list[str], list[str], bool]:
    inc = os.environ.get("KESTREL_INCLUDEDIR")
    lib = os.environ.get("KESTREL_LIBDIR")
    if inc and lib:
        return inc.split(os.pathsep), lib.split(os.pathsep), True
    prefix = os.environ.get("KESTREL_PREFIX")
    if prefix:
        return [os.path.join(prefix, "include")], [os.path.join(prefix, "lib")], True
    try:
        flags = shlex.split(subprocess.run(["pkg-config", "--cflags", "--libs", "kestrel"], check=True,
                                           capture_output=True, text=True).stdout)
        return ([f[2:] for f in flags if f.startswith("-I")], [f[2:] for f in flags if f.startswith("-L")], False)
    except (OSError, subprocess.CalledProcessError):
        return ["/usr/local/include"], ["/usr/local/lib"], False


include_dirs, library_dirs, rpath = _dirs()

ffibuilder = FFI()
ffibuilder.cdef((HERE / "decl" / "kestrel.h").read_text())
ffibuilder.set_source(
    "kestrel._libkestrel",
    "#include <kestrel.h>",
    libraries=["kestrel"],
    include_dirs=include_dirs,
    library_dirs=library_dirs,
    runtime_library_dirs=library_dirs if rpath else [],
    extra_compile_args=["-Werror=incompatible-pointer-types", "-Werror=int-conversion",
                        "-Werror=implicit-function-declaration"],
)

if __name__ == "__main__":
    import sys
    ffibuilder.compile(tmpdir=sys.argv[1] if len(sys.argv) > 1 else ".", verbose=False)
