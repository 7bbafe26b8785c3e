"""Table schemas and the run manifest: the single source of truth for what hepix writes.

:mod:`schemas.tables` the product tables (what the jobs write), :mod:`schemas.stages` the Arrow
schemas between the stages of a job, :mod:`schemas.manifest` the run manifest; what a file or document
read back from the cluster may claim before it is trusted: :mod:`schemas.footers` (a table file's Parquet
footer) and :mod:`schemas.jsondoc` (a manifest's or owner map's JSON).  The benchmarks'
tables are :mod:`bench.schemas`, in the benchmarks' own package.
"""
