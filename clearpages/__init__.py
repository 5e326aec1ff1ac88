"""clearpages: zero memory as fast as the hardware allows.

>>> import clearpages as cp
>>> buf = bytearray(b"secret" * 1000)
>>> cp.clear(buf)
>>> any(buf)
False
"""

# First: the native entry refuses a subinterpreter before anything else loads.
from . import _fast  # noqa: F401
from ._config import ConfigError

try:
    from . import _dispatch  # noqa: F401  (reads the CLEARPAGES_* variables)
except ConfigError as _e:
    from ._errors import print_alone_if_uncaught

    print_alone_if_uncaught(_e)
    raise _e.with_traceback(None) from None
from ._core import (
    Method,
    Threads,
    adaptive,
    clear,
    clear_many,
    clear_pages,
    cpu,
    methods,
    plan,
    reload_config,
    set_adaptive,
    thresholds,
)
from ._cpu import CPU
from ._errors import HugePagesUnavailable, PageIndexError, UnsupportedMethod
from ._policy import Plan, Thresholds
from ._pool import Block, Pool, PoolStats
from ._region import Region
from ._routines import ALL_METHODS, ROUTINES
from ._scan import is_zero, nonzero_pages
from ._zeroed_arrays import zeroed_arrays

__version__ = "0.1.0"

__all__ = [
    "ALL_METHODS",
    "CPU",
    "ROUTINES",
    "Block",
    "ConfigError",
    "HugePagesUnavailable",
    "Method",
    "PageIndexError",
    "Plan",
    "Pool",
    "PoolStats",
    "Region",
    "Threads",
    "Thresholds",
    "UnsupportedMethod",
    "adaptive",
    "clear",
    "clear_many",
    "clear_pages",
    "cpu",
    "is_zero",
    "methods",
    "nonzero_pages",
    "plan",
    "reload_config",
    "set_adaptive",
    "thresholds",
    "zeroed_arrays",
]
