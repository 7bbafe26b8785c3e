"""Real clusters on this machine's loopback, for the cluster suites of ``hepix bench`` and for the tests.

* :mod:`~bench.clusters.standalone` -- a Spark standalone master and workers from pyspark's own
  distribution, the archives of ``spark-submit/package.sh`` and the ``spark-submit/standalone.sh``
  command line of a job;
* :mod:`~bench.clusters.minidfs` -- HDFS: Hadoop's MiniDFSCluster, from Maven Central jars;
* :mod:`~bench.clusters.options` -- the options their JVMs and the applications submitted to them share:
  the short-lived JVMs' options, Spark's expressions interpreted, the event log, ``--conf`` pairs.

``hepix bench --suite cluster`` (and its ``--hdfs`` mode) starts its clusters with these, through
:mod:`bench.checkout`, which first checks that it runs from a checkout (the clusters run this checkout's
``spark-submit/`` scripts, which are not installed with the package).  The tests' cluster helpers
(``tests/sparkcluster.py``, ``tests/miniyarn.py``) and the HDFS, standalone and YARN tests import them
as any other module of the project.  Nothing here imports pytest or the tests' configuration: both sides
start the same clusters with the same options.
"""
