#!/usr/bin/env bash
# Run a hepix job on a Spark standalone cluster.
#
#   SPARK_MASTER_URL=spark://HOST:7077 spark-submit/standalone.sh COMMAND [ARGS...]
#   SPARK_MASTER_URL=spark://HOST:7077 spark-submit/standalone.sh process \
#       --keys PUBLIC_KEYS --input hdfs:///hepix/ct --out hdfs:///hepix/bright --op brightness:20
#
# Run spark-submit/package.sh first: the executors get hecore/jobs/schemas/tasks from
# dist/hepix-src.zip (--py-files) and Python with every dependency from
# dist/hepix-env.tar.gz, unpacked as ./env (--archives ...#env,
# PYSPARK_PYTHON=./env/bin/python) by every application, on the driver and on each
# executor.  Unpack it once per node instead with spark-submit/install-env.sh and
# name the directory it prints in HEPIX_NODE_ENV: nothing is then shipped or
# unpacked per application, and the Python workers run HEPIX_NODE_ENV/bin/python
# (spark.pyspark.python).
#
# The driver runs here, in client mode (a standalone cluster cannot run a
# Python driver in cluster mode), with the project's virtualenv.  --keys is
# read by the driver only (the key material reaches the executors as a
# broadcast), so it is a path on this machine; --input and --out are read and
# written by the executors, so they must be a path every node sees
# (hdfs://, s3a://, or a shared mount).  On a shared mount, `encrypt --writer
# workers` has the Python workers write the ciphertext files there themselves
# (the executors' JVMs then move no ciphertext bytes); the driver checks that
# it sees every file they report.
#
# Trust boundary: the cluster is where the secret key must never be.
# `encrypt` (public-key, the default) reads only the public part of a key
# directory; `process` must be given a public-only directory (`hepix
# export-public`) and refuses one that holds secret.key.  `decrypt` and
# `encrypt --encryption symmetric` read secret.key and send it to every
# executor: run them on the data owner's trusted machine with
# spark-submit/local.sh.  This script refuses decrypt, encrypt --encryption
# symmetric, keygen and export-public unless HEPIX_TRUSTED_CLUSTER=1, which it
# then hands to the driver (hepix refuses a non-local master for those jobs
# without it, wherever the driver runs).
#
# Environment:
#   SPARK_MASTER_URL     spark://HOST:PORT of the master (required)
#   SPARK_HOME / SPARK_SUBMIT  the cluster's Spark (default: the venv's pyspark)
#   HEPIX_TOTAL_CORES    --total-executor-cores (default: what the master gives)
#   HEPIX_EXECUTOR_MEMORY  --executor-memory (default: Spark's)
#   HEPIX_NODE_ENV       the environment install-env.sh unpacked on every worker node
#   HEPIX_ENV_ARCHIVE    the packed environment at a URL the workers fetch (see common.sh)
#   HEPIX_DRIVER_MEMORY, HEPIX_VENV, HEPIX_DIST, HEPIX_PROPERTIES,
#   HEPIX_SPARK_OPTS, HEPIX_DRY_RUN: see common.sh
set -euo pipefail

hepix_script=standalone.sh
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "$0")/common.sh"

hepix_check_args \
  "needs SPARK_MASTER_URL=spark://HOST:7077 and the archives of spark-submit/package.sh" \
  "decrypt runs on the data owner's machine (spark-submit/local.sh), not here" \
  -- "$@"

[[ -n ${SPARK_MASTER_URL:-} ]] || hepix_die "set SPARK_MASTER_URL to the master's URL, spark://HOST:7077"
[[ $SPARK_MASTER_URL == spark://* ]] \
  || hepix_die "SPARK_MASTER_URL must be spark://HOST:PORT, got '$SPARK_MASTER_URL'"
hepix_refuse_secret_jobs "$hepix_command" "$@"
hepix_need_dist
py=$(hepix_venv_python)
submit=$(hepix_cluster_spark_submit)
hepix_conf_args "$hepix_props"
hepix_extra_opts

resources=()
[[ -n ${HEPIX_TOTAL_CORES:-} ]] && resources+=(--total-executor-cores "$HEPIX_TOTAL_CORES")
[[ -n ${HEPIX_EXECUTOR_MEMORY:-} ]] && resources+=(--executor-memory "$HEPIX_EXECUTOR_MEMORY")

# The driver: this machine's venv.  The Python workers: the packed env, unpacked by
# each application or already on every node (then named in spark.pyspark.python,
# which outranks PYSPARK_PYTHON wherever it is read; the driver's is kept apart).
export PYSPARK_DRIVER_PYTHON=$py
export PYSPARK_PYTHON=$hepix_env_python
node_env_confs=()
[[ -n $hepix_node_env ]] && node_env_confs=(--conf "spark.pyspark.python=$hepix_env_python"
                                            --conf "spark.pyspark.driver.python=$py")

# XDG_CACHE_HOME: hecore's numba kernels cache their machine code; imported
# from the --py-files zip, numba caches under $XDG_CACHE_HOME/numba (default
# ~/.cache), which the executors' user may not be able to write.  Keep it in
# the executor's working directory.
hepix_run "$submit" \
  --master "$SPARK_MASTER_URL" \
  --deploy-mode client \
  --name "hepix-$hepix_command" \
  --driver-memory "$hepix_driver_memory" \
  "${resources[@]}" \
  "${hepix_archive_opts[@]}" \
  --py-files "$hepix_dist/hepix-src.zip" \
  --conf "spark.executorEnv.PYSPARK_PYTHON=$hepix_env_python" \
  "${node_env_confs[@]}" \
  --conf spark.executorEnv.XDG_CACHE_HOME=.cache \
  "${hepix_confs[@]}" \
  "${hepix_extra[@]}" \
  "$hepix_main" "$@"
