"""Builds the package for pip: the project's CMake (two folders up) configures with
LOOM_PYTHON_BUNDLE_LIBLOOM, builds the extension and libloom, and installs its python component
into the wheel's folder: loom/ with _loom*.so, libloom.so.N beside it (found by $ORIGIN) and the
Python files. CMAKE_ARGS adds configure arguments; ccache is used where installed.
The CMake build folder is build-pip/ at the project's root: as deep as scripts/build.sh's build/,
so that ccache with a base_dir above the project (and hash_dir off) finds the objects build/
compiled, whose compile lines are then the same."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parents[2]


def version():
    header = (ROOT / "include/loom/loom.h").read_text()
    parts = [re.search(rf"#define LOOM_{p} (\d+)", header).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        prefix = Path(self.get_ext_fullpath(ext.name)).resolve().parent.parent
        build = ROOT / "build-pip"
        configure = ["-DLOOM_BUILD_TESTS=OFF", "-DLOOM_BUILD_PERF=OFF",
                     "-DLOOM_PYTHON_BUNDLE_LIBLOOM=ON", "-DLOOM_PYTHON_INSTALL_DIR=.",
                     f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        configure += os.environ.get("CMAKE_ARGS", "").split()
        for command in (["cmake", "-S", str(ROOT), "-B", str(build), *configure],
                        ["cmake", "--build", str(build), "--target", "loom_python_package",
                         "-j", str(os.cpu_count() or 1)],
                        ["cmake", "--install", str(build), "--component", "python",
                         "--prefix", str(prefix), "--strip"]):
            subprocess.run(command, check=True)


setup(version=version(), packages=["loom"],
      ext_modules=[Extension("loom._loom", sources=[])], cmdclass={"build_ext": CMakeBuild})
