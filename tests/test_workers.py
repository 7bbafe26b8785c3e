"""Broadcast cache tables and pools are rebuilt once per Python worker, not once per task.

Runs the encrypt job on ``local-cluster[2,1,1024]`` (two executor JVMs with
one core each, so two Python workers) with more tasks than workers, and reads
what the job's accumulators recorded in the manifest.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from jobs.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    rng = np.random.default_rng(7)
    images = root / "images"
    images.mkdir()
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, size=(16, 16), dtype=np.uint8)).save(images / f"img{i}.png")
    assert main(["keygen", "--out", str(root / "keys"), "--preset", "addonly-2048"]) == 0
    return root


#: Spark starts scheduling once enough executors registered (by default: at once, as no core count is
#: expected); on a loaded machine the second executor JVM can come up after every task ran on the first.
#: Expecting both cores makes the job wait for both executors, so that two Python workers are certain.
BOTH_EXECUTORS = """\
spark.cores.max 2
spark.scheduler.minRegisteredResourcesRatio 1.0
spark.scheduler.maxRegisteredResourcesWaitingTime 600s
"""


def test_cache_is_rebuilt_once_per_python_worker_not_per_task(corpus):
    out = corpus / "enc"
    conf = corpus / "both-executors.conf"
    conf.write_text(BOTH_EXECUTORS)
    code = main(["encrypt", "--layout", "pixel", "--keys", str(corpus / "keys"), "--input", str(corpus / "images"), "--out", str(out),
                 "--tile", "4x4", "--strategy", "full", "--allow-leaky", "--pool-size", "8",
                 "--partitions", "12", "--master", "local-cluster[2,1,1024]", "--conf", str(conf), "--quiet"])
    assert code == 0
    workers = json.loads((out / "_manifest.json").read_text())["workers"]
    assert workers["tasks"] == 12
    assert workers["python_workers"] == 2                 # two executors, one core each
    assert workers["cache_rebuilds"] == workers["python_workers"]
    assert sorted(workers["rebuild_pids"]) == sorted(set(workers["rebuild_pids"]))
    assert workers["cache_rebuilds"] < workers["tasks"]
