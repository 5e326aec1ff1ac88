/*
 * Regions: private anonymous memory mapped, aligned, populated, discarded,
 * moved and resized with mmap/madvise/mremap (region.c).
 *
 * The kernel moves whole page-table entries when source and destination
 * share their alignment: a PUD entry (1 GiB) or a PMD entry (2 MiB) per
 * step instead of 512 PTEs.  Every move here therefore picks a destination
 * congruent with the source modulo a chosen modulus (1 GiB for resize).
 *
 * All functions return 0 or an errno value; none raises a signal.  Nothing
 * here touches memory it did not map itself: destinations are reserved
 * first (PROT_NONE) and only those reservations are replaced.
 */
#ifndef CLEARPAGES_REGION_H
#define CLEARPAGES_REGION_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

/* Kinds of region memory. */
enum {
    CP_REGION_NORMAL = 0,    /* base pages */
    CP_REGION_THP = 1,       /* base pages with MADV_HUGEPAGE */
    CP_REGION_HUGETLB = 2    /* MAP_HUGETLB, page size 1 << huge_shift */
};

/* Or'ed into the errno a move or resize returns when the region could not
 * be put back after a failure: its memory is gone (unmapped), and nothing
 * at its old address belongs to it any more. */
enum { CP_REGION_LOST = 0x10000 };

/* Or'ed into the errno of a move or resize that succeeded but whose
 * memory could not be given the region's cp_region_protect flags again
 * (the RegionMemory type reapplies them to the new range). */
enum { CP_REGION_UNPROTECTED = 0x20000 };

/* Map size bytes (a multiple of the page size) at an address that is a
 * multiple of align (a power of two).  huge_shift: log2 of the hugetlb page
 * size, used only for CP_REGION_HUGETLB (such regions are not inherited
 * by a forked child: MADV_DONTFORK). */
int cp_region_map(size_t size, size_t align, int kind, int huge_shift,
                  uintptr_t *out);

/* Unmap [addr, addr + size). */
int cp_region_unmap(uintptr_t addr, size_t size);

/* Fault in every page writable (MADV_POPULATE_WRITE).  On kernels without
 * it: one atomic add of zero per 4 KiB (which keeps the contents; a THP
 * region may get base pages), or for hugetlb (kind) one read per page
 * through /proc/self/mem, so a page the pool cannot give is an error, not
 * a SIGBUS. */
int cp_region_populate(uintptr_t addr, size_t size, size_t page_size, int kind);

/* cp_region_populate spread over threads: each of them faults in its own
 * contiguous share of whole pages (page_size), the caller one of them.
 * threads <= 1 is cp_region_populate.  Where a thread cannot be started
 * its share is faulted in by the caller.  The first error of any share. */
int cp_region_populate_threads(uintptr_t addr, size_t size, size_t page_size, int kind,
                               int threads);

/* MADV_DONTNEED: the next touch reads zero.  Only for private anonymous. */
int cp_region_discard(uintptr_t addr, size_t size);

/* MADV_DONTNEED over the listed pages of [addr, addr + size): page i is
 * [addr + i*page_size, addr + min((i+1)*page_size, size)), page_size a
 * multiple of the kernel's page.  Every index is checked before anything
 * is discarded: EINVAL with *bad = the position of the first outside;
 * otherwise *bad = n.  Sorted and merged, so a run of adjacent pages is
 * one system call.  ENOMEM: no memory to sort the list. */
int cp_region_discard_pages(uintptr_t addr, size_t size, const int64_t *pages, size_t n,
                            size_t page_size, size_t *bad);

/* Keeping a region's contents to this process (for secrets), or'd into
 * cp_region_protect's flags. */
enum {
    CP_PROTECT_LOCK = 1,        /* mlock (on fault): never written to swap */
    CP_PROTECT_NODUMP = 2,      /* MADV_DONTDUMP: left out of core dumps */
    CP_PROTECT_WIPEONFORK = 4,  /* MADV_WIPEONFORK: a forked child reads zeros */
    CP_PROTECT_DONTFORK = 8     /* MADV_DONTFORK: not mapped in a forked child */
};

/* Apply the flags over the range, in the order above; 0, or the errno of
 * the first that failed with *failed set to its flag.  Applying them again
 * is harmless (moves and resizes do, for the part that is new). */
int cp_region_protect(uintptr_t addr, size_t size, int flags, int *failed);

/* PROT_NONE reservation of exactly [addr, addr + size); EEXIST where any of
 * it is mapped.  Used to hold address space (tests and benchmarks block
 * in-place growth with it). */
int cp_region_reserve_at(uintptr_t addr, size_t size);

/* Move the mapping at [addr, addr + size) to dst, which must be free address
 * space (EEXIST otherwise).  piece: 0 to move it in one mremap, else the
 * size of the pieces moved one at a time (hugetlb regions that grew span
 * several mappings); a failure moves the pieces back, and where one cannot
 * come back (its old place was taken meanwhile) returns errno |
 * CP_REGION_LOST. */
int cp_region_move_to(uintptr_t addr, size_t size, size_t piece, uintptr_t dst);

/* Move to a free address dst with dst % modulus == residue. */
int cp_region_move_congruent(uintptr_t addr, size_t size, size_t piece,
                             size_t modulus, size_t residue, uintptr_t *out);

/* Grow or shrink to new_size: in place when the address space allows, else
 * moved to a destination congruent with addr modulo `modulus` (below 1 GiB:
 * modulo min(modulus, 2 MiB), where the kernel's own choice of place
 * usually is; see resize() in region.c).  *out gets
 * the address (addr when in place).  On failure nothing has changed,
 * except with CP_REGION_LOST (see cp_region_move_to).
 * kind/huge_shift as for cp_region_map; THP regions keep MADV_HUGEPAGE.
 * hugetlb regions are not inherited by a forked child (MADV_DONTFORK). */
int cp_region_resize(uintptr_t addr, size_t old_size, size_t new_size,
                     int kind, int huge_shift, size_t modulus, uintptr_t *out);

/* END CDEF */

#endif
