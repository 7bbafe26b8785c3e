"""What runs inside Spark's Python workers, one module per stage: Arrow batches in, Arrow batches out.

The glue between Spark's ``mapInArrow``/``applyInArrow`` and :mod:`hecore`: rows are shaped after
:mod:`schemas`, everything cryptographic is a call into hecore."""
