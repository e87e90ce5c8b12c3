"""Builds libcube with CMake from the repository this package sits in and
bundles it into the package (docs/python.md, "Installing").

What the build does, in order:
  - CUBE_LIBRARY is set: nothing is built or bundled; the package loads that
    library at run time.
  - The repository is found (CUBE_SOURCE_DIR, else the folder above this
    one holding cube's CMakeLists.txt): libcube.so is built there (CMake,
    Release, no tests or tools; CUBE_CMAKE_ARGS adds arguments) and copied
    into the package as cube/libcube.so.0.
  - Otherwise an installed libcube (make install) must be on the loader's
    path; the package uses it.
"""

import ctypes.util
import glob
import os
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def _repository():
    root = os.environ.get("CUBE_SOURCE_DIR") or os.path.dirname(HERE)
    cml = os.path.join(root, "CMakeLists.txt")
    if os.path.exists(cml):
        with open(cml, encoding="utf-8") as f:
            if "project(cube" in f.read():
                return root
    return None


class BuildWithLibcube(build_py):
    def run(self):
        super().run()
        if os.environ.get("CUBE_LIBRARY"):
            return
        root = _repository()
        if root is None:
            if ctypes.util.find_library("cube"):
                return
            raise RuntimeError("cube: no repository to build libcube from (set CUBE_SOURCE_DIR) "
                               "and no installed libcube (make install), or set CUBE_LIBRARY")
        build = os.path.join(os.path.abspath(self.build_lib), "..", "cube-cmake")
        cmake = shutil.which("cmake")
        if not cmake:
            raise RuntimeError("cube: cmake is needed to build libcube (Debian: make deps)")
        args = [cmake, "-S", root, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                "-DCUBE_BUILD_TESTS=OFF", "-DCUBE_BUILD_TOOLS=OFF"]
        args += shlex.split(os.environ.get("CUBE_CMAKE_ARGS", ""))
        subprocess.check_call(args)
        subprocess.check_call([cmake, "--build", build, "--target", "cube", "-j",
                               str(os.cpu_count() or 2)])
        libs = sorted(glob.glob(os.path.join(build, "libcube.so.*.*.*")))
        if not libs:
            raise RuntimeError(f"cube: the build left no libcube.so in {build}")
        dest = os.path.join(self.build_lib, "cube", "libcube.so.0")
        shutil.copyfile(libs[-1], dest)
        os.chmod(dest, 0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: it is not pure Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibcube}, distclass=BinaryDistribution)
