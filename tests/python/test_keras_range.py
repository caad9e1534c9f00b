"""The Keras versions kestrel.keras hooks (kestrel/keras_uri.py SUPPORTED) are the versions tested:
the oldest supported release runs the kestrel:// tests (test_keras_uri.py) in its own import path,
the newest is the one the other tests use, and a release below the range is refused with a warning
instead of being patched. Each old release is installed from PyPI into build/keras-range/ once."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("kestrel")
HERE = pathlib.Path(__file__).resolve().parent
CACHE = pathlib.Path(os.environ.get("KESTREL_KERAS_RANGE_DIR", HERE.parents[1] / "build" / "keras-range"))
# Keras 3.2-3.4 use np.Inf, gone in NumPy 2: they are tested with the NumPy of their time, and with
# an ml_dtypes that still loads on NumPy 1 (0.7 does not: "SystemError ... bcomplex32").
OLD_NUMPY = ["dm-tree", "numpy==1.26.4", "ml_dtypes==0.4.1"]
OLDEST = ("3.2.1", ["keras==3.2.1", *OLD_NUMPY])
BELOW = ("3.1.1", ["keras==3.1.1", *OLD_NUMPY])


def keras_path(version, reqs):
    target = CACHE / version
    stamp = " ".join(reqs) + "\n"
    if not (target / ".complete").exists() or (target / ".complete").read_text() != stamp:
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), *reqs],
                       check=True, timeout=600)
        (target / ".complete").write_text(stamp)
    return str(target)


def env_with(path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([path, env.get("PYTHONPATH", "")])
    return env


def test_the_oldest_supported_keras_passes_the_kestrel_uri_tests():
    env = env_with(keras_path(*OLDEST))
    v = subprocess.run([sys.executable, "-c", "import keras; print(keras.__version__)"], env=env,
                       capture_output=True, text=True, check=True).stdout.strip()
    assert v == OLDEST[0]
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                        str(HERE / "test_keras_uri.py")], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and " passed" in p.stdout and "skipped" not in p.stdout, p.stdout[-3000:]


def test_the_supported_range_is_the_tested_one():
    from kestrel import keras_uri
    import keras
    assert keras_uri.SUPPORTED[0] == tuple(int(x) for x in OLDEST[0].split(".")[:2])
    assert keras_uri.SUPPORTED[0] <= keras_uri._version(keras.__version__) < keras_uri.SUPPORTED[1]


def test_a_keras_below_the_range_is_refused_not_patched():
    env = env_with(keras_path(*BELOW))
    code = ("import warnings, keras\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import kestrel.keras\n"
            "from keras.src.saving import saving_api\n"
            "print(keras.__version__, saving_api.load_model.__module__, any('outside the tested range' in str(x.message) for x in w))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [BELOW[0], "keras.src.saving.saving_api", "True"], out.stdout
