"""The prompt cache, scheduler side (pure Python): a finished request's KV stays for the next prompt that
repeats it. `policy.PromptCache` places, admits and releases; `placement.py` says what slots hold and
where a request goes; `store.py` indexes the host store; `copies.PrefixCopies` is what executors implement.
"""

from .copies import NoPrefixCache, PrefixCopies
from .placement import SLOT, STORE, Placement, PrefixCache
from .policy import MIB, PromptCache
from .store import Held, PrefixStore

__all__ = [
    "MIB",
    "SLOT",
    "STORE",
    "Held",
    "NoPrefixCache",
    "Placement",
    "PrefixCache",
    "PrefixCopies",
    "PrefixStore",
    "PromptCache",
]
