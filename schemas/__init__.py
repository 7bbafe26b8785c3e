"""Table schemas and the run manifest: the single source of truth for what hepix writes.

:mod:`schemas.tables` the product tables (what the jobs write), :mod:`schemas.stages` the Arrow
schemas between the stages of a job, :mod:`schemas.manifest` the run manifest.  The benchmarks'
tables are :mod:`bench.schemas`, in the benchmarks' own package.
"""
