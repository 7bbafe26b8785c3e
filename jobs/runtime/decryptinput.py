"""What ``hepix decrypt`` expects of its input rows, how it decodes the originals of ``--images`` and which
images its contact sheet draws: shared by its two ways through the input (jobs/imagedecrypt.py by image, jobs/decrypt.py through Spark's shuffle)."""
from __future__ import annotations

from hecore.errors import HepixError
from tasks.contactsheet import MAX_IMAGES

from .owner import OwnerMap


def expectation(run, owner: OwnerMap | None):
    """What the input rows must say: this key's parameters, the owner's layout, tile, halo, pixel limit and
    at-rest format (the scale and level of the rows; the input manifest's only without an owner map), the
    input run's ops and labels."""
    from hecore.layouts import Layout
    from hecore.ops.spec import recorded_tile
    from tasks.rowchecks import run_labels

    if owner is None:
        return run.expectation(preset=run.keys.params.name, max_pixels=run.args.max_pixels)
    s = owner.settings
    labels = run_labels(run.keys.params.name, None, {"settings": s})
    # the tile as the input's rows hold it: a packed downsample shrinks it
    tile = recorded_tile(list(run.parent.ops), run.parent.preset, s["tile"], Layout.parse(s["layout"]).packed)
    return run.expectation(preset=run.keys.params.name, layout=s["layout"], tile=tile,
                           halo=int(s["halo"]), max_pixels=int(s["max_pixels"]), **labels)


def sheet_ids(args, owner: OwnerMap | None, ids: list[str]) -> frozenset[str]:
    """The images ``--contact-sheet`` draws: the first :data:`MAX_IMAGES` by the owner's file names (by id
    without an owner map); none without the option."""
    if args.contact_sheet is None:
        return frozenset()
    known = owner.images() if owner is not None else {}
    return frozenset(sorted(ids, key=lambda i: (known[i].source if i in known else i, i))[:MAX_IMAGES])


def spot_checked(run, owner: OwnerMap | None) -> bool:
    """Whether decrypt checks the images at the owner's spot samples: with an owner map, unless
    ``--no-integrity`` or noise flooding (its values are not the exact ones)."""
    return owner is not None and not getattr(run.args, "no_integrity", False) and \
        not getattr(run.args, "flood_std", 0.0)


def owner_spots(run, owner: OwnerMap | None, ids):
    """The owner's spot samples of the images ``ids`` (image id -> bytes), broadcast once to the executors:
    what decrypt checks each decrypted image against (tasks/metrics.py); None when :func:`spot_checked` says
    the run is not checked."""
    if not spot_checked(run, owner):
        return None
    kept = owner.spots()
    return run.sc.broadcast({i: kept[i] for i in ids if i in kept})


def check_expected_ops(run) -> None:
    """``--expect-ops``: the chain the owner asked the cluster for must be the one the input run records (the
    spot checks compare each image with the recorded chain, the ringers each score with the recorded model),
    whatever the run holds: images, distances or scores."""
    wanted = getattr(run.args, "expect_ops", None)
    if wanted is None:
        return
    from hecore.ops.spec import op_chain_text

    recorded = list(run.parent.ops)
    try:
        wanted_text = op_chain_text(wanted, run.parent.preset)
    except ValueError as e:
        raise HepixError(f"--expect-ops: {e}") from None
    try:
        recorded_text = op_chain_text(recorded, run.parent.preset)
    except ValueError as e:
        raise HepixError(f"--expect-ops: the input run records ops that do not parse ({e}); it is not the run "
                         "asked for (nothing was decrypted)") from None
    if wanted_text != recorded_text:
        raise HepixError(f"--expect-ops {'|'.join(wanted) or '(none)'}: the input run records the ops "
                         f"{'|'.join(recorded) or '(none)'}; it is not the run asked for (nothing was decrypted)")


def decode_options(run, owner):
    """How the originals of ``--images`` are decoded, as encrypt decoded them: the owner's settings, or the
    manifest's resize and conversions (refused when they claim more than ``--max-pixels``)."""
    from tasks.decode import DecodeOptions

    if owner is not None:
        s = owner.settings
        return DecodeOptions(1, 1, s.get("resize"), tuple(s.get("conversions", [])), int(s["max_pixels"]))
    o = run.parent.options
    resize, limit = o.get("resize"), run.args.max_pixels
    if resize is not None and resize * resize > limit:
        raise HepixError(f"the input's manifest says the images were resized to {resize}x{resize}, more than "
                         f"--max-pixels {limit}: give --owner (the owner map records the real settings) or a "
                         "larger --max-pixels")
    return DecodeOptions(1, 1, resize, tuple(o.get("conversions", [])), limit)
