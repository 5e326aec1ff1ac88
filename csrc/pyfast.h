/*
 * clear(buf) with default arguments as one CPython function: the buffer
 * acquired, the routine chosen and called, the buffer released, in C.  At
 * 4 KiB the per-call path is most of the cost, and two cffi calls (one for
 * from_buffer, one for the routine) cost more than the clear.
 */
#ifndef CLEARPAGES_PYFAST_H
#define CLEARPAGES_PYFAST_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

/* The policy the fast path follows (the same order as the Python policy):
 * n > limit: not handled; n >= nt: nt_fn; n < small: small_fn; else
 * temporal_fn.  Takes the GIL, so a concurrent call sees all or nothing. */
void cp_fast_configure(size_t limit, size_t small, size_t nt,
                       cp_clear_fn small_fn, cp_clear_fn temporal_fn,
                       cp_clear_fn nt_fn);

/* Which routine the fast path runs for n bytes: 0 small_fn, 1 temporal_fn,
 * 2 nt_fn, -1 none (larger than the limit, or not configured). */
int cp_fast_route(size_t n);

/* The address of the fast function, a Python callable f(buf) -> bool:
 * True when it cleared buf; False (having written nothing) when buf has no
 * writable contiguous buffer or is larger than the limit, so the caller
 * takes the general path, which explains refusals. */
uintptr_t cp_fast_function(void);

/* END CDEF */

#endif
