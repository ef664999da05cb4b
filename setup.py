# setup.py — builds libvtpu (runtime/, plain C via its Makefile) and links it
# into the thin C++ binding vtpu._C.
import glob
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(ROOT, "runtime", "build", "libvtpu.a")


class BuildWithRuntime(BuildExtension):
    def run(self):
        subprocess.check_call(["make", "-C", os.path.join(ROOT, "runtime"), "lib", f"-j{os.cpu_count() or 2}"])
        super().run()


setup(
    ext_modules=[
        CppExtension(
            "vtpu._C",
            sorted(glob.glob("python/vtpu/csrc/*.cpp")),
            include_dirs=[os.path.join(ROOT, "runtime", "include")],
            extra_objects=[LIB],
            extra_compile_args=["-O2", "-fvisibility=hidden"],
            libraries=["m", "rt"],
        )
    ],
    cmdclass={"build_ext": BuildWithRuntime},
)
