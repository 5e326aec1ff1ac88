/*
 * clearpages: the C interface under the cffi binding.
 *
 * The build hands everything between the BEGIN/END CDEF markers to
 * ffi.cdef(), so that part must stay plain declarations (no preprocessor).
 * The routines themselves (cp_clear_<name>, one per asm/<name>.S) are
 * declared by the build from clearpages/_routines.py, the routine table.
 */
#ifndef CLEARPAGES_H
#define CLEARPAGES_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

/* Every routine: zero len bytes at dst.  Any address, any length, 0 too. */
typedef void (*cp_clear_fn)(void *dst, size_t len);

void cp_clear_libc(void *dst, size_t len);

/* ---- CPU description (cpu.c) ------------------------------------------ */

/* Feature bits of cp_cpu_info.features; cp_feature_name(bit) names them. */
enum {
    CP_FEAT_ERMS = 0,
    CP_FEAT_FSRM,
    CP_FEAT_FZRM,
    CP_FEAT_FSRS,
    CP_FEAT_FSRC,
    CP_FEAT_AVX2,
    CP_FEAT_AVX512F,
    CP_FEAT_CLFLUSHOPT,
    CP_FEAT_MOVDIR64B,
    CP_FEAT_CLZERO,
    CP_FEAT_OSXSAVE,
    CP_FEAT_SSE2,
    CP_FEAT_HYPERVISOR,
    CP_FEAT_COUNT
};

/* One CPUID result, as read by cp_cpuid_dump or written by a test. */
struct cp_cpuid_leaf {
    uint32_t leaf, subleaf;
    uint32_t eax, ebx, ecx, edx;
};

struct cp_cpu_info {
    int is_x86;              /* 0: not x86-64 (or a portable build) */
    char vendor[13];         /* "GenuineIntel", "AuthenticAMD", ... */
    char brand[49];
    uint32_t family, model, stepping;
    uint64_t features;       /* 1 << CP_FEAT_*, after the XCR0 check */
    uint64_t raw_features;   /* the CPUID bits before the XCR0 check */
    uint64_t xcr0;           /* 0 where OSXSAVE is clear */
    uint64_t l1d, l2, l3;    /* bytes, 0 where unknown */
    uint32_t l3_sharing;     /* logical CPUs sharing the L3 */
};

const char *cp_feature_name(int bit);

/* Read the leaves the decoder uses; returns how many were written. */
size_t cp_cpuid_dump(struct cp_cpuid_leaf *out, size_t cap);
/* XCR0, or 0 where XGETBV is not legal (OSXSAVE clear) or not x86. */
uint64_t cp_xgetbv0(void);
/* Pure: describe a CPU from a dump and an XCR0 value. */
void cp_cpu_decode(const struct cp_cpuid_leaf *leaves, size_t n,
                   uint64_t xcr0, struct cp_cpu_info *out);
/* cp_cpuid_dump + cp_xgetbv0 + cp_cpu_decode on this CPU. */
void cp_cpu_probe(struct cp_cpu_info *out);

/* ---- jobs: many extents, in units, threaded, interruptible (jobs.c) ---- */

/* An extent: one contiguous range of bytes, [addr, addr + len). */
struct cp_extent {
    char *addr;
    size_t len;
};

struct cp_job;

/* A job over n extents (addrs[i], lens[i]); copied, sorted by address and
 * merged where they touch or overlap.  NULL when out of memory. */
struct cp_job *cp_job_new(char *const *addrs, const size_t *lens, size_t n);

/* A job over the listed pages of one buffer: page i is
 * [base + i*page_size, base + min((i+1)*page_size, buflen)).
 * Nothing is cleared here.  Returns NULL and sets *bad to the position in
 * pages of the first index outside the buffer (or to n when out of memory). */
struct cp_job *cp_job_from_pages(char *base, size_t buflen,
                                 const int64_t *pages, size_t n,
                                 size_t page_size, size_t *bad);

/* Drop from a job not yet run the pages that read as zero without being
 * written (never touched private anonymous memory: core/untouched.h says
 * which pages qualify and when the check is made).  Returns the bytes
 * dropped; 0 when none were or the check could not be made (the job is
 * then unchanged). */
size_t cp_job_skip_untouched(struct cp_job *job);

/* What to run and how: routine, unit, threads (1..CP_MAX_THREADS), fence:
 * issue sfence once per thread when it stops (for a streaming routine's
 * unfenced entry).  unit: the bytes of a thread's first unit of work while
 * the routine's speed is not yet known (rounded down to 4 KiB, at least
 * 4 KiB).  Later units are sized by time: from the speed this process last
 * measured for the routine, each one ends by the slice's deadline. */
enum { CP_MAX_THREADS = 256 };
int cp_job_configure(struct cp_job *job, cp_clear_fn fn, size_t unit,
                     int threads, int fence);

/* Clear until done (returns 1) or until budget_ns has passed (returns 0:
 * call again).  Returns -1 if a worker thread could not be started
 * (cp_job_error says why; the job stays failed) or the job has no routine.
 * Every unit handed out is finished before it returns.  Call without the
 * GIL. */
int cp_job_run(struct cp_job *job, uint64_t budget_ns);
/* The errno of the thread start that failed, 0 if none did. */
int cp_job_error(const struct cp_job *job);

/* The speed last measured for a routine, bytes per microsecond of one
 * thread (0: not yet), and a way to forget them all (tests). */
uint64_t cp_job_rate(cp_clear_fn fn);
void cp_job_forget_rates(void);

size_t cp_job_total(const struct cp_job *job);     /* bytes in all */
size_t cp_job_extents(const struct cp_job *job);   /* after merging */
void cp_job_free(struct cp_job *job);

/* ---- fork (fork.c) ------------------------------------------------------ */

/* Changes in every forked child (the parent's number stays): memory a child
 * does not inherit (MADV_DONTFORK) is recognized by the number it was
 * mapped under. */
uint64_t cp_fork_generation(void);

/* END CDEF */

/* Block the asynchronous signals in the calling thread (*old: the mask to
 * put back), before it starts a thread of the core (jobs.c): those stay
 * with the threads Python watches, faults reach the process's handlers. */
#include <signal.h>
void cp_block_async_signals(sigset_t *old);

/* Register fork handlers (pthread_atfork, which this module, linked without
 * start files, cannot call as such: fork.c says why). */
int cp_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void));

#endif
