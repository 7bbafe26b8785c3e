"""`hepix bench`: parse the options, pick the suite, hand over to its module.

The suites are listed in :data:`bench.suites.SUITES` (name -> module); each module's
``run(args)`` measures and writes ``OUT/<table>/<run_id>.parquet`` (schemas in
:mod:`bench.schemas`).  Without ``--suite`` the default is ``all`` (the papers' experiments, one
``bench`` table for ``hepix report``), or ``pixel`` when a pixel-suite option is given.  A suite
refuses the options it does not read, by name.
"""
from __future__ import annotations

import argparse
import importlib

from bench.suites import SUITES
from hecore.seal.params import PRESETS

#: The options a suite may read besides --out and --quick (a suite lists its own in ``OPTIONS``).
SUITE_OPTIONS = ("images", "sizes", "preset", "image", "repeats", "strategies", "tile",
                 "bytes_only", "loop", "only", "pixels", "table_pixels", "threads",
                 "work", "master", "driver_memory", "batch_images", "generated", "json", "hdfs")
#: Given without --suite, any of these selects the pixel suite.
PIXEL_OPTIONS = ("sizes", "strategies", "tile", "preset", "image")


def _int_list(s: str) -> list[int]:
    try:
        values = [int(x) for x in s.split(",") if x]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"wants comma-separated positive integers like 8,32,64, got {s!r}")
    return values


def _counts(s: str) -> int | list[int]:
    """``--images``: one count (``4``), or a comma list (``4,10``) for a suite that takes several
    (``IMAGE_LISTS = True`` in its module)."""
    values = _int_list(s)
    return values[0] if len(values) == 1 and "," not in s else values


def _names(s: str) -> list[str]:
    return [x for x in s.split(",") if x]


def add_arguments(p):
    p.add_argument("--suite", choices=tuple(SUITES), default=None,
                   help="; ".join(f"{name}: {help_}" for name, (_module, help_) in SUITES.items())
                        + ". Default: all, or pixel when any of --sizes --strategies --tile --preset --image "
                          "is given. A suite refuses the options it does not read.")
    p.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: smaller sizes, fewer images and repeats (not figures to quote)")
    p.add_argument("--images", type=_counts, default=None,
                   help="spark: number of sample images (default 12); packed: number of images (default 4: "
                        "USC-SIPI when the data sets are present, else scikit-image samples); corpus: one "
                        "count or a comma list of corpus sizes, e.g. 4,10 (default 4); load: corpus size "
                        "(default 1000)")
    p.add_argument("--sizes", type=_int_list, default=None,
                   help="square image sizes, comma-separated (pixel: default 8,32,64,128; spark and packed "
                        "use the last one, default 32 and 256)")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="parameter preset (pixel and spark: default the library's; packed: default "
                        "paper-4096 and tenseal-8192)")
    p.add_argument("--image", help="image file to crop and resize, or a data-set path such as "
                                   "usc-sipi/5.1.12.tiff (default: the data sets' or scikit-image's); "
                                   "atrest: a comma list of image files or USC-SIPI names read in place")
    p.add_argument("--repeats", type=int, default=None,
                   help="packed: timed passes per image and implementation, median reported (default 5)")
    p.add_argument("--strategies", type=_names, default=None,
                   help="pixel: comma-separated strategies (default fresh,radix,radix-rand,scan,full; "
                        "fresh always runs)")
    p.add_argument("--tile", type=int, default=None,
                   help="pixel and spark: tile side in pixels (default 32); load: square tiles of this side "
                        "(default the packed layout's for the preset)")
    atrest = p.add_argument_group("the atrest suite")
    atrest.add_argument("--bytes-only", action="store_true", default=None,
                        help="one pass of every packed path, bytes per pixel only, printed (large images: no "
                             "pixel-full, no table written)")
    atrest.add_argument("--loop", type=float, metavar="SECONDS", default=None,
                        help="profile mode: run the --only row in a loop this long, print its speed (no table)")
    atrest.add_argument("--only", default=None, help="the row --loop runs (default compact-brightness)")
    tfhe = p.add_argument_group("the tfhe suite")
    tfhe.add_argument("--pixels", type=int, default=None,
                      help="measure this many seeded random pixel values (every nibble and carry path) with every "
                           "circuit instead of the astronaut crop")
    tfhe.add_argument("--table-pixels", type=int, default=None,
                      help="values the 256-entry table circuits are measured on, at most (default 4; 8 with "
                           "--pixels)")
    tfhe.add_argument("--threads", type=int, default=None, help="threads of tfhe-rs (default 1)")
    cluster = p.add_argument_group("the cluster suite")
    cluster.add_argument("--hdfs", action="store_true", default=None,
                         help="the corpus on HDFS (a MiniDFSCluster): encrypt -> process brightness:60 -> verify "
                              "on one one-core worker, decrypt on local[1], against hecore on one core and a "
                              "pyarrow copy (--images default 2 DIV2K 2048x1024 images; --quick 1)")
    load = p.add_argument_group("the load suite (--images default 1000, --sizes one side, default 64)")
    load.add_argument("--work", default=None,
                      help="scratch directory: corpus, keys, output (default a temporary one, removed after)")
    load.add_argument("--master", default=None, help="Spark master of the encrypt job (default local[2])")
    load.add_argument("--driver-memory", default=None, help="spark.driver.memory (default 1g)")
    load.add_argument("--batch-images", type=int, default=None, help="images per encrypt batch (default 256)")
    load.add_argument("--generated", action="store_true", default=None,
                      help="generated images even where the data sets exist")
    load.add_argument("--json", default=None, help="also write the summary here")


def resolve_suite(args) -> str:
    """``--suite`` as given, else ``pixel`` when a pixel-suite option is given, else ``all``."""
    if args.suite:
        return args.suite
    return "pixel" if any(getattr(args, o, None) is not None for o in PIXEL_OPTIONS) else "all"


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def refuse_unread(args, name: str, reads) -> None:
    """Exit naming the options ``name`` does not read, when any of them was given."""
    given = [_flag(o) for o in SUITE_OPTIONS if getattr(args, o, None) is not None and o not in reads]
    if given:
        takes = ["--out", "--quick"] + [_flag(o) for o in SUITE_OPTIONS if o in reads]
        raise SystemExit(f"hepix bench: the {name} suite takes only {', '.join(takes[:-1])} and {takes[-1]}, "
                         f"not {', '.join(given)}")


def run(args) -> int:
    args.suite = resolve_suite(args)
    module = importlib.import_module(SUITES[args.suite][0])
    refuse_unread(args, args.suite, module.OPTIONS)
    if isinstance(args.images, list) and not getattr(module, "IMAGE_LISTS", False):
        raise SystemExit(f"hepix bench: the {args.suite} suite takes one --images count, not "
                         f"{','.join(map(str, args.images))}; only the corpus suite takes a list")
    return module.run(args)
