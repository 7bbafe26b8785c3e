"""What every job runs on, on the driver: the run's preamble and commit (:mod:`.runs`), the Spark
session (:mod:`.session`), storage and remote key directories (:mod:`.storage`, :mod:`.remote`), the
input images (:mod:`.sources`), the owner map (:mod:`.owner`), the decisions over the row checks
(:mod:`.inputcheck`), encrypt's committed batches (:mod:`.batches`), a run's table files (:mod:`.tablefiles`),
the running Spark task (:mod:`.sparktask`), progress lines and console tables, run ids and versions.  The
commands (``jobs/*.py``) are thin over it; the code Spark's Python workers run is :mod:`tasks` (the row
checks themselves: :mod:`tasks.rowchecks`)."""
