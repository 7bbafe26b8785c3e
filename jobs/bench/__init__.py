"""``hepix bench`` and ``hepix report``: the measurements, their tables and the report.

* :mod:`~jobs.bench.command` -- ``hepix bench``: the options, and the dispatch to a suite;
* :mod:`~jobs.bench.suites` -- one module per suite (measurement and command-line side), listed in
  :data:`jobs.bench.suites.SUITES`; :mod:`~jobs.bench.suites.paper` holds the papers' experiments
  of the default suite;
* :mod:`~jobs.bench.report` -- ``hepix report``: plots and Markdown from the tables;
* shared pieces: :mod:`~jobs.bench.rows` (records and the one Parquet writer),
  :mod:`~jobs.bench.seeds` (the papers' reference figures, each with its source),
  :mod:`~jobs.bench.datasets` (the data sets and sample images), :mod:`~jobs.bench.contexts`
  (throwaway keys per preset), :mod:`~jobs.bench.timing` (medians, the encryption split, one core),
  :mod:`~jobs.bench.peakmem` (peak memory per stage), :mod:`~jobs.bench.detect` (watermark detection).

The library (:mod:`hecore`) never imports anything from here.
"""
