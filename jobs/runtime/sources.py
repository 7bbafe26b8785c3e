"""Reading the images a job is given: Spark's ``binaryFile`` source over a directory, glob or URI, or
over an exact list of files (a batch of a resumable encrypt)."""
from __future__ import annotations

from hecore.errors import HepixError


def read_images(spark, source: str, recursive: bool):
    from pyspark.errors import AnalysisException

    reader = spark.read.format("binaryFile")
    if recursive:
        reader = reader.option("recursiveFileLookup", "true")
    try:
        return reader.load(source)
    except AnalysisException as e:
        raise HepixError(f"cannot read images from {source}: {str(e).splitlines()[0]}") from None


def glob_escape(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped, so that it names exactly one file."""
    return "".join("\\" + c if c in "\\[]{}*?" else c for c in path)


def read_image_list(spark, paths: list[str]):
    """binaryFile rows of exactly ``paths`` (a batch), whatever characters their names hold."""
    return spark.read.format("binaryFile").load([glob_escape(p) for p in paths])
