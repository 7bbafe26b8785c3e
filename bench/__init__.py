"""``hepix bench`` and ``hepix report``: the measurements, their tables and the report.

* :mod:`~bench.command` -- ``hepix bench``: the options, and the dispatch to a suite;
* :mod:`~bench.suites` -- one module per suite (measurement and command-line side), listed in
  :data:`bench.suites.SUITES`; :mod:`~bench.suites.paper` holds the papers' experiments
  of the default suite;
* :mod:`~bench.report` -- ``hepix report``: plots and Markdown from the tables;
* shared pieces: :mod:`~bench.rows` (records and the one Parquet writer),
  :mod:`~bench.seeds` (the papers' reference figures, each with its source),
  :mod:`~bench.datasets` (the data sets and sample images), :mod:`~bench.contexts`
  (throwaway keys per preset), :mod:`~bench.timing` (medians, the encryption split, one core),
  :mod:`~bench.peakmem` (peak memory per stage), :mod:`~bench.detect` (watermark detection);
* :mod:`~bench.clusters` -- the clusters the cluster suites run on (a Spark standalone cluster and
  Hadoop's MiniDFSCluster on loopback, and the options their applications are submitted with), which
  the tests start too.

A package of its own beside :mod:`jobs`, :mod:`hecore` and :mod:`schemas`: neither the library
(:mod:`hecore`) nor the jobs import anything from here; ``jobs/cli.py`` routes ``hepix bench`` and
``hepix report`` to :mod:`~bench.command` and :mod:`~bench.report` by name, when they run.
"""
