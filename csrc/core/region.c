/*
 * Regions: aligned private anonymous mappings, moved at page-table speed.
 *
 * Alignment comes from over-reserving address space with PROT_NONE (which
 * costs no memory and no commit charge) and keeping the aligned middle.
 * Every destination is first reserved by us, so a MAP_FIXED or
 * MREMAP_FIXED only ever replaces our own reservation, never someone
 * else's mapping.
 *
 * The GIL is released around these calls, so other threads map and unmap
 * meanwhile: any range we unmap (a hole a move leaves, a reservation a
 * failed MAP_FIXED or MREMAP_FIXED may have removed) can be taken at once.
 * The rule: unmap only what we know we still own.  A range whose state a
 * failed system call left unknown is left alone (at worst a PROT_NONE
 * reservation stays behind: address space, no memory), and a range we need
 * back is taken with MAP_FIXED_NOREPLACE, which fails where someone else
 * got there first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clearpages.h"
#include "inject.h"
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
#ifndef MADV_DONTFORK
#define MADV_DONTFORK 10
#endif
#ifndef MADV_DONTDUMP
#define MADV_DONTDUMP 16
#endif
#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif
#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 1
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

/* A forked child does not inherit hugetlb regions (MADV_DONTFORK).  A
 * private hugetlb page shared copy-on-write with a child needs a second
 * page from the pool on the next write by either process, and where the
 * pool is empty that write dies of SIGBUS (the child's, or ours).  Not
 * MADV_WIPEONFORK: it is refused for hugetlb mappings, and a child that
 * touched a zeroed copy would take pool pages all the same.  Best effort:
 * a kernel that refuses it still has a working region. */
static void dontfork(uintptr_t addr, size_t size)
{
    madvise((void *)addr, size, MADV_DONTFORK);
}

/* MADV_HUGEPAGE over the range. */
static int advise_huge(uintptr_t addr, size_t size)
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
            if (kind == CP_REGION_THP && (err = advise_huge(a, size)) != 0) {
                unmap(a, size);
                return err;
            }
            if (kind == CP_REGION_HUGETLB)
                dontfork(a, size);
            *out = a;
        }
    }
    return err;
}

int cp_region_unmap(uintptr_t addr, size_t size)
{
    return munmap((void *)addr, size) == 0 ? 0 : errno;
}

/* Before 5.14 (no MADV_POPULATE_WRITE): fault each page in by reading it
 * through /proc/self/mem.  The kernel's page-table walker takes the faults,
 * so a hugetlb page that cannot be had is an error (EFAULT/ENOMEM), never a
 * SIGBUS; a private page faulted in by a read is exclusively ours, so the
 * first write to it allocates nothing. */
static int populate_by_reading(uintptr_t addr, size_t size, size_t step)
{
    int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int err = 0;
    for (size_t off = 0; off < size && !err; off += step) {
        char byte;
        ssize_t got = pread(fd, &byte, 1, (off_t)(addr + off));
        if (got != 1)
            err = got < 0 ? errno : EFAULT;
    }
    close(fd);
    return err;
}

int cp_region_populate(uintptr_t addr, size_t size, size_t page_size, int kind)
{
    int err = cp_inject_hit(CP_INJECT_POPULATE);
    if (!err && madvise((void *)addr, size, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (!err)
        err = errno;
    if (err != EINVAL)
        return err;
    if (kind == CP_REGION_HUGETLB)
        return populate_by_reading(addr, size, page_size);
    /* A write fault per base page that leaves the contents as they were.
     * By 4 KiB even in a THP region: where the kernel refuses a huge page
     * (fragmentation, khugepaged settings) a 2 MiB step would touch one base
     * page in 512. */
    for (size_t off = 0; off < size; off += 4096)
        __atomic_fetch_add((char *)(addr + off), 0, __ATOMIC_RELAXED);
    return 0;
}

struct populate_share {
    uintptr_t addr;
    size_t size, page_size;
    int kind, err;
    pthread_t tid;
    int started;
};

static void *populate_share(void *arg)
{
    struct populate_share *s = arg;
    s->err = cp_region_populate(s->addr, s->size, s->page_size, s->kind);
    return NULL;
}

/* The kernel takes each share's faults on the thread that asks: where its
 * fault path scales (per-VMA locks, Linux 6.4+) the shares go on at once. */
int cp_region_populate_threads(uintptr_t addr, size_t size, size_t page_size, int kind,
                               int threads)
{
    enum { MOST = 64 };
    size_t pages = page_size ? (size + page_size - 1) / page_size : 0;
    if (threads > MOST)
        threads = MOST;
    if ((size_t)threads > pages)
        threads = (int)pages;
    if (threads <= 1)
        return cp_region_populate(addr, size, page_size, kind);
    struct populate_share shares[MOST];
    size_t per = (pages + (size_t)threads - 1) / (size_t)threads * page_size, off = 0;
    int n = 0;
    for (; n < threads && off < size; n++, off += per)
        shares[n] = (struct populate_share){addr + off, size - off < per ? size - off : per,
                                            page_size, kind, 0, 0, 0};
    sigset_t old;
    cp_block_async_signals(&old);
    for (int i = 1; i < n; i++)
        shares[i].started = pthread_create(&shares[i].tid, NULL, populate_share,
                                           &shares[i]) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    populate_share(&shares[0]);
    int err = shares[0].err;
    for (int i = 1; i < n; i++) {
        if (shares[i].started)
            pthread_join(shares[i].tid, NULL);
        else
            populate_share(&shares[i]);
        if (!err)
            err = shares[i].err;
    }
    return err;
}

int cp_region_discard(uintptr_t addr, size_t size)
{
    return madvise((void *)addr, size, MADV_DONTNEED) == 0 ? 0 : errno;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int cp_region_discard_pages(uintptr_t addr, size_t size, const int64_t *pages, size_t n,
                            size_t page_size, size_t *bad)
{
    size_t count = size / page_size + (size % page_size != 0);
    for (size_t i = 0; i < n; i++)
        if (pages[i] < 0 || (uint64_t)pages[i] >= count) {
            *bad = i;
            return EINVAL;
        }
    *bad = n;
    if (!n)
        return 0;
    /* Sorted and merged: one madvise per run of adjacent pages. */
    int64_t *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return ENOMEM;
    memcpy(sorted, pages, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, by_value);
    int err = 0;
    for (size_t i = 0; i < n && !err;) {
        size_t j = i + 1;
        while (j < n && (uint64_t)sorted[j] <= (uint64_t)sorted[j - 1] + 1)
            j++;
        size_t start = (size_t)sorted[i] * page_size;
        size_t stop = ((size_t)sorted[j - 1] + 1) * page_size;
        err = cp_region_discard(addr + start, (stop < size ? stop : size) - start);
        i = j;
    }
    free(sorted);
    return err;
}

/* Locked on fault: pages never touched stay unallocated (a large region
 * costs nothing until used), every page touched is locked before it can
 * be written, so no page of it ever reaches swap.  mlock2 is Linux 4.4+;
 * before it, mlock (which faults the whole range in). */
static int lock_range(uintptr_t addr, size_t size)
{
#ifdef SYS_mlock2
    if (syscall(SYS_mlock2, (void *)addr, size, MLOCK_ONFAULT) == 0)
        return 0;
    if (errno != ENOSYS && errno != EINVAL)
        return errno;
#endif
    return mlock((void *)addr, size) == 0 ? 0 : errno;
}

int cp_region_protect(uintptr_t addr, size_t size, int flags, int *failed)
{
    static const struct {
        int flag, advice;
    } advices[] = {
        {CP_PROTECT_NODUMP, MADV_DONTDUMP},
        {CP_PROTECT_WIPEONFORK, MADV_WIPEONFORK},
        {CP_PROTECT_DONTFORK, MADV_DONTFORK},
    };
    *failed = 0;
    if (flags & CP_PROTECT_LOCK) {
        int err = lock_range(addr, size);
        if (err) {
            *failed = CP_PROTECT_LOCK;
            return err;
        }
    }
    for (size_t i = 0; i < sizeof advices / sizeof advices[0]; i++)
        if ((flags & advices[i].flag)
            && madvise((void *)addr, size, advices[i].advice) != 0) {
            *failed = advices[i].flag;
            return errno;
        }
    return 0;
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

/* mremap, or the injected failure of it.  *tried: the system call was made
 * (a failed MREMAP_FIXED may have unmapped its destination already). */
static int remap_step(int site, uintptr_t from, size_t len, uintptr_t to, int *tried)
{
    int err = cp_inject_hit(site);
    *tried = !err;
    return err ? err : remap(from, len, len, to);
}

/* Move [addr, addr + size) onto our reservation [dst, dst + size).
 *
 * 0: the region is at dst.  On failure [dst, dst + size) is given up (what
 * of it is still ours is unmapped) and either the region is back at addr
 * (an errno value), or it could not all come back, because a piece's old
 * place was taken by another mapping while it was away or moving it back
 * failed: then everything of it still ours is unmapped, nothing at addr is
 * ours any more, and the result is errno | CP_REGION_LOST. */
static int move_range(uintptr_t addr, size_t size, size_t piece, uintptr_t dst)
{
    size_t off;
    int err = 0, tried;

    if (piece == 0 || piece >= size) {
        err = remap_step(CP_INJECT_MOVE_PIECE, addr, size, dst, &tried);
        if (err && !tried)
            unmap(dst, size);
        return err;
    }
    for (off = 0; off < size; off += piece)
        if ((err = remap_step(CP_INJECT_MOVE_PIECE, addr + off, piece, dst + off, &tried)) != 0)
            break;
    if (!err)
        return 0;
    /* The failed piece's slot at dst: unknown if mremap ran, else ours. */
    if (off + piece < size)
        unmap(dst + off + piece, size - off - piece);
    if (!tried)
        unmap(dst + off, piece);
    /* Put back what moved, last first.  Each old place is a hole that
     * another thread may have mapped into: take it back with
     * MAP_FIXED_NOREPLACE first, and MREMAP_FIXED only onto that. */
    while (off > 0) {
        off -= piece;
        if (cp_inject_hit(CP_INJECT_SQUAT_SOURCE))
            cp_inject_do_squat(addr + off);
        int back = cp_region_reserve_at(addr + off, piece);
        if (back == 0) {
            back = remap_step(CP_INJECT_ROLLBACK, dst + off, piece, addr + off, &tried);
            if (back && !tried)
                unmap(addr + off, piece);
        }
        if (back) {
            /* Pieces [0, off] are still at dst and ours; [off + piece, size)
             * is back (or never left) at addr and ours.  The old place of
             * piece off, and the slots at dst of the pieces that came back,
             * are not ours. */
            unmap(dst, off + piece);
            unmap(addr + off + piece, size - off - piece);
            return err | CP_REGION_LOST;
        }
    }
    return err;
}

static int move_to(uintptr_t addr, size_t size, size_t piece, uintptr_t dst)
{
    int err;

    if (dst < addr + size && addr < dst + size)
        return EINVAL;          /* overlapping: mremap would refuse too */
    if ((err = cp_region_reserve_at(dst, size)) != 0)
        return err;
    return move_range(addr, size, piece, dst);
}

/* First address >= r with address % modulus == residue. */
static uintptr_t congruent(uintptr_t r, size_t modulus, size_t residue)
{
    return r + (residue + modulus - r % modulus) % modulus;
}

static int move_congruent(uintptr_t addr, size_t size, size_t piece,
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
    err = move_range(addr, size, piece, dst);
    trim(r, len, dst, size);    /* [dst, dst + size): the region or given up */
    if (err)
        return err;
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
        if (err == 0) {
            dontfork(addr + old_size, delta);
            *out = addr;
        }
        return err;     /* ENOMEM: no free huge pages; moving won't help */
    }
    /* ...else map the new part first (the step that can fail for want of
     * pages), then move the old pages in front of it. */
    if (add_overflows(new_size, modulus, &len))
        return ENOMEM;
    if ((err = reserve(len, &r)) != 0)
        return err;
    dst = congruent(r, modulus, addr % modulus);
    /* MAP_FIXED over our own reservation: no hole ever opens for another
     * thread to map into.  If it fails the kernel may have unmapped the
     * reservation there already: that range is not ours any more. */
    if ((err = cp_inject_hit(CP_INJECT_GROW_MAP)) != 0) {
        unmap(dst + old_size, delta);           /* as a failed MAP_FIXED may */
        cp_inject_do_squat(dst + old_size);     /* and another thread maps there */
    } else {
        void *p = mmap((void *)(dst + old_size), delta, PROT_READ | PROT_WRITE,
                       map_flags(CP_REGION_HUGETLB, huge_shift) | MAP_FIXED, -1, 0);
        err = p == MAP_FAILED ? errno : 0;
    }
    if (err) {
        unmap(r, dst + old_size - r);
        unmap(dst + new_size, r + len - (dst + new_size));
        return err;
    }
    dontfork(dst + old_size, delta);
    err = move_range(addr, old_size, (size_t)1 << huge_shift, dst);
    if (err) {
        unmap(r, dst - r);
        unmap(dst + old_size, r + len - (dst + old_size));  /* the new part too */
        return err;
    }
    trim(r, len, dst, new_size);
    *out = dst;
    return 0;
}

/* Below a PUD's worth of memory no page-table entry above a PMD can move
 * whole, so a grow of a smaller region needs its address kept only modulo
 * a PMD, and the kernel's own choice of place usually gives that. */
#define PMD_BYTES ((size_t)2 << 20)
#define PUD_BYTES ((size_t)1 << 30)

static int resize(uintptr_t addr, size_t old_size, size_t new_size,
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

    if (new_size < PUD_BYTES) {
        /* Let the kernel grow it in place or pick the place, as mmap.resize
         * does: one system call where reserving a congruent range takes
         * four.  Linux puts anonymous mappings of 2 MiB and more on a 2 MiB
         * boundary, so a new place is congruent modulo a PMD as a rule.
         * Where it is not, the region moves once more, to a congruent
         * place; if that fails it stays where the kernel put it (moved and
         * grown, only slower to move again).  MREMAP_MAYMOVE without
         * MREMAP_FIXED never touches any mapping but this one, and the
         * grown mapping is the same one, MADV_HUGEPAGE and all. */
        size_t need = modulus < PMD_BYTES ? modulus : PMD_BYTES;
        p = mremap((void *)addr, old_size, new_size, MREMAP_MAYMOVE);
        if (p == MAP_FAILED)
            return errno;
        dst = (uintptr_t)p;
        if (dst % need != addr % need && !add_overflows(new_size, need, &len)
                && reserve(len, &r) == 0) {
            uintptr_t to = congruent(r, need, addr % need);
            if (remap(dst, new_size, new_size, to) == 0)
                dst = to;
            /* As below: on failure [to, to + new_size) is left alone. */
            trim(r, len, to, new_size);
        }
        *out = dst;
        return 0;
    }
    p = mremap((void *)addr, old_size, new_size, 0);
    if (p != MAP_FAILED) {
        dst = addr;
    } else {
        if (add_overflows(new_size, modulus, &len))
            return ENOMEM;
        if ((err = reserve(len, &r)) != 0)
            return err;
        dst = congruent(r, modulus, addr % modulus);
        err = remap(addr, old_size, new_size, dst);
        /* On failure [dst, dst + new_size) is left alone: the failed
         * MREMAP_FIXED may have unmapped our reservation there. */
        trim(r, len, dst, new_size);
        if (err)
            return err;
    }
    /* The grown part belongs to the same mapping, whose MADV_HUGEPAGE flag
     * it inherits; advising it again costs nothing and does not depend on
     * that. */
    if (kind == CP_REGION_THP)
        advise_huge(dst + old_size, new_size - old_size);
    *out = dst;
    return 0;
}

int cp_region_move_to(uintptr_t addr, size_t size, size_t piece, uintptr_t dst)
{
    return move_to(addr, size, piece, dst);
}

int cp_region_move_congruent(uintptr_t addr, size_t size, size_t piece,
                             size_t modulus, size_t residue, uintptr_t *out)
{
    uintptr_t dst = 0;
    int err = move_congruent(addr, size, piece, modulus, residue, &dst);
    if (!err)
        *out = dst;
    return err;
}

int cp_region_resize(uintptr_t addr, size_t old_size, size_t new_size,
                     int kind, int huge_shift, size_t modulus, uintptr_t *out)
{
    uintptr_t dst = 0;
    int err = resize(addr, old_size, new_size, kind, huge_shift, modulus, &dst);
    if (!err)
        *out = dst;
    return err;
}
