# setup.py — builds libvtpu (runtime/, plain C via its Makefile) and links it
# into the thin C++ binding vtpu._C.
#   VTPU_DEBUG=1       keep debug info (by default _C.so ships without it)
#   VTPU_SKIP_NATIVE=1 install the Python package only: the Makefile builds
#                      the extension itself, in place and incrementally
#                      (`python setup.py build_ext --inplace`, ninja)
import glob
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(ROOT, "runtime", "build", "libvtpu.a")
DEBUG = os.environ.get("VTPU_DEBUG", "0") not in ("", "0")
SKIP_NATIVE = os.environ.get("VTPU_SKIP_NATIVE", "0") not in ("", "0")


class BuildWithRuntime(BuildExtension):
    def run(self):
        subprocess.check_call(["make", "-C", os.path.join(ROOT, "runtime"), "lib", f"-j{os.cpu_count() or 2}"])
        super().run()


setup(
    ext_modules=[]
    if SKIP_NATIVE
    else [
        CppExtension(
            "vtpu._C",
            sorted(glob.glob("python/vtpu/csrc/*.cpp")),
            include_dirs=[os.path.join(ROOT, "runtime", "include")],
            extra_objects=[LIB],
            depends=[LIB],  # an edit to the runtime relinks
            # Python's own CFLAGS carry -g: the last flag wins
            extra_compile_args=["-O2", "-fvisibility=hidden"] + ([] if DEBUG else ["-g0"]),
            extra_link_args=[] if DEBUG else ["-Wl,--strip-debug"],
            libraries=["m", "rt", "dl"],
        )
    ],
    cmdclass={"build_ext": BuildWithRuntime},
)
