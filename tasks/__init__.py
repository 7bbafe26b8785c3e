"""What Spark's Python workers run, one module per stage: Arrow batches in, Arrow batches or files out.

The glue between Spark's ``mapInArrow``/``applyInArrow`` and :mod:`hecore`: rows are shaped after
:mod:`schemas`, everything cryptographic is a call into hecore.  Plain functions over pyarrow: this
package never imports pyspark nor :mod:`jobs` (the driver's side, which imports it and hands Spark these
functions)."""
