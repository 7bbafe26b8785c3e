#!/usr/bin/env bash
# Build what a cluster needs to run hepix:
#
#   dist/hepix-src.zip     the packages hecore, jobs, schemas and tasks, for --py-files
#   dist/hepix-env.tar.gz  a packed virtualenv with hepix's dependencies, for
#                          --archives dist/hepix-env.tar.gz#env (the executors
#                          then run PYSPARK_PYTHON=./env/bin/python)
#   dist/hepix_main.py     a copy of the application file, to upload beside
#                          the archives (spark-submit/k8s.sh takes all three
#                          from one URI)
#
#   spark-submit/package.sh [--src-only] [--with-pyspark] [--without DIST]... [--dist DIR]
#
# Idempotent: a second run rebuilds the zip, reinstalls hepix into the packing
# virtualenv and repacks it, but reuses the dependencies already installed
# there while pyproject.toml, the Pyfhel wheel and the options are unchanged.
# Every failure stops the script with a message saying what to do.
#
# Why a separate virtualenv: venv-pack refuses (or silently breaks) editable
# installs, and the project's .venv has hepix installed in editable mode
# (a .pth file pointing into this checkout, which executors do not have).  So
# hepix is built as a wheel from a clean copy of the checkout and installed
# NON-editably into dist/.pack-venv, together with the cached Pyfhel wheel
# (Pyfhel has no binary on the registry; tools/build_pyfhel.sh builds it once
# into $HEPIX_CACHE/wheels, default ~/.cache/hepix/wheels), and that
# virtualenv is what gets packed.
#
# What the packed env assumes of the cluster's machines:
#   * Python itself is not in the archive: a virtualenv's bin/python links to
#     the interpreter it was made from, at the same absolute path.  Install
#     the same Python (same minor version) at the same path on every node or
#     in the image, or set HEPIX_PYTHON_PREFIX to the prefix it has there
#     (the prefix of /usr/bin/python3.11 is /usr; like venv-pack's
#     --python-prefix, which this script does itself, see below).
#   * Pyfhel's wheel is built against Debian's zlib and zstd: the nodes need
#     the runtime libraries (zlib1g, libzstd1).
#   * pyspark and py4j are left out by default (--with-pyspark keeps them):
#     spark-submit puts the cluster's own pyspark on every driver's and
#     worker's PYTHONPATH, ahead of the env, so a copy in the archive would
#     be ~480 MB that is never imported.  The cluster's Spark must be 4.x.
#   * The dependencies' own test suites (their tests/ folders, ~130 MB that
#     nothing imports) are left out too.
#   * --without DIST leaves out one of hepix's dependencies (and what only it
#     brings): for clusters whose jobs never import it, say duckdb and
#     matplotlib (the notebooks' and reports' tools), scikit-learn (only
#     `process --op infer:...`), numba (only the pixel layout's kernels),
#     scikit-image (only decrypt's SSIM and the demo's sample images; with
#     scikit-learn also left out, SciPy goes too).
#
# Environment:
#   HEPIX_VENV           the project's virtualenv (default .venv); venv-pack is
#                        installed into it when missing
#   HEPIX_CACHE          cache directory of tools/setup.sh (default ~/.cache/hepix)
#   HEPIX_PYTHON_PREFIX  see above
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
venv=${HEPIX_VENV:-$root/.venv}
cache=${HEPIX_CACHE:-$HOME/.cache/hepix}
dist=$root/dist
src_only=0
with_pyspark=0
without=()
# The packages the jobs run on (pyproject.toml, [tool.setuptools.packages.find], less bench:
# the benchmarks run here, never on the cluster).
packages=(hecore jobs schemas tasks)

usage() {
  cat <<EOF
usage: spark-submit/package.sh [--src-only] [--with-pyspark] [--without DIST]... [--dist DIR]
  builds DIR/hepix-src.zip (--py-files) and DIR/hepix-env.tar.gz (--archives ...#env)
  --src-only      only the zip (seconds; no virtualenv is packed)
  --with-pyspark  keep pyspark and py4j in the packed env (left out by default)
  --without DIST  leave the dependency DIST out of the packed env (repeatable), for clusters whose jobs
                  never import it: duckdb, matplotlib, scikit-learn (infer only), numba (pixel layout only)
  --dist DIR      output directory (default: dist/ in the checkout)
EOF
}

die() {
  echo "package.sh: $*" >&2
  exit 1
}

while (( $# )); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --src-only) src_only=1 ;;
    --with-pyspark) with_pyspark=1 ;;
    --without) (( $# >= 2 )) || die "--without needs a distribution name"; without+=("${2,,}"); shift ;;
    --dist) (( $# >= 2 )) || die "--dist needs a directory"; dist=$2; shift ;;
    --dist=*) dist=${1#--dist=} ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
  shift
done

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=""
# Whatever way this ends, no half-written archive is left behind.
trap 'rm -rf ${work:+"$work"} "$dist/.hepix-src.zip.partial" "$dist/.hepix-env.tar.gz.partial"' EXIT

# Any Python >= 3.8 can write the zip; prefer the project's.
if [[ -x $venv/bin/python ]]; then
  py=$venv/bin/python
else
  (( src_only )) || die "no virtualenv at $venv: run 'make setup' first (or set HEPIX_VENV)"
  py=$(command -v python3) || die "python3 not found"
fi

for pkg in "${packages[@]}"; do
  [[ -f $root/$pkg/__init__.py ]] || die "$root/$pkg/__init__.py not found: is $root a hepix checkout?"
done

# --- the source zip ----------------------------------------------------------------
# Every file of the packages except bytecode and numba's cache, with
# fixed timestamps so the same sources give the same bytes.  Written beside
# the target and renamed, so a half-written zip is never left in its place.
echo "package.sh: building $dist/hepix-src.zip" >&2
"$py" - "$root" "$dist/.hepix-src.zip.partial" "${packages[@]}" <<'EOF'
import os
import sys
import zipfile

root, out, packages = sys.argv[1], sys.argv[2], sys.argv[3:]
skip_suffixes = (".pyc", ".pyo", ".nbi", ".nbc")
names = []
for pkg in packages:
    for d, dirs, files in os.walk(os.path.join(root, pkg)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not x.startswith("."))
        for f in sorted(files):
            if not f.endswith(skip_suffixes) and not f.startswith("."):
                names.append(os.path.relpath(os.path.join(d, f), root))
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for name in names:
        info = zipfile.ZipInfo(name.replace(os.sep, "/"), date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(os.path.join(root, name), "rb") as fh:
            z.writestr(info, fh.read())
print(f"package.sh: {len(names)} files", file=sys.stderr)
EOF
mv -f "$dist/.hepix-src.zip.partial" "$dist/hepix-src.zip"
cp -f "$here/hepix_main.py" "$dist/hepix_main.py"

if (( src_only )); then
  echo "package.sh: $dist/hepix-src.zip ($(du -h "$dist/hepix-src.zip" | cut -f1))"
  exit 0
fi

# --- the packed virtualenv -----------------------------------------------------------
pack=$dist/.pack-venv
work=$(mktemp -d)

# venv-pack, into the project's venv, on demand.
if ! "$py" -c 'import venv_pack' >/dev/null 2>&1; then
  echo "package.sh: installing venv-pack into $venv" >&2
  "$py" -m pip install --quiet venv-pack >&2 || die "could not install venv-pack (pip install venv-pack) into $venv"
fi
[[ -x $venv/bin/venv-pack ]] || die "venv-pack is installed but $venv/bin/venv-pack is missing"

# The Pyfhel wheel: cached by `make setup`; built now (minutes) if it is not.
pyfhel_wheel=$("$root/tools/build_pyfhel.sh" "$py" "$cache") \
  || die "no Pyfhel wheel in $cache/wheels and building one failed: run 'make setup' first"
[[ -f $pyfhel_wheel ]] || die "tools/build_pyfhel.sh named $pyfhel_wheel, which does not exist"

# hepix as a wheel, built from a clean copy (pip would otherwise leave build/
# and egg-info in the checkout).
mkdir -p "$work/src" "$work/wheel"
cp "$root/pyproject.toml" "$root/README.md" "$work/src/"
for pkg in "${packages[@]}"; do
  cp -R "$root/$pkg" "$work/src/$pkg"
done
find "$work/src" -name __pycache__ -type d -prune -exec rm -rf {} +
echo "package.sh: building the hepix wheel" >&2
"$py" -m pip wheel --quiet --no-deps -w "$work/wheel" "$work/src" >&2 || die "building the hepix wheel failed"
shopt -s nullglob
built=("$work"/wheel/hepix-*.whl)
(( ${#built[@]} == 1 )) || die "pip wheel produced ${#built[@]} hepix wheels, expected one"
hepix_wheel=${built[0]}

# hepix's run-time dependencies, from the wheel's metadata (no extras; pyspark
# and py4j left out unless --with-pyspark).
mapfile -t deps < <("$py" - "$hepix_wheel" "$with_pyspark" "${without[@]}" <<'EOF'
import re
import sys
import zipfile

wheel, with_pyspark, without = sys.argv[1], sys.argv[2] == "1", set(sys.argv[3:])
skip = (set() if with_pyspark else {"pyspark", "py4j"}) | without
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    text = z.read(meta).decode()
reqs = {}
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if "extra ==" in req:
        continue
    reqs[re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0].lower()] = req
unknown = sorted(without - set(reqs))
if unknown:
    print("!" + unknown[0])
for name, req in reqs.items():
    if name not in skip:
        print(req)
EOF
)
(( ${#deps[@]} )) || die "no dependencies found in $(basename "$hepix_wheel")'s metadata"
if [[ ${deps[0]} == "!"* ]]; then
  die "--without ${deps[0]#!}: not one of hepix's dependencies (see pyproject.toml)"
fi

# Recreate the packing venv only when what it is made of changes.
stamp=$("$py" - "$root/pyproject.toml" "$pyfhel_wheel" "$with_pyspark" "${without[@]}" <<'EOF'
import hashlib
import os
import sys

h = hashlib.sha256()
h.update(open(sys.argv[1], "rb").read())
h.update(os.path.basename(sys.argv[2]).encode())
h.update(" ".join(sys.argv[3:]).encode())
h.update(sys.version.encode())
print(h.hexdigest())
EOF
)
# (The stamp lives beside the venv, so it is not packed with it.)
if [[ ! -x $pack/bin/python || $(cat "$pack.stamp" 2>/dev/null) != "$stamp" ]]; then
  echo "package.sh: creating $pack and installing the dependencies (a few minutes the first time)" >&2
  rm -rf "$pack" "$pack.stamp"
  "$py" -m venv "$pack" || die "could not create a virtualenv at $pack"
  "$pack/bin/python" -m pip install --quiet --upgrade "pip>=24" >&2 || die "upgrading pip in $pack failed"
  "$pack/bin/python" -m pip install --quiet --find-links "$(dirname "$pyfhel_wheel")" \
    "$pyfhel_wheel" "${deps[@]}" >&2 || die "installing hepix's dependencies into $pack failed"
  echo "$stamp" >"$pack.stamp"
fi
echo "package.sh: installing hepix (non-editable) into $pack" >&2
"$pack/bin/python" -m pip install --quiet --no-deps --force-reinstall "$hepix_wheel" >&2 \
  || die "installing $(basename "$hepix_wheel") into $pack failed"
if "$pack/bin/python" -m pip show --quiet hepix 2>/dev/null | grep -qi "editable project location"; then
  die "hepix is installed in editable mode in $pack; venv-pack cannot pack that"
fi
# The dependencies' own test suites: nothing imports them on a cluster.
find "$pack/lib" -path '*/site-packages/*' -type d -name tests -prune -exec rm -rf {} +

# What executors import, with pyspark from where Spark puts it: PYTHONPATH.
pyspark_lib=$("$py" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "python", "lib"))')
spark_zips=("$pyspark_lib"/pyspark.zip "$pyspark_lib"/py4j-*-src.zip)
(( ${#spark_zips[@]} == 2 )) || die "expected pyspark.zip and one py4j zip in $pyspark_lib"
spark_pythonpath=$(IFS=:; echo "${spark_zips[*]}")
check='import Pyfhel, numpy, pyarrow, pandas, PIL, schemas.tables, jobs.cli, tasks.encrypt'
[[ " ${without[*]} " == *" scikit-image "* ]] || check+=', skimage'
[[ " ${without[*]} " == *" numba "* ]] || check+=', numba, hecore.seal.kernels'
check_where='import hecore, sys; assert "site-packages" in hecore.__file__, hecore.__file__'
# A driver in the cluster (YARN's cluster mode) builds hepix's parser, which imports every command's module.
check_parser='jobs.cli.build_parser()'

echo "package.sh: checking the packing venv" >&2
(cd "$work" && PYTHONPATH=$spark_pythonpath "$pack/bin/python" -c "$check; $check_where; $check_parser") \
  || die "the packing venv $pack cannot import hepix and its dependencies (see above)"

echo "package.sh: packing $dist/hepix-env.tar.gz" >&2
"$venv/bin/venv-pack" --quiet --force --prefix "$pack" --format tar.gz \
  --output "$dist/.hepix-env.tar.gz.partial" >&2 \
  || die "venv-pack failed on $pack"

# The archive as an executor sees it: unpacked as ./env, run as ./env/bin/python.
echo "package.sh: checking the archive" >&2
mkdir -p "$work/unpacked/env"
tar -xzf "$dist/.hepix-env.tar.gz.partial" -C "$work/unpacked/env" || die "the packed archive does not unpack"

# HEPIX_PYTHON_PREFIX: point the env at the interpreter the nodes have.  Done
# here on the unpacked copy, then packed again, because venv-pack 0.2.0's
# --python-prefix garbles the link of a Python >= 3.10 venv
# (PREFIX/bin/python3.113.11).
pyver=$("$pack/bin/python" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
if [[ -n ${HEPIX_PYTHON_PREFIX:-} ]]; then
  prefix=${HEPIX_PYTHON_PREFIX%/}
  [[ $prefix == /* ]] || die "HEPIX_PYTHON_PREFIX must be an absolute path, got '$HEPIX_PYTHON_PREFIX'"
  echo "package.sh: linking the env to $prefix/bin/$pyver" >&2
  ln -sfn "$prefix/bin/$pyver" "$work/unpacked/env/bin/$pyver"
  sed -i -e "s|^home = .*|home = $prefix/bin|" -e "s|^executable = .*|executable = $prefix/bin/$pyver|" \
    "$work/unpacked/env/pyvenv.cfg"
  mapfile -t top < <(cd "$work/unpacked/env" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)
  tar -czf "$dist/.hepix-env.tar.gz.partial" -C "$work/unpacked/env" "${top[@]}" \
    || die "repacking $dist/hepix-env.tar.gz failed"
fi
if [[ -e $work/unpacked/env/bin/python ]]; then
  (cd "$work/unpacked" && PYTHONPATH=$spark_pythonpath ./env/bin/python -c "$check; $check_where; $check_parser") \
    || die "the unpacked archive cannot import hepix and its dependencies (see above)"
else
  # Only with HEPIX_PYTHON_PREFIX: the interpreter it names is not on this machine.
  echo "package.sh: not checked by running it: the archive's python links to" \
    "$(readlink "$work/unpacked/env/bin/$pyver" || echo '?'), which this machine does not have" >&2
fi
chmod 644 "$dist/.hepix-env.tar.gz.partial"
mv -f "$dist/.hepix-env.tar.gz.partial" "$dist/hepix-env.tar.gz"

echo "package.sh: $dist/hepix-src.zip ($(du -h "$dist/hepix-src.zip" | cut -f1)), $dist/hepix-env.tar.gz ($(du -h "$dist/hepix-env.tar.gz" | cut -f1))"
