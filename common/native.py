"""The optional C fast paths of the record format's per-message loops (common/_native.c):
the store's encoding, packing, gathering, index keys and recovery scan, the broker's batch
decoding and the client's pull decoding and batch elements. None when not built.

`lib` is the extension module when it was built and STORE_NATIVE is not "0"; the store's
objects take it when they are made, so a test can compare both paths. Each native function
mirrors one pure-Python function of the store (named in its docstring) on the common inputs and
hands anything unusual back to it.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

from common.constants import MESSAGE_MAGIC_CODE, SysFlag

log = logging.getLogger(__name__)


def _load() -> ModuleType | None:
    if os.environ.get("STORE_NATIVE", "1") == "0":
        return None
    try:
        from common import _native
    except ImportError as e:
        log.info("store: no C fast path (%s); pure Python", e)
        return None
    if (_native.MESSAGE_MAGIC_CODE, _native.NO_QUEUE_OFFSET_BIT) != (
            MESSAGE_MAGIC_CODE, SysFlag.TRANSACTION_PREPARED):
        log.warning("store: the C fast path was built from other constants; pure Python")
        return None
    return _native


lib: ModuleType | None = _load()
