#!/usr/bin/env bash
# Build hepix's native extension (native/: hepix_seal, secret-key seeded CKKS encryption and the compact
# at-rest format) offline
# and cache the wheel outside the tracked tree.
#
#   tools/build_native.sh PYTHON CACHE_DIR
#
# Prints the path of the cached wheel.  The cache key covers the extension's sources, this
# script, the Python version and the installed Pyfhel's libseal-4.1.a, so a second run with
# nothing changed returns at once.  The build:
#   1. takes SEAL 4.1's headers from the Pyfhel 3.5.0 sdist (through pip, kept in CACHE_DIR),
#   2. runs a CMake *configure* (no compile) of that SEAL tree with the options Pyfhel builds
#      SEAL with, for the generated seal/util/config.h,
#   3. compiles native/src/*.cpp (hepix_seal.cpp, atrest.cpp) and links it to the libseal-4.1.a the installed Pyfhel
#      wheel ships -- the very library Pyfhel uses, so serialisations match byte for byte.
set -euo pipefail

PYFHEL_VERSION=3.5.0
py=${1:?usage: build_native.sh PYTHON CACHE_DIR}
cache=${2:?usage: build_native.sh PYTHON CACHE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

seal_lib=$("$py" -c 'import os, Pyfhel; print(os.path.join(os.path.dirname(Pyfhel.__file__), "libseal-4.1.a"))')
[[ -f "$seal_lib" ]] || { echo "build_native: $seal_lib not found; install Pyfhel ${PYFHEL_VERSION} first (tools/setup.sh)" >&2; exit 1; }

tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
key=$( { cat "$root"/native/pyproject.toml "$root"/native/setup.py "$root"/native/src/*.cpp "$root"/native/src/*.hpp "$0"; \
         sha256sum < "$seal_lib"; echo "$tag"; } | sha256sum | cut -c1-16)
dest="$cache/native/$key"
shopt -s nullglob
found=("$dest"/hepix_seal-*.whl)
if (( ${#found[@]} )); then
  echo "${found[0]}"
  exit 0
fi

# The sdist, fetched through pip once and kept.
mkdir -p "$cache/sdist"
sdist=("$cache"/sdist/[Pp]yfhel-${PYFHEL_VERSION}.tar.gz)
if (( ! ${#sdist[@]} )); then
  echo "build_native: downloading the Pyfhel ${PYFHEL_VERSION} sdist (for SEAL's headers)" >&2
  tmp=$(mktemp -d)
  "$py" -m pip download --quiet --no-deps --no-binary Pyfhel "Pyfhel==${PYFHEL_VERSION}" -d "$tmp" >&2
  got=("$tmp"/[Pp]yfhel-${PYFHEL_VERSION}.tar.gz)
  [[ -f "${got[0]}" ]] || { echo "build_native: pip downloaded no Pyfhel sdist" >&2; exit 1; }
  mv "${got[0]}" "$cache/sdist/.partial" && mv "$cache/sdist/.partial" "$cache/sdist/$(basename "${got[0]}")"
  rm -rf "$tmp"
  sdist=("$cache"/sdist/[Pp]yfhel-${PYFHEL_VERSION}.tar.gz)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
top=$(basename "${sdist[0]}" .tar.gz)
tar -xzf "${sdist[0]}" -C "$work" "$top/Pyfhel/backend/SEAL"
seal_src="$work/$top/Pyfhel/backend/SEAL"

echo "build_native: configuring SEAL (headers only) with Pyfhel's options" >&2
# The options of [cpplibraries.SEAL.cmake_opts] in Pyfhel's pyproject.toml, dependencies from
# Debian (as tools/patch_pyfhel_sdist.py arranges for the Pyfhel build).
cmake -S "$seal_src" -B "$work/seal-build" -DCMAKE_BUILD_TYPE=Release \
  -DSEAL_USE_INTEL_HEXL=OFF -DSEAL_USE_ALIGNED_ALLOC=OFF -DBUILD_SHARED_LIBS=OFF \
  -DSEAL_THROW_ON_TRANSPARENT_CIPHERTEXT=ON -DSEAL_USE_MSGSL=ON -DSEAL_USE_ZLIB=ON -DSEAL_USE_ZSTD=ON \
  -DSEAL_BUILD_DEPS=OFF >"$work/cmake.log" 2>&1 \
  || { cat "$work/cmake.log" >&2; echo "build_native: CMake configure of SEAL failed" >&2; exit 1; }
config="$work/seal-build/native/src/seal/util/config.h"
[[ -f "$config" ]] || { echo "build_native: CMake wrote no $config" >&2; exit 1; }

echo "build_native: compiling hepix_seal" >&2
cp -r "$root/native" "$work/native"
HEPIX_SEAL_INCLUDE="$seal_src/native/src:$work/seal-build/native/src" HEPIX_SEAL_LIB="$seal_lib" \
HEPIX_BUILD_KEY="$key" "$py" -m pip wheel --quiet --no-deps -w "$work/dist" "$work/native" >&2
built=("$work"/dist/hepix_seal-*.whl)
[[ -f "${built[0]}" ]] || { echo "build_native: pip wheel produced no wheel" >&2; exit 1; }
mkdir -p "$dest"
cp "${built[0]}" "$dest/.partial"
mv "$dest/.partial" "$dest/$(basename "${built[0]}")"
echo "$dest/$(basename "${built[0]}")"
