/*
 * Leave untouched memory alone: find the pages of a clear that already
 * read as zero because they were never written.
 *
 * Fully resident memory, the common case, must pay almost nothing, so
 * three pages spread over the work are looked up first (one system call
 * each, about a microsecond); only when one of them is not in use is the
 * whole check made:
 *   1. /proc/self/smaps, read only up to the end of the work, says which
 *      mappings it covers and what they are: only private, anonymous,
 *      writable mappings without a file ([heap] and named anonymous
 *      memory too), not registered with userfaultfd, not a stack, qualify;
 *      of hugetlb mappings, only the kernel's own for MAP_ANONYMOUS
 *      (named "/anon_hugepage (deleted)": a private fault there takes a
 *      fresh huge page, zeroed, and nothing else can fill the hidden file
 *      behind it), never a hugetlbfs file, a memfd or shared memory.
 *   2. In those, the page tables say which pages are present or swapped:
 *      the PAGEMAP_SCAN ioctl (Linux 6.7+) returns them as ranges and
 *      tells the shared zero page apart; older kernels give one
 *      /proc/self/pagemap entry per page (bit 63 present, bit 62 swapped).
 *   3. The rest of those mappings' pages are dropped from the work.
 * Anything unexpected (no /proc, a parse error, no memory) ends the check
 * and the work is cleared whole, as it would be without it.
 *
 * The full check's cost: smaps walks the page tables of every mapping it
 * prints, so reading it grows with the memory mapped below the work's end.
 * It is paid only where a sampled page was never touched, that is where
 * faulting in the untouched pages would cost far more (docs/results.md
 * has the figures).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clearpages.h"
#include "untouched.h"

/* Pages looked up before the whole check: the last, the middle and the
 * one a quarter in (about a microsecond each).  A fresh array with a few
 * pages written shows an unused one at once, and so does a pool used from
 * its start and not yet to its end; a fully resident buffer costs these
 * three lookups.  (The first page is not worth one: an allocator's header
 * often lies in it.) */
#define SAMPLES 3

/* ---- the kernel's interfaces -------------------------------------------- */

/* linux/fs.h of 6.7+, spelled out so the build does not need new headers. */
struct pm_page_region {
    uint64_t start, end, categories;
};

struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};

#define PM_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PM_PRESENT (1u << 3)
#define PM_SWAPPED (1u << 4)
#define PM_PFNZERO (1u << 5)
#define PM_HUGE (1u << 6)

#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_SWAPPED (1ull << 62)

/* /proc/self/pagemap, opened once per process: (pid << 32) | (fd + 1), 0
 * before.  One atomic word, no lock: a lock another thread held when the
 * process forked would stay held in the child. */
static _Atomic uint64_t pagemap_state;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static atomic_int scan_ioctl = -1;  /* PAGEMAP_SCAN: -1 unknown, 0 no, 1 yes */
static _Thread_local int last;

int cp_untouched_last(void)
{
    return last;
}

void cp_extents_free(struct cp_extent *ext)
{
    free(ext);
}

void cp_untouched_use_pagemap(int on)
{
    atomic_store(&scan_ioctl, on ? 0 : -1);
}

/* In a forked child, at once: the inherited descriptor reads the parent's
 * page tables.  (Nothing else can have closed it yet.) */
static void forget_in_child(void)
{
    uint64_t s = atomic_exchange(&pagemap_state, 0);
    if (s)
        close((int)(uint32_t)s - 1);
}

static void register_atfork(void)
{
    cp_at_fork(NULL, NULL, forget_in_child);
}

/* This process's /proc/self/pagemap, -1 when it cannot be opened.  The pid
 * is checked too, for a child made without the C library's fork (its
 * inherited descriptor is then left alone, not trusted). */
static int pagemap(void)
{
    pthread_once(&atfork_once, register_atfork);
    uint32_t pid = (uint32_t)getpid();
    uint64_t cur = atomic_load(&pagemap_state);
    if (cur && (uint32_t)(cur >> 32) == pid)
        return (int)(uint32_t)cur - 1;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    uint64_t mine = (uint64_t)pid << 32 | (uint32_t)(fd + 1);
    if (atomic_compare_exchange_strong(&pagemap_state, &cur, mine))
        return fd;
    close(fd);                  /* another thread opened it first */
    return cur && (uint32_t)(cur >> 32) == pid ? (int)(uint32_t)cur - 1 : -1;
}

static uintptr_t page_size(void)
{
    static uintptr_t ps;
    if (!ps) {
        long v = sysconf(_SC_PAGESIZE);
        ps = v > 0 ? (uintptr_t)v : 4096;
    }
    return ps;
}

int cp_untouched_peekable(const void *addr)
{
    uintptr_t ps = page_size();
    unsigned char in;
    return mincore((void *)((uintptr_t)addr - (uintptr_t)addr % ps), 1, &in) != 0 || (in & 1);
}

/* ---- ranges ----------------------------------------------------------- */

struct ranges {             /* sorted, disjoint [lo, hi) address ranges */
    uintptr_t (*r)[2];
    size_t n, cap;
};

static int add_range(struct ranges *rs, uintptr_t lo, uintptr_t hi)
{
    if (lo >= hi)
        return 0;
    if (rs->n && rs->r[rs->n - 1][1] == lo) {
        rs->r[rs->n - 1][1] = hi;
        return 0;
    }
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? 2 * rs->cap : 16;
        void *p = realloc(rs->r, cap * sizeof(*rs->r));
        if (!p)
            return -1;
        rs->r = p;
        rs->cap = cap;
    }
    rs->r[rs->n][0] = lo;
    rs->r[rs->n][1] = hi;
    rs->n++;
    return 0;
}

/* ---- 0. the sample ------------------------------------------------------ */

/* 1 when the page at a is in use (present and not the zero page, or
 * swapped), 0 when it is not, -1 when that cannot be told. */
static int page_in_use(int fd, uintptr_t a)
{
    uintptr_t ps = page_size();
    a -= a % ps;
    if (atomic_load_explicit(&scan_ioctl, memory_order_relaxed) != 0) {
        struct pm_page_region reg;
        struct pm_scan_arg arg = {
            .size = sizeof(arg), .start = a, .end = a + ps,
            .vec = (uintptr_t)&reg, .vec_len = 1,
            .category_anyof_mask = PM_PRESENT | PM_SWAPPED,
            .return_mask = PM_PRESENT | PM_SWAPPED | PM_PFNZERO,
        };
        long r = ioctl(fd, PM_SCAN, &arg);
        if (r >= 0) {
            atomic_store_explicit(&scan_ioctl, 1, memory_order_relaxed);
            return r == 1 && (reg.categories & (PM_SWAPPED | PM_PFNZERO)) != PM_PFNZERO;
        }
        if (errno != ENOTTY && errno != EINVAL && errno != EOPNOTSUPP)
            return -1;
        atomic_store_explicit(&scan_ioctl, 0, memory_order_relaxed);
    }
    uint64_t e;
    if (pread(fd, &e, 8, (off_t)(a / ps * 8)) != 8)
        return -1;
    return (e & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED)) != 0;
}

/* ---- what a range holds (Region.backing) ------------------------------- */

static int scan_resident(int fd, uintptr_t addr, size_t size, uint64_t *resident,
                         uint64_t *huge)
{
    struct pm_page_region runs[64];
    uint64_t at = addr, end = addr + size;
    while (at < end) {
        /* Present pages that are not the zero page, told apart by size. */
        struct pm_scan_arg arg = {
            .size = sizeof(arg), .start = at, .end = end,
            .vec = (uintptr_t)runs, .vec_len = sizeof(runs) / sizeof(*runs),
            .category_inverted = PM_PFNZERO,
            .category_mask = PM_PRESENT | PM_PFNZERO,
            .return_mask = PM_HUGE,
        };
        long n = ioctl(fd, PM_SCAN, &arg);
        if (n < 0)
            return errno;
        for (long i = 0; i < n; i++) {
            uint64_t len = runs[i].end - runs[i].start;
            *resident += len;
            if (runs[i].categories & PM_HUGE)
                *huge += len;
        }
        if (arg.walk_end <= at)
            break;
        at = arg.walk_end;
    }
    return 0;
}

static int pagemap_resident(int fd, uintptr_t addr, size_t size, uint64_t *resident)
{
    uintptr_t ps = page_size();
    uint64_t e[512];
    for (uintptr_t a = addr; a < addr + size;) {
        size_t n = (addr + size - a + ps - 1) / ps;
        if (n > 512)
            n = 512;
        ssize_t got = pread(fd, e, n * 8, (off_t)(a / ps * 8));
        if (got <= 0)
            return got < 0 ? errno : EIO;
        n = (size_t)got / 8;
        for (size_t i = 0; i < n; i++)
            *resident += (e[i] & PAGEMAP_PRESENT) ? ps : 0;
        a += n * ps;
    }
    return 0;
}

int cp_pages_resident(uintptr_t addr, size_t size, uint64_t *resident, uint64_t *huge,
                      int *exact)
{
    *resident = *huge = 0;
    *exact = 0;
    int fd = pagemap();
    if (fd < 0)
        return errno ? errno : EIO;
    if (atomic_load_explicit(&scan_ioctl, memory_order_relaxed) != 0) {
        int err = scan_resident(fd, addr, size, resident, huge);
        if (!err) {
            atomic_store_explicit(&scan_ioctl, 1, memory_order_relaxed);
            *exact = 1;
            return 0;
        }
        if (err != ENOTTY && err != EINVAL && err != EOPNOTSUPP)
            return err;
        atomic_store_explicit(&scan_ioctl, 0, memory_order_relaxed);
        *resident = *huge = 0;
    }
    return pagemap_resident(fd, addr, size, resident);
}

/* The address at byte position pos of the work. */
static uintptr_t position(const struct cp_extent *ext, size_t n, size_t pos)
{
    for (size_t i = 0; i < n; i++) {
        if (pos < ext[i].len)
            return (uintptr_t)ext[i].addr + pos;
        pos -= ext[i].len;
    }
    return (uintptr_t)ext[n - 1].addr + ext[n - 1].len - 1;
}

/* 1: every sampled page is in use; 0: one is not; -1: cannot tell. */
static int sampled_in_use(int fd, const struct cp_extent *ext, size_t n, size_t total)
{
    const size_t at[SAMPLES] = {total - 1, total / 2, total / 4};
    for (int k = 0; k < SAMPLES; k++) {
        int r = page_in_use(fd, position(ext, n, at[k]));
        if (r <= 0)
            return r;
    }
    return 1;
}

/* ---- 1. the mappings ------------------------------------------------------ */

struct vma {
    uintptr_t start, end;
    int ok;                 /* qualifies so far (from the header line): ANON or
                               ANON_HUGETLB, else 0 */
};

enum { ANON = 1, ANON_HUGETLB = 2 };

/* The name the kernel gives a private MAP_ANONYMOUS | MAP_HUGETLB mapping
 * (the unlinked file of its internal hugetlbfs mount). */
#define ANON_HUGETLB_NAME "/anon_hugepage (deleted)"

/* ANON_HUGETLB for a private, writable MAP_ANONYMOUS hugetlb mapping,
 * else 0. */
static int anon_hugetlb(const char *perms)
{
    /* perms offset dev inode name: a device and inode of their own, and
     * that name exactly. */
    const char *q = perms;
    for (int field = 0; field < 4; field++) {
        q = strchr(q, ' ');
        if (!q)
            return 0;
        while (*q == ' ')
            q++;
    }
    size_t len = strlen(ANON_HUGETLB_NAME);
    return strncmp(q, ANON_HUGETLB_NAME, len) == 0
        && (q[len] == '\0' || q[len] == '\n') ? ANON_HUGETLB : 0;
}

static int header_qualifies(const char *line)
{
    /* start-end perms offset dev inode [name] */
    const char *p = strchr(line, ' ');
    if (!p || strlen(p) < 6)
        return 0;
    const char *perms = p + 1;
    if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p')
        return 0;
    const char *q = strchr(perms, ' ');                /* -> offset */
    q = q ? strchr(q + 1, ' ') : NULL;                 /* -> dev */
    if (!q)
        return 0;
    if (strncmp(q + 1, "00:00 ", 6) != 0)
        return anon_hugetlb(perms);
    q += 7;                                            /* inode */
    if (q[0] != '0' || (q[1] != ' ' && q[1] != '\n' && q[1] != '\0'))
        return 0;
    q++;
    while (*q == ' ')
        q++;
    return *q == '\0' || *q == '\n' || strncmp(q, "[heap]", 6) == 0
        || strncmp(q, "[anon:", 6) == 0 ? ANON : 0;
}

static int has_flag(const char *p, const char *flag)
{
    return p[0] == flag[0] && p[1] == flag[1] && (p[2] == ' ' || p[2] == '\n' || !p[2]);
}

/* VmFlags that rule a mapping out: userfaultfd (missing, write-protect,
 * minor), grows down (a stack), I/O or PFN maps, shadow stack, shared
 * ("sh": never on a private mapping, ruled out again); hugetlb ("ht")
 * but where the header found the anonymous kind (kind ANON_HUGETLB),
 * which must have it. */
static int flags_qualify(const char *line, int kind)
{
    static const char *const bad[] = {"um", "uw", "ui", "gd", "io", "pf", "ss", "sh"};
    const char *p = line + strlen("VmFlags:");
    int hugetlb = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!p[0] || p[0] == '\n')
            break;
        for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
            if (has_flag(p, bad[i]))
                return 0;
        hugetlb |= has_flag(p, "ht");
        while (*p && *p != ' ' && *p != '\n')
            p++;
    }
    return hugetlb == (kind == ANON_HUGETLB);
}

/* The qualifying parts of [lo, hi), from /proc/self/smaps read up to hi.
 * -1 when it cannot be read or parsed. */
static int qualifying(uintptr_t lo, uintptr_t hi, struct ranges *out)
{
    int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[8192 + 1];
    size_t have = 0;
    struct vma cur = {0, 0, 0};
    int in_vma = 0, rc = 0, seen_flags = 0, done = 0;
    while (!done) {
        ssize_t k = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            rc = -1;
            break;
        }
        have += (size_t)k;
        buf[have] = '\0';
        int eof = k == 0;
        char *line = buf;
        for (;;) {
            char *nl = strchr(line, '\n');
            if (!nl && !eof)
                break;
            if (nl)
                *nl = '\0';
            if (*line) {
                char c = line[0];
                if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
                    /* a new mapping: finish the one before */
                    if (in_vma && !seen_flags) {
                        rc = -1;        /* no VmFlags line: cannot judge */
                        done = 1;
                        break;
                    }
                    char *dash;
                    unsigned long long s = strtoull(line, &dash, 16);
                    if (*dash != '-') {
                        rc = -1;
                        done = 1;
                        break;
                    }
                    unsigned long long e = strtoull(dash + 1, NULL, 16);
                    if (s >= hi) {
                        in_vma = 0;
                        done = 1;
                        break;
                    }
                    cur.start = (uintptr_t)s;
                    cur.end = (uintptr_t)e;
                    cur.ok = header_qualifies(line);
                    in_vma = 1;
                    seen_flags = 0;
                } else if (in_vma && strncmp(line, "VmFlags:", 8) == 0) {
                    seen_flags = 1;
                    if (cur.ok && flags_qualify(line, cur.ok) && cur.end > lo) {
                        uintptr_t a = cur.start > lo ? cur.start : lo;
                        uintptr_t b = cur.end < hi ? cur.end : hi;
                        if (add_range(out, a, b) < 0) {
                            rc = -1;
                            done = 1;
                            break;
                        }
                    }
                }
            }
            if (!nl) {
                line += strlen(line);
                break;
            }
            line = nl + 1;
        }
        if (done || eof)
            break;
        /* keep the partial last line */
        have = strlen(line);
        memmove(buf, line, have);
        if (have >= sizeof(buf) - 1) {
            rc = -1;            /* a line longer than the buffer */
            break;
        }
    }
    close(fd);
    return rc;
}

/* ---- 2. the pages in use ----------------------------------------------------- */

/* Add to `used` the pages of [lo, hi) (page-aligned) that are in use. */
static int pages_in_use(int fd, uintptr_t lo, uintptr_t hi, struct ranges *used)
{
    uintptr_t ps = page_size();
    if (atomic_load_explicit(&scan_ioctl, memory_order_relaxed) == 1) {
        struct pm_page_region regs[256];
        while (lo < hi) {
            struct pm_scan_arg arg = {
                .size = sizeof(arg), .start = lo, .end = hi,
                .vec = (uintptr_t)regs, .vec_len = 256,
                .category_anyof_mask = PM_PRESENT | PM_SWAPPED,
                .return_mask = PM_PRESENT | PM_SWAPPED | PM_PFNZERO,
            };
            long r = ioctl(fd, PM_SCAN, &arg);
            if (r < 0)
                return -1;
            for (long i = 0; i < r; i++)
                if ((regs[i].categories & (PM_SWAPPED | PM_PFNZERO)) != PM_PFNZERO
                    && add_range(used, (uintptr_t)regs[i].start, (uintptr_t)regs[i].end) < 0)
                    return -1;
            if (arg.walk_end <= lo)
                return -1;
            lo = (uintptr_t)arg.walk_end;
        }
        return 0;
    }
    uint64_t e[512];
    while (lo < hi) {
        size_t want = (hi - lo) / ps;
        if (want > 512)
            want = 512;
        ssize_t got = pread(fd, e, want * 8, (off_t)(lo / ps * 8));
        if (got <= 0 || got % 8)
            return -1;
        for (size_t i = 0; i < (size_t)got / 8; i++)
            if ((e[i] & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED))
                && add_range(used, lo + i * ps, lo + (i + 1) * ps) < 0)
                return -1;
        lo += (size_t)got / 8 * ps;
    }
    return 0;
}

/* ---- 3. what is left ---------------------------------------------------------- */

/* ext minus `drop` (sorted, disjoint): at most n + drop->n pieces. */
static size_t subtract(const struct cp_extent *ext, size_t n, const struct ranges *drop,
                       struct cp_extent **out)
{
    size_t m = 0, j = 0;
    struct cp_extent *res = malloc((n + drop->n) * sizeof(*res));
    if (!res)
        return (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        uintptr_t a = (uintptr_t)ext[i].addr, b = a + ext[i].len;
        while (j < drop->n && drop->r[j][1] <= a)
            j++;
        for (size_t k = j; a < b;) {
            if (k < drop->n && drop->r[k][0] < b) {
                if (drop->r[k][0] > a) {
                    res[m].addr = (char *)a;
                    res[m++].len = drop->r[k][0] - a;
                }
                if (drop->r[k][1] > a)
                    a = drop->r[k][1];
                k++;
            } else {
                res[m].addr = (char *)a;
                res[m++].len = b - a;
                a = b;
            }
        }
    }
    *out = res;
    return m;
}

size_t cp_untouched_trim(const struct cp_extent *ext, size_t n, struct cp_extent **out)
{
    *out = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ext[i].len;
    last = -1;
    if (n == 0 || total == 0)
        return (size_t)-1;
    int fd = pagemap();
    if (fd < 0)
        return (size_t)-1;
    int s = sampled_in_use(fd, ext, n, total);
    if (s != 0) {
        last = s == 1 ? 1 : -1;
        return (size_t)-1;
    }
    uintptr_t ps = page_size();
    uintptr_t lo = (uintptr_t)ext[0].addr, hi = (uintptr_t)ext[n - 1].addr + ext[n - 1].len;
    struct ranges ok = {0}, used = {0}, drop = {0};
    size_t m = (size_t)-1;
    if (qualifying(lo - lo % ps, hi + (ps - hi % ps) % ps, &ok) < 0)
        goto done;
    /* The pages of qualifying mappings that are not in use. */
    int failed = 0;
    for (size_t i = 0; i < ok.n && !failed; i++) {
        used.n = 0;
        if (pages_in_use(fd, ok.r[i][0], ok.r[i][1], &used) < 0) {
            failed = 1;
            break;
        }
        uintptr_t at = ok.r[i][0];
        for (size_t k = 0; k <= used.n && !failed; k++) {
            uintptr_t until = k < used.n ? used.r[k][0] : ok.r[i][1];
            if (add_range(&drop, at, until) < 0)
                failed = 1;
            if (k < used.n)
                at = used.r[k][1];
        }
    }
    if (failed)
        goto done;
    if (drop.n == 0) {
        last = 3;
        goto done;
    }
    m = subtract(ext, n, &drop, out);
    last = m == (size_t)-1 ? -1 : 2;
done:
    free(ok.r);
    free(used.r);
    free(drop.r);
    return m;
}
