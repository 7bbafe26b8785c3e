#!/usr/bin/env bash
# Idempotent setup: Debian packages (only if missing), a virtualenv, the
# cached Pyfhel wheel, then the project in editable mode with its test and bench extras, and
# the native extensions (tools/build_native.sh, tools/build_tfhe.sh, cached likewise).
#
#   tools/setup.sh VENV CACHE_DIR
set -euo pipefail

venv=${1:-.venv}
cache=${2:-${HEPIX_CACHE:-$HOME/.cache/hepix}}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

# --- Debian packages ---------------------------------------------------------
# GSL, zlib and zstd headers for the offline Pyfhel build; a JRE for Spark.
need=()
for pkg in libmsgsl-dev zlib1g-dev libzstd-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
if (( ${#need[@]} )); then
  echo "setup: installing Debian packages: ${need[*]}" >&2
  sudo_=""; [[ $(id -u) -eq 0 ]] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}"
fi

# --- virtualenv ----------------------------------------------------------------
py_sys=${PYTHON:-python3}
if [[ ! -x "$venv/bin/python" ]]; then
  "$py_sys" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || { echo "setup: hepix needs Python >= 3.11; $py_sys is $("$py_sys" --version)" >&2; exit 1; }
  echo "setup: creating $venv" >&2
  "$py_sys" -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install --quiet --upgrade "pip>=24" >&2

# --- Pyfhel (built offline once, cached outside the tree) ---------------------
if ! "$py" -c 'import Pyfhel' >/dev/null 2>&1; then
  wheel=$("$here/build_pyfhel.sh" "$py" "$cache")
  echo "setup: installing $wheel" >&2
  "$py" -m pip install --quiet "$wheel" >&2
fi

# --- the project -----------------------------------------------------------------
echo "setup: installing hepix (editable) and its dependencies" >&2
# The bench extra (TenSEAL, a baseline of `hepix bench --suite packed`) from binary wheels only;
# where none exists for this Python, hepix is installed without it and that suite skips TenSEAL.
if ! "$py" -m pip install --quiet --only-binary tenseal -e "$root[test,bench]" >&2; then
  echo "setup: no TenSEAL wheel for this Python; installing without the bench extra" >&2
  "$py" -m pip install --quiet -e "$root[test]" >&2
fi
# --- the native extension (hecore.encrypt.symmetric: secret-key seeded encryption) ---------------------
# Compiled offline against the SEAL library the Pyfhel wheel ships; cached by a key over its
# sources (tools/build_native.sh).  Reinstalled only when the installed build is another one.
native_wheel=$("$here/build_native.sh" "$py" "$cache")
native_key=$(basename "$(dirname "$native_wheel")")
if [[ "$("$py" -c 'import hepix_seal; print(hepix_seal.BUILD_KEY)' 2>/dev/null)" != "$native_key" ]]; then
  echo "setup: installing $native_wheel" >&2
  "$py" -m pip install --quiet --force-reinstall --no-deps "$native_wheel" >&2
fi
# --- the TFHE extension (hecore.tfhe: tfhe-rs through PyO3) -------------------------------------
# Built with maturin (from PyPI) and tfhe-rs (from crates.io); the first build compiles tfhe-rs
# (9 to 15 minutes on 2 cores, depending on load), then it is cached by a key over its sources and the Rust
# toolchain (tools/build_tfhe.sh).  Reinstalled only when the installed build is another one.
tfhe_wheel=$("$here/build_tfhe.sh" "$py" "$cache")
tfhe_key=$(basename "$(dirname "$tfhe_wheel")")
if [[ "$("$py" -c 'import hepix_tfhe; print(hepix_tfhe.BUILD_KEY)' 2>/dev/null)" != "$tfhe_key" ]]; then
  echo "setup: installing $tfhe_wheel" >&2
  "$py" -m pip install --quiet --force-reinstall --no-deps "$tfhe_wheel" >&2
fi
"$py" -c 'import Pyfhel, pyspark, numba, hecore, hepix_seal, hepix_tfhe' >&2
# --- Spark's class-data archive (jobs/classarchive.py, jobs/runtime/jvmarchive.py): faster JVM start-up -----
# Written once per Java and pyspark installation by running hepix's jobs on a generated image (~50 s); a job
# started without it runs the same, only its JVM starts slower.
if ! HEPIX_CACHE=$cache "$py" -m jobs.classarchive >&2; then
  echo "setup: WARNING: no class-data archive for Spark (jobs/classarchive.py): jobs start without it" >&2
fi
# --- Airflow (conf/airflow/hepix_nightly.py and its test), in a virtualenv of its own, cached -------------
# Not hepix's: Airflow pins its own dependency tree.  A failed build does not fail hepix's setup: the DAG's
# test then skips, saying so.
if ! PYTHON=$py_sys "$here/setup_airflow.sh" "$cache" >/dev/null; then
  echo "setup: WARNING: the Airflow virtualenv could not be built (tools/setup_airflow.sh); tests/test_airflow_dag.py will skip" >&2
fi
echo "setup: done ($("$py" -c 'import Pyfhel,pyspark; print("Pyfhel", Pyfhel.__version__, "/ pyspark", pyspark.__version__)'))" >&2
