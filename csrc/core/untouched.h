/*
 * Pages that read as zero without being written (untouched.c).
 *
 * A page of private anonymous memory that was never touched is neither
 * present nor swapped: the kernel gives it a zeroed page at the first
 * access.  Clearing it costs a page fault and a page of memory for
 * nothing; a clear may leave it alone.  So may a page that maps the
 * shared zero page (it was only read).  Never skipped: a page of a file or
 * shared mapping (it holds the file's or the other side's bytes), a page
 * of a range registered with userfaultfd (a handler supplies its bytes),
 * a swapped-out page, and every page whenever the check cannot be made.
 */
#ifndef CLEARPAGES_UNTOUCHED_H
#define CLEARPAGES_UNTOUCHED_H

#include <stddef.h>
#include <stdint.h>

#include "clearpages.h"     /* struct cp_extent */

/* BEGIN CDEF */

/* The parts of the sorted, disjoint extents ext[0..n) that may hold data:
 * each extent without the pages that read as zero untouched.  Returns how
 * many extents are left and sets *out to them (malloc'd, the caller frees;
 * sorted, disjoint, none empty).  Returns (size_t)-1 with *out NULL when
 * nothing is dropped: a few pages sampled first are all in use, or the
 * check cannot be made (no /proc, an old kernel's missing interface,
 * out of memory); then the extents are cleared as they are. */
size_t cp_untouched_trim(const struct cp_extent *ext, size_t n, struct cp_extent **out);
/* Free what cp_untouched_trim returned. */
void cp_extents_free(struct cp_extent *ext);

/* 1 where the page holding addr is in memory (mincore), or that cannot be
 * told; 0 where it is not: a read would fault it in (a hugetlb page: a
 * whole huge page taken from the pool and zeroed by the kernel).  For the
 * bytes a scan peeks at before it looks for untouched pages. */
int cp_untouched_peekable(const void *addr);

/* Tests: 1 reads /proc/self/pagemap entry by entry, as on a kernel without
 * the PAGEMAP_SCAN ioctl; 0 finds out again what the kernel has. */
void cp_untouched_use_pagemap(int on);

/* The bytes of [addr, addr + size) (page-aligned) that hold memory of
 * their own: present and not the shared zero page (*resident), and of
 * those the bytes mapped by huge pages (*huge).  From the page tables
 * (PAGEMAP_SCAN, Linux 6.7+): *exact = 1.  Before that kernel, from the
 * pagemap's present bits: *resident counts pages that map the zero page
 * too, *huge is 0 and *exact 0.  0 or an errno. */
int cp_pages_resident(uintptr_t addr, size_t size, uint64_t *resident, uint64_t *huge,
                      int *exact);

/* What the last trim on this thread found (tests, plan()): 0 not run,
 * 1 sampled pages all in use, 2 trimmed, 3 nothing to drop after the full
 * check, -1 the check could not be made. */
int cp_untouched_last(void);

/* END CDEF */

#endif
