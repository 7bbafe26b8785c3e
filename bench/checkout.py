"""Modules of the checkout ``hepix bench`` runs from that are not part of the package: the tests'
standalone-cluster launcher and MiniDFSCluster, which the cluster suites start their clusters with."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

#: The standalone-cluster launcher of the tests, in the checkout this package is run from.
LAUNCHER = Path(__file__).resolve().parents[1] / "tests" / "sparkstandalone.py"


def launcher() -> ModuleType:
    """The tests' standalone-cluster launcher (:data:`LAUNCHER`), imported once as ``sparkstandalone``
    (the name the tests import it by); exits with a message when this is not a checkout."""
    return checkout_module(LAUNCHER.stem)


def checkout_module(name: str) -> ModuleType:
    """``tests/<name>.py`` of the checkout this package runs from (the standalone-cluster launcher, the
    MiniDFSCluster), imported once under that name; exits with a message when this is not a checkout."""
    if name in sys.modules:
        return sys.modules[name]
    path = LAUNCHER.with_name(f"{name}.py")
    if not path.is_file():
        raise SystemExit(f"hepix bench: the cluster suite runs from a checkout of hepix (it starts the cluster "
                         f"with tests/sparkstandalone.py and submits through spark-submit/); {path} is absent")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
