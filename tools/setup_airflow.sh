#!/usr/bin/env bash
# The Airflow virtualenv for conf/airflow/hepix_nightly.py and its test, built once and cached:
#
#   tools/setup_airflow.sh CACHE_DIR            build it if missing; print its python
#   tools/setup_airflow.sh CACHE_DIR --check    print its python if it is built, else exit 1
#
# It lives in CACHE_DIR/airflow/<key>/venv, the key covering conf/airflow/requirements.txt, this script and
# the Python version, so a changed pin builds a new one beside the old.  Apart from hepix's .venv because
# Airflow pins its own dependency tree (see conf/airflow/requirements.txt).  A finished build is marked by
# a stamp written last, so an interrupted one is redone.  The Spark provider is installed without its
# dependencies (pyspark-client, never imported); the build ends by importing what the DAG imports.
set -euo pipefail

cache=${1:?usage: tools/setup_airflow.sh CACHE_DIR [--check]}
mode=${2:-build}
here=$(cd "$(dirname "$0")" && pwd)
reqs=$here/../conf/airflow/requirements.txt
py_sys=${PYTHON:-python3}
key=$(cat "$reqs" "$0" <("$py_sys" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
dir=$cache/airflow/$key
py=$dir/venv/bin/python

if [[ -f $dir/.built ]]; then
  echo "$py"
  exit 0
fi
[[ $mode == --check ]] && exit 1
[[ $mode == build ]] || { echo "setup_airflow: unknown option '$mode' (only --check)" >&2; exit 2; }

mkdir -p "$cache/airflow"
(
  flock 9
  [[ -f $dir/.built ]] && exit 0
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "setup: building the Airflow virtualenv in $dir (a minute with a warm pip cache)" >&2
  "$py_sys" -m venv "$dir/venv"
  "$py" -m pip install --quiet --upgrade "pip>=24" >&2
  grep -v '^apache-airflow-providers-apache-spark' "$reqs" > "$dir/core.txt"
  "$py" -m pip install --quiet -r "$dir/core.txt" >&2
  "$py" -m pip install --quiet --no-deps "$(grep '^apache-airflow-providers-apache-spark' "$reqs")" >&2
  AIRFLOW_HOME=$dir/check "$py" -c 'from airflow.sdk import DAG, BaseOperator, CronDataIntervalTimetable, Param
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator' >&2
  rm -rf "$dir/check"
  touch "$dir/.built"
) 9>"$cache/airflow/.lock"
echo "$py"
