from setuptools import setup

setup(cffi_modules=["kestrel/_build.py:ffibuilder"])
