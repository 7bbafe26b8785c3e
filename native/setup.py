"""Build the ``hepix_seal`` extension (seeded secret-key encryption and the compact at-rest format) (see tools/build_native.sh, which sets the environment).

It is compiled against SEAL 4.1's headers from the Pyfhel 3.5.0 sdist, with the ``config.h``
a CMake configure of that source tree generates (the options Pyfhel builds SEAL with), and
linked statically to the ``libseal-4.1.a`` the installed Pyfhel wheel ships, so that its
ciphertexts are byte-compatible with Pyfhel's.  The SEAL symbols are kept private to the
extension (``--exclude-libs``) so that they never interpose on Pyfhel's own copy.

Environment:
  HEPIX_SEAL_INCLUDE  os.pathsep-separated include directories (SEAL sources, generated config.h)
  HEPIX_SEAL_LIB      path of libseal-4.1.a
  HEPIX_BUILD_KEY     identifies the sources and library the extension was built from
"""
import os

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"hepix-seal: {name} is not set; build with tools/build_native.sh")
    return value


include_dirs = [d for d in _env("HEPIX_SEAL_INCLUDE").split(os.pathsep) if d]
seal_lib = _env("HEPIX_SEAL_LIB")
build_key = os.environ.get("HEPIX_BUILD_KEY", "unknown")

ext = Pybind11Extension(
    "hepix_seal",
    ["src/hepix_seal.cpp", "src/atrest.cpp"],
    include_dirs=include_dirs,
    define_macros=[("HEPIX_BUILD_KEY", f'"{build_key}"')],
    extra_compile_args=["-O3"],
    extra_objects=[seal_lib],
    extra_link_args=["-Wl,--exclude-libs,ALL", "-lzstd", "-lz"],
    cxx_std=17,
)

setup(ext_modules=[ext])
