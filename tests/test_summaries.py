"""Per-image summaries of the checking tasks (tasks.summaries) and the driver's decisions from them
(jobs.runtime.inputcheck.decide_summaries): the same counts, keys and rejects as one aggregation over every
checked row, however the rows are spread over tasks.  No Spark."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from jobs.runtime.inputcheck import REJECTS_PER_IMAGE, decide_summaries
from schemas.stages import CHECKED, IMAGE_SUMMARY
from tasks.summaries import ImageSummary, distinct_keys, merge_summaries, rank_key, summarize


def row(image, tile_x, *, reason=None, channel=0, height=8, width=32, file="part-1", index=0):
    return {"file": file, "image_id": image, "channel": channel, "tile_y": 0, "tile_x": tile_x, "index": index,
            "layout": "packed", "image_height": height, "image_width": width, "image_channels": 1, "tile_h": 8,
            "tile_w": 8, "ct_bytes": 100, "stored": 1, "reason": reason, "detail": None if reason is None else "bad"}


def reference(rows: list[dict]) -> dict:
    """What an aggregation over every CHECKED row gives per image (the Spark query of image_summaries)."""
    out = {}
    for image in {r["image_id"] for r in rows}:
        mine = [r for r in rows if r["image_id"] == image]
        keys = {(r["channel"], r["tile_y"], r["tile_x"], r["index"]) for r in mine
                if None not in (r["channel"], r["tile_y"], r["tile_x"], r["index"])}
        out[image] = (len(mine), len(keys), sum(r["reason"] is not None for r in mine),
                      min(r["image_width"] for r in mine), max(r["image_width"] for r in mine))
    return out


def in_tasks(rows: list[dict], tasks: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """``rows`` dealt to ``tasks`` tasks at random, each summarised: every task's summary and failed rows."""
    rng = random.Random(seed)
    dealt = [[] for _ in range(tasks)]
    for r in rows:
        dealt[rng.randrange(tasks)].append(r)
    summaries, bad = [], []
    for part in dealt:
        s, b = summarize([pa.RecordBatch.from_pylist(part, schema=CHECKED)] if part else [])
        summaries += s.to_pylist()
        bad += b.to_pylist()
    return summaries, bad


ROWS = ([row("aaa", x) for x in range(4)] + [row("bbb", x) for x in range(4)] + [row("bbb", 2)]
        + [row("ccc", x, reason="seal-refused" if x % 2 else None) for x in range(16)]
        + [row("ddd", 0), row("ddd", 1, width=40)] + [row(None, 0, reason="bad-image-id")])


@pytest.mark.parametrize("tasks", [1, 2, 5])
def test_summed_over_tasks_the_summaries_are_the_aggregation_over_every_row(tasks):
    summaries, _ = in_tasks(ROWS, tasks)
    merged = {s.image_id: s for s in merge_summaries(summaries)}
    want = reference(ROWS)
    assert {i: (s.rows, s.keys, s.bad, s.widths[0], s.widths[1]) for i, s in merged.items()} == want
    assert merged["bbb"].keys == 4 and merged["bbb"].rows == 5          # a key twice, maybe in two tasks


def test_a_task_keeps_the_first_failed_rows_of_each_image_in_the_order_the_rejects_list_them():
    rows = [row("ccc", x, reason="seal-refused") for x in range(12)] + [row("ccc", 3, reason="bad-geometry")]
    random.Random(4).shuffle(rows)
    _, bad = summarize([pa.RecordBatch.from_pylist(rows, schema=CHECKED)])
    kept = bad.to_pylist()
    assert [(r["tile_x"], r["reason"]) for r in kept] == [(0, "seal-refused"), (1, "seal-refused"),
                                                          (2, "seal-refused"), (3, "bad-geometry"),
                                                          (3, "seal-refused")]
    assert sorted(kept, key=rank_key) == kept


def test_nulls_sort_first_and_keys_with_a_null_are_not_counted():
    rows = [row("eee", 1, reason="malformed-row"), {**row("eee", 0, reason="malformed-row"), "channel": None}]
    s, bad = summarize([pa.RecordBatch.from_pylist(rows, schema=CHECKED)])
    assert bad.column("channel").to_pylist() == [None, 0]
    assert distinct_keys(s.column("keys").to_pylist()) == 1


@pytest.mark.parametrize("tasks", [1, 3])
def test_the_driver_rejects_the_same_images_with_the_same_rows_however_the_rows_are_spread(tasks):
    summaries, bad = in_tasks(ROWS, tasks, seed=tasks)
    checked = decide_summaries(pa.Table.from_pylist(summaries, schema=IMAGE_SUMMARY),
                               pa.Table.from_pylist(bad, schema=CHECKED), run_id="r", stage="decrypt")
    assert checked.good_ids == ["aaa"]
    assert checked.bad_images == {"bbb", "ccc", "ddd"}
    assert checked.images == 4 and checked.rows == len(ROWS) and checked.id_less
    reasons = [(r["image_id"], r["reason"]) for r in checked.rejects]
    ccc = [r for r in checked.rejects if r["image_id"] == "ccc"]
    assert len(ccc) == REJECTS_PER_IMAGE + 1 and "3 more rows of it were rejected" in ccc[-1]["detail"]
    assert [r["tile_x"] for r in ccc[:REJECTS_PER_IMAGE]] == [1, 3, 5, 7, 9]
    assert reasons[0] == (None, "bad-image-id")                        # rows without an id first
    assert ("bbb", "duplicate-row") in reasons and ("ddd", "inconsistent-image") in reasons
    assert checked.sizes == {"aaa": (32, 8)}


def test_a_task_without_rows_sums_up_to_nothing():
    s, bad = summarize([])
    assert s.num_rows == 0 and bad.num_rows == 0 and s.schema == IMAGE_SUMMARY
    assert merge_summaries([]) == [] and isinstance(ImageSummary, type)
