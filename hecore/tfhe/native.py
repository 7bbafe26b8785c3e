"""The ``hepix_tfhe`` extension module (native/tfhe, PyO3 over tfhe-rs), imported with a clear error."""
from __future__ import annotations

from ..errors import HepixError


class TfheExtensionMissing(HepixError):
    """The ``hepix_tfhe`` extension is not installed (``make setup`` builds it)."""


def native_module():
    """The ``hepix_tfhe`` module, or :class:`TfheExtensionMissing` saying how to build it."""
    try:
        import hepix_tfhe
    except ImportError as e:
        raise TfheExtensionMissing(
            f"TFHE needs hepix's native extension hepix_tfhe, which cannot be imported ({e}); "
            "build and install it with `make setup` (tools/build_tfhe.sh; the first build compiles "
            "tfhe-rs and takes several minutes)"
        ) from None
    return hepix_tfhe


def available() -> bool:
    """Whether ``hepix_tfhe`` can be imported."""
    try:
        native_module()
    except TfheExtensionMissing:
        return False
    return True
