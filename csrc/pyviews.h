/*
 * Many Python buffers acquired in C (CPython only), so that clear_many's
 * per-buffer cost is a PyObject_GetBuffer, not a cdata object built in
 * Python for each piece.
 */
#ifndef CLEARPAGES_PYVIEWS_H
#define CLEARPAGES_PYVIEWS_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

struct cp_views;

/* seq is id() of a list or tuple.  Takes the GIL, acquires a writable,
 * contiguous buffer of every item, and gives the GIL back.  NULL when an
 * item has none (*bad = its index; nothing is acquired then) or on no
 * memory (*bad = the length). */
struct cp_views *cp_views_acquire(uintptr_t seq, size_t *bad);
size_t cp_views_count(const struct cp_views *views);
size_t cp_views_total(const struct cp_views *views);      /* bytes */
/* A job over the views' memory (see cp_job_new); NULL on no memory. */
struct cp_job *cp_views_job(const struct cp_views *views);
/* Takes the GIL and releases every buffer; frees views. */
void cp_views_release(struct cp_views *views);

/* Page indices from a list or tuple (seq is its id()) into out, which has
 * room for n: each item as PyLong_AsLongLong reads it (ints, bools, objects
 * with __index__).  Returns 0; 1 with *bad = the first item that is not an
 * integer; 2 with *bad = the first beyond int64; 3 when the sequence no
 * longer has n items.  Takes the GIL. */
int cp_int64_from_sequence(uintptr_t seq, int64_t *out, size_t n, size_t *bad);

/* END CDEF */

#endif
