"""Build and install the plume Python package.

The package is a ctypes binding, so the only compiled part is libplume itself: build_py runs
the repository's Makefile (make, a C11 compiler and libcjson-dev and the image libraries
libpng-dev libjpeg62-turbo-dev libwebp-dev, as for the CLI) to build
libplume.so from ../src into ../build-python/ and puts a copy inside the package. Nothing is
downloaded: with Debian's python3-setuptools, `pip install ./python` works offline (there is
deliberately no pyproject.toml, so pip uses the installed setuptools instead of fetching one
into an isolated build environment).
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIBNAME = "libplume.dylib" if sys.platform == "darwin" else "libplume.so"


def readme():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return f.read()


def version():
    with open(os.path.join(ROOT, "include", "plume.h")) as f:
        return re.search(r'#define PLUME_VERSION "([^"]+)"', f.read()).group(1)


class BuildPyWithLibplume(build_py):
    """build_py, then `make` libplume.so and copy it into the package."""

    def run(self):
        super().run()
        if not os.path.exists(os.path.join(ROOT, "src", "model.c")):
            sys.exit("plume: build from the repository's python/ folder (it needs ../src)")
        jobs = os.environ.get("PLUME_JOBS", "2")
        build = os.environ.get("PLUME_BUILD", "build-python")  # make's folder (make check: its build/)
        cmd = ["make", "-C", ROOT, "-j" + jobs, "BUILD=" + build, build + "/" + LIBNAME]
        print(" ".join(cmd))
        subprocess.check_call(cmd)
        dst = os.path.join(self.build_lib, "plume")
        self.mkpath(dst)
        shutil.copy2(os.path.join(ROOT, build, LIBNAME), os.path.join(dst, LIBNAME))


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(
    name="plume",
    version=version(),
    description="Gemma 4 E2B/E4B on a CPU: Python binding of libplume",
    long_description=readme(),
    long_description_content_type="text/markdown",
    packages=["plume"],
    package_data={"plume": ["__init__.pyi", "py.typed"]},
    python_requires=">=3.8",
    install_requires=["numpy"],
    cmdclass={"build_py": BuildPyWithLibplume},
    distclass=BinaryDistribution,
    zip_safe=False,
)
