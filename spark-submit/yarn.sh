#!/usr/bin/env bash
# Run a hepix job on YARN.
#
#   spark-submit/yarn.sh COMMAND [ARGS...]
#   spark-submit/yarn.sh encrypt --keys PUBLIC_KEYS --input hdfs:///corpus/2024 --out hdfs:///hepix/ct
#   HEPIX_DEPLOY_MODE=cluster spark-submit/yarn.sh process \
#       --keys PUBLIC_KEYS_ON_EVERY_NODE --input hdfs:///hepix/ct --out hdfs:///hepix/mean --op meanfilter:3
#
# Run spark-submit/package.sh first: every container gets hecore/jobs/schemas/tasks
# from dist/hepix-src.zip (--py-files) and Python with every dependency from
# dist/hepix-env.tar.gz, unpacked as ./env (--archives ...#env).  YARN
# distributes both through the application's staging directory.  Put the
# environment on HDFS once, readable by all, and name it in HEPIX_ENV_ARCHIVE
# (hdfs:///apps/hepix/hepix-env.tar.gz): it is then no longer uploaded with
# every application, and each NodeManager unpacks it once for all of them.
# Or, where the environment is already unpacked on every node
# (spark-submit/install-env.sh), name that directory in HEPIX_NODE_ENV: nothing
# is shipped, the containers run HEPIX_NODE_ENV/bin/python.
#
# Deploy mode (HEPIX_DEPLOY_MODE):
#   client (default)  the driver runs here, with the project's virtualenv;
#                     --keys is a path on this machine, progress prints here.
#   cluster           the driver runs in the YARN application master with the
#                     packed env (spark.yarn.appMasterEnv.PYSPARK_PYTHON);
#                     --keys must then exist on whichever node runs it (a
#                     shared mount), and the output is in the YARN logs.
# In both modes --input and --out are read and written by the executors, so
# they must be cluster paths (hdfs://, s3a://, ...).
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
#   HADOOP_CONF_DIR or YARN_CONF_DIR  the cluster's Hadoop configuration (required)
#   HEPIX_DEPLOY_MODE    client (default) or cluster
#   HEPIX_QUEUE          YARN queue (default: the cluster's default)
#   HEPIX_EXECUTORS      --num-executors (default: dynamic allocation or Spark's default)
#   HEPIX_EXECUTOR_MEMORY / HEPIX_EXECUTOR_CORES  --executor-memory / --executor-cores
#   HEPIX_ENV_ARCHIVE    the packed environment on the cluster (see above)
#   HEPIX_NODE_ENV       the environment install-env.sh unpacked on every node (see above)
#   SPARK_HOME / SPARK_SUBMIT  the cluster's Spark (default: the venv's pyspark)
#   HEPIX_DRIVER_MEMORY, HEPIX_VENV, HEPIX_DIST, HEPIX_PROPERTIES,
#   HEPIX_SPARK_OPTS, HEPIX_DRY_RUN: see common.sh
set -euo pipefail

hepix_script=yarn.sh
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "$0")/common.sh"

hepix_check_args \
  "needs HADOOP_CONF_DIR (or YARN_CONF_DIR) and the archives of spark-submit/package.sh" \
  "HEPIX_DEPLOY_MODE=client (default) or cluster" \
  "decrypt runs on the data owner's machine (spark-submit/local.sh), not here" \
  -- "$@"

mode=${HEPIX_DEPLOY_MODE:-client}
[[ $mode == client || $mode == cluster ]] \
  || hepix_die "HEPIX_DEPLOY_MODE must be client or cluster, got '$mode'"
[[ -n ${HADOOP_CONF_DIR:-}${YARN_CONF_DIR:-} ]] \
  || hepix_die "set HADOOP_CONF_DIR (or YARN_CONF_DIR) to the directory of the cluster's yarn-site.xml"
hepix_refuse_secret_jobs "$hepix_command" "$@"
hepix_need_dist
submit=$(hepix_cluster_spark_submit)
hepix_conf_args "$hepix_props"
hepix_extra_opts

resources=()
[[ -n ${HEPIX_QUEUE:-} ]] && resources+=(--queue "$HEPIX_QUEUE")
[[ -n ${HEPIX_EXECUTORS:-} ]] && resources+=(--num-executors "$HEPIX_EXECUTORS")
hepix_executor_opts

# The Python workers use the packed env; so does the driver in cluster mode.  An env
# already on every node is named in spark.pyspark.python too (it outranks PYSPARK_PYTHON
# wherever it is read), the client-mode driver's venv in spark.pyspark.driver.python.
export PYSPARK_PYTHON=$hepix_env_python
node_env_confs=()
[[ -n $hepix_node_env ]] && node_env_confs=(--conf "spark.pyspark.python=$hepix_env_python")
if [[ $mode == client ]]; then
  export PYSPARK_DRIVER_PYTHON
  PYSPARK_DRIVER_PYTHON=$(hepix_venv_python)
  [[ -n $hepix_node_env ]] && node_env_confs+=(--conf "spark.pyspark.driver.python=$PYSPARK_DRIVER_PYTHON")
else
  unset PYSPARK_DRIVER_PYTHON   # a local interpreter path means nothing in the application master
fi

# The packed env in the application master's and the executors' containers, and the job (common.sh).
hepix_packed_opts spark.yarn.appMasterEnv "$hepix_dist/hepix-src.zip" "$hepix_main" "${node_env_confs[@]}"
hepix_run "$submit" \
  --master yarn \
  --deploy-mode "$mode" \
  --name "hepix-$hepix_command" \
  --driver-memory "$hepix_driver_memory" \
  "${resources[@]}" \
  "${hepix_executor[@]}" \
  "${hepix_packed[@]}" "$@"
