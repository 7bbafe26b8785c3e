"""The cluster helpers the cluster suites start their clusters with (:mod:`bench.clusters`), once this is a
checkout: the clusters run its ``spark-submit/`` scripts, which are not installed with the package."""
from __future__ import annotations

from typing import TYPE_CHECKING

from bench.clusters import minidfs, standalone

if TYPE_CHECKING:
    from types import ModuleType

#: The helpers by name: the standalone-cluster launcher (:func:`launcher`) and the MiniDFSCluster.
HELPERS: dict[str, ModuleType] = {"standalone": standalone, "minidfs": minidfs}


def launcher() -> ModuleType:
    """The standalone-cluster launcher, :mod:`bench.clusters.standalone`; exits with a message when this is
    not a checkout."""
    return checkout_module("standalone")


def checkout_module(name: str) -> ModuleType:
    """The helper ``name`` of :data:`HELPERS` (``standalone``, ``minidfs``); exits with a message when this is
    not a checkout (no ``spark-submit/standalone.sh`` beside the package) or there is no such helper."""
    script = standalone.SUBMIT / "standalone.sh"
    if name not in HELPERS or not script.is_file():
        why = f"{script} is absent" if name in HELPERS else f"it has no cluster helper {name!r}"
        raise SystemExit(f"hepix bench: the cluster suite runs from a checkout of hepix (it starts its clusters "
                         f"with bench/clusters/ and submits through spark-submit/); {why}")
    return HELPERS[name]
