"""Only the store's optional C extension; everything else is in pyproject.toml.

`optional=True`: without a C compiler the build goes on and the store runs its pure-Python
paths (common/native.py says which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("common._native", ["common/_native.c"], optional=True,
                  extra_compile_args=["-O2", "-std=c11"]),
    ],
)
