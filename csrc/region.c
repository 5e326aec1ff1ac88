/*
 * Regions: aligned private anonymous mappings, moved at page-table speed.
 *
 * Alignment comes from over-reserving address space with PROT_NONE (which
 * costs no memory and no commit charge) and keeping the aligned middle.
 * Every destination is first reserved by us, so a MAP_FIXED or
 * MREMAP_FIXED only ever replaces our own reservation, never someone
 * else's mapping.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "region.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MREMAP_FIXED
#define MREMAP_FIXED 2
#endif

/* Another thread may map into a hole we opened for an instant; try again. */
enum { MAP_TRIES = 8 };

static int reserve(size_t len, uintptr_t *out)
{
    void *p = mmap(NULL, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    *out = (uintptr_t)p;
    return p == MAP_FAILED ? (errno ? errno : ENOMEM) : 0;
}

static void unmap(uintptr_t addr, size_t len)
{
    if (len)
        munmap((void *)addr, len);
}

/* Keep [keep, keep + size) of the reservation [r, r + len); drop the rest. */
static void trim(uintptr_t r, size_t len, uintptr_t keep, size_t size)
{
    unmap(r, keep - r);
    unmap(keep + size, r + len - (keep + size));
}

static int add_overflows(size_t a, size_t b, size_t *sum)
{
    return __builtin_add_overflow(a, b, sum);
}

static int map_flags(int kind, int huge_shift)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (kind == CP_REGION_HUGETLB)
        flags |= MAP_HUGETLB | (huge_shift << MAP_HUGE_SHIFT);
    return flags;
}

/* Map exactly at want, which must be free; EEXIST where it is not (also on
 * kernels older than 4.17, which take MAP_FIXED_NOREPLACE as a hint). */
static int mmap_at(uintptr_t want, size_t size, int prot, int flags)
{
    void *p = mmap((void *)want, size, prot, flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return errno;
    if ((uintptr_t)p != want) {
        munmap(p, size);
        return EEXIST;
    }
    return 0;
}

static int map_exactly(uintptr_t want, size_t size, int kind, int huge_shift)
{
    return mmap_at(want, size, PROT_READ | PROT_WRITE, map_flags(kind, huge_shift));
}

int cp_region_advise_huge(uintptr_t addr, size_t size)
{
    /* EINVAL: a kernel without THP.  The region still works, with base
     * pages, and backing() says so. */
    if (madvise((void *)addr, size, MADV_HUGEPAGE) != 0 && errno != EINVAL)
        return errno;
    return 0;
}

int cp_region_map(size_t size, size_t align, int kind, int huge_shift,
                  uintptr_t *out)
{
    size_t len;
    int err = EEXIST;

    if (size == 0 || align == 0 || (align & (align - 1)))
        return EINVAL;
    if (add_overflows(size, align, &len))
        return ENOMEM;
    for (int i = 0; i < MAP_TRIES && err == EEXIST; i++) {
        uintptr_t r, a;
        if ((err = reserve(len, &r)) != 0)
            return err;
        a = (r + align - 1) & ~(uintptr_t)(align - 1);
        /* Open a hole in our reservation and map into it without
         * MAP_FIXED: a failure (no hugetlb pages) then cannot have removed
         * anything but our own reservation. */
        unmap(a, size);
        err = map_exactly(a, size, kind, huge_shift);
        trim(r, len, a, size);
        if (err == 0) {
            if (kind == CP_REGION_THP && (err = cp_region_advise_huge(a, size)) != 0) {
                unmap(a, size);
                return err;
            }
            *out = a;
        }
    }
    return err;
}

int cp_region_unmap(uintptr_t addr, size_t size)
{
    return munmap((void *)addr, size) == 0 ? 0 : errno;
}

int cp_region_populate(uintptr_t addr, size_t size, size_t page_size)
{
    if (madvise((void *)addr, size, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL)
        return errno;
    /* Before 5.14: a write fault per page that leaves the contents as
     * they were. */
    for (size_t off = 0; off < size; off += page_size)
        __atomic_fetch_add((char *)(addr + off), 0, __ATOMIC_RELAXED);
    return 0;
}

int cp_region_discard(uintptr_t addr, size_t size)
{
    return madvise((void *)addr, size, MADV_DONTNEED) == 0 ? 0 : errno;
}

int cp_region_reserve_at(uintptr_t addr, size_t size)
{
    return mmap_at(addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
}

static int remap(uintptr_t from, size_t old_len, size_t new_len, uintptr_t to)
{
    void *p = mremap((void *)from, old_len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED,
                     (void *)to);
    return p == MAP_FAILED ? errno : 0;
}

/* Move [addr, addr + size) onto our reservation at dst. */
static int move_range(uintptr_t addr, size_t size, size_t piece, uintptr_t dst)
{
    size_t off;
    int err = 0;

    if (piece == 0 || piece >= size)
        return remap(addr, size, size, dst);
    for (off = 0; off < size; off += piece)
        if ((err = remap(addr + off, piece, piece, dst + off)) != 0)
            break;
    if (err) {
        /* Put back what moved: the holes it left are where it came from. */
        while (off > 0) {
            off -= piece;
            remap(dst + off, piece, piece, addr + off);
        }
    }
    return err;
}

int cp_region_move_to(uintptr_t addr, size_t size, size_t piece, uintptr_t dst)
{
    int err;

    if (dst < addr + size && addr < dst + size)
        return EINVAL;          /* overlapping: mremap would refuse too */
    if ((err = cp_region_reserve_at(dst, size)) != 0)
        return err;
    if ((err = move_range(addr, size, piece, dst)) != 0)
        unmap(dst, size);
    return err;
}

/* First address >= r with address % modulus == residue. */
static uintptr_t congruent(uintptr_t r, size_t modulus, size_t residue)
{
    return r + (residue + modulus - r % modulus) % modulus;
}

int cp_region_move_congruent(uintptr_t addr, size_t size, size_t piece,
                             size_t modulus, size_t residue, uintptr_t *out)
{
    uintptr_t r, dst;
    size_t len;
    int err;

    if (modulus == 0 || residue >= modulus)
        return EINVAL;
    if (add_overflows(size, modulus, &len))
        return ENOMEM;
    if ((err = reserve(len, &r)) != 0)
        return err;
    dst = congruent(r, modulus, residue);
    if ((err = move_range(addr, size, piece, dst)) != 0) {
        unmap(r, len);
        return err;
    }
    trim(r, len, dst, size);
    *out = dst;
    return 0;
}

static int grow_hugetlb(uintptr_t addr, size_t old_size, size_t new_size,
                        int huge_shift, size_t modulus, uintptr_t *out)
{
    size_t delta = new_size - old_size, len;
    uintptr_t r, dst;
    int err;

    /* hugetlb mappings cannot be grown by mremap (the kernel refuses to
     * split their reservations), so the new part is its own mapping:
     * right after the region if that is free... */
    err = map_exactly(addr + old_size, delta, CP_REGION_HUGETLB, huge_shift);
    if (err != EEXIST) {
        if (err == 0)
            *out = addr;
        return err;     /* ENOMEM: no free huge pages; moving won't help */
    }
    /* ...else map the new part first (the step that can fail for want of
     * pages), then move the old pages in front of it. */
    if (add_overflows(new_size, modulus, &len))
        return ENOMEM;
    if ((err = reserve(len, &r)) != 0)
        return err;
    dst = congruent(r, modulus, addr % modulus);
    unmap(dst + old_size, delta);
    if ((err = map_exactly(dst + old_size, delta, CP_REGION_HUGETLB, huge_shift)) != 0
        || (err = move_range(addr, old_size, (size_t)1 << huge_shift, dst)) != 0) {
        unmap(r, len);
        return err;
    }
    trim(r, len, dst, new_size);
    *out = dst;
    return 0;
}

int cp_region_resize(uintptr_t addr, size_t old_size, size_t new_size,
                     int kind, int huge_shift, size_t modulus, uintptr_t *out)
{
    uintptr_t r, dst;
    size_t len;
    void *p;
    int err;

    if (new_size == 0 || modulus == 0)
        return EINVAL;
    if (new_size <= old_size) {
        unmap(addr + new_size, old_size - new_size);
        *out = addr;
        return 0;
    }
    if (kind == CP_REGION_HUGETLB)
        return grow_hugetlb(addr, old_size, new_size, huge_shift, modulus, out);

    p = mremap((void *)addr, old_size, new_size, 0);
    if (p != MAP_FAILED) {
        dst = addr;
    } else {
        if (add_overflows(new_size, modulus, &len))
            return ENOMEM;
        if ((err = reserve(len, &r)) != 0)
            return err;
        dst = congruent(r, modulus, addr % modulus);
        if ((err = remap(addr, old_size, new_size, dst)) != 0) {
            unmap(r, len);
            return err;
        }
        trim(r, len, dst, new_size);
    }
    /* The grown part belongs to the same mapping, whose MADV_HUGEPAGE flag
     * it inherits; advising it again costs nothing and does not depend on
     * that. */
    if (kind == CP_REGION_THP)
        cp_region_advise_huge(dst + old_size, new_size - old_size);
    *out = dst;
    return 0;
}
