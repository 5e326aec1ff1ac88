"""zeroed_arrays(pool): numpy's own arrays served from a Pool.

numpy lets a library put its own allocator under array data (an allocator
handler, numpy 1.22+; set per context, like a context variable).  Under
``with zeroed_arrays(pool):`` the handler in place gives ``np.zeros`` and
``np.empty`` of ``min_size`` (default: a whole block) up to a block's size
a block of the pool, zeroed and resident already, so the first writes
fault nothing in; every other request, and any the pool cannot serve at
once (all its blocks out), goes to the handler that was in place before.
When such an array goes, its block goes back to the pool.

The handler itself is C (``csrc/pyext/pool_numpy.c``): numpy holds it in
every array it allocated, so arrays made inside may outlive the ``with``
block and the Pool object, and the pool's memory stays until the last of
them goes.  numpy is needed only here, at run time.
"""

from __future__ import annotations

from typing import Any

from . import _fast
from ._pool import Pool, _size_arg
from ._units import format_size as _fmt_size


class zeroed_arrays:
    """``with zeroed_arrays(pool):`` numpy's ``np.zeros`` / ``np.empty`` of at
    least a block's size (``min_size=`` lowers that) and at most a block come
    from ``pool``.  Returns the pool from ``__enter__``.  Applies to the
    current thread's context, as ``decimal.localcontext`` does; nested
    blocks, of the same pool or others, stack."""

    def __init__(self, pool: Pool, *, min_size: int | str | None = None) -> None:
        if not isinstance(pool, Pool):
            raise TypeError("zeroed_arrays takes a clearpages.Pool, not %s"
                            % type(pool).__name__)
        size = pool.block_size if min_size is None else _size_arg(min_size, "min_size")
        if size > pool.block_size:
            raise ValueError("min_size %s is larger than the pool's blocks (%s): no request "
                             "could be served; give at most %d"
                             % (_fmt_size(size), _fmt_size(pool.block_size), pool.block_size))
        self.pool, self.min_size = pool, size
        self._previous: Any = None
        self._entered = False

    def __enter__(self) -> Pool:
        if self._entered:
            raise RuntimeError("this zeroed_arrays is in use already; nest a new "
                               "zeroed_arrays(pool) instead")
        if self.pool.closed:
            raise ValueError("the Pool is closed")
        try:
            import numpy  # noqa: F401
        except ImportError:
            raise ImportError("zeroed_arrays needs numpy (1.22 or newer); the rest of "
                              "clearpages works without it") from None
        handler = _fast.pool_handler(self.pool, self.min_size)
        self._previous = _fast.numpy_set_handler(handler)
        self._entered = True
        return self.pool

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if self._entered:
            _fast.numpy_set_handler(self._previous)
            self._previous = None
            self._entered = False

    def __repr__(self) -> str:
        return "<clearpages.zeroed_arrays %s..%s of %r>" % (
            _fmt_size(self.min_size), _fmt_size(self.pool.block_size), self.pool)
