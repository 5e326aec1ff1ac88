/*
 * Pools: memory cut into blocks that a native thread zeroes while the
 * program works, so that a zeroed, resident block is there when it is
 * asked for (pool.c).
 *
 * Every block is in one state at a time, changed only under the pool's
 * lock:
 *   fresh  mapped, never touched or handed back to the kernel (trim): it
 *          reads as zero, but its first touches are page faults
 *   ready  zeroed and resident: what acquire hands out at once
 *   dirty  given back by the program, not yet zeroed
 *   busy   being zeroed or faulted in (by the pool's thread or by the
 *          caller that took it), or handed back to the kernel (trim)
 *   out    the program's
 * A block leaves the pool only from ready, or from dirty or fresh through
 * a zeroing or a populate done by the caller itself, so it is zero when it
 * leaves; with debug set it is also read back (the zero scan) first.
 *
 * The thread zeroes dirty blocks with the routine it was given (the
 * policy's choice for memory not used soon: streaming stores, which keep
 * the program's own data in the cache).  Where the program writes each
 * block whole and takes the next at once, a block zeroed at its release
 * with ordinary stores, still in the cache, and handed out next, costs it
 * less: the pool times the program's cycles to find which (pool.c,
 * "reuse").  While fewer than low_water blocks
 * are ready it works flat out and also faults in fresh blocks and maps
 * more (up to max_blocks).  While a caller waits it works flat out too.
 * Otherwise it zeroes at most max_rate bytes a second (0: not at all); but
 * where max_rate is not 0, each caller that finds no block ready raises
 * the number it zeroes ready flat out by one (up to 64 MiB of blocks; the
 * rise halves each second no caller misses): a program that takes blocks
 * faster than the pace would otherwise zero them itself, on its own
 * critical path and with the same memory bandwidth.
 *
 * A forked child inherits no thread: there every pool reads as closed
 * (cp_pool_take refuses with ECHILD), blocks given back are let go, and
 * the memory stays mapped as the protect flags left it.
 *
 * Functions return 0 or an errno value.  None calls Python.
 */
#ifndef CLEARPAGES_POOL_H
#define CLEARPAGES_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "clearpages.h"

/* BEGIN CDEF */

struct cp_pool;

struct cp_pool_config {
    size_t block_size;          /* bytes, a multiple of page_size */
    size_t page_size;           /* 4 KiB, 2 MiB or 1 GiB */
    int kind;                   /* CP_REGION_NORMAL, _THP or _HUGETLB */
    int huge_shift;             /* log2(page_size) for hugetlb */
    size_t max_blocks;          /* the capacity in blocks; 0: no bound */
    size_t grow_blocks;         /* blocks mapped at once when the pool grows */
    size_t low_water;           /* blocks kept ready, flat out */
    uint64_t max_rate;          /* bytes a second above low_water; 0: none;
                                   UINT64_MAX: no limit */
    size_t step;                /* bytes zeroed between two looks at the pace */
    cp_clear_fn zero;           /* the routine that zeroes a dirty block */
    cp_clear_fn zero_near;      /* ... and the one that zeroes a block at its release,
                                   for the next acquire (ordinary stores) */
    int near_tried;             /* reuse AUTO tries that for this pool's blocks (pool_open
                                   asks the policy: below the streaming threshold, no
                                   longer than hot_max) */
    int reuse;                  /* CP_POOL_REUSE_* */
    int protect;                /* CP_PROTECT_* flags for the memory (fork=) */
    int debug;                  /* read every block back before it leaves */
    int scan_variant;           /* the zero scan debug uses (CP_SCAN_*) */
};

/* Where a block given back is zeroed (pool.c, "reuse"). */
enum {
    CP_POOL_REUSE_AUTO = 0,     /* where timing the program's cycles finds it pays */
    CP_POOL_REUSE_COLD = 1,     /* by the thread, with zero; acquire takes any */
    CP_POOL_REUSE_HOT = 2       /* at once by the releaser, with zero_near, and
                                   taken first by the next acquire */
};

/* What cp_pool_take may do when no block is ready. */
enum {
    CP_POOL_READY_ONLY = 0,     /* only a ready block */
    CP_POOL_PREPARE = 1,        /* zero a dirty block or fault in a fresh one
                                   itself, or grow the pool */
    CP_POOL_WAIT = 2,           /* wait up to wait_ns for a block (with
                                   PREPARE: after trying that) */
    CP_POOL_WILL_RETRY = 4      /* the caller asks again if none is ready:
                                   a refusal is not counted */
};

struct cp_pool_stats {
    size_t blocks;              /* mapped */
    size_t fresh, ready, dirty, busy, out;
    size_t max_blocks;          /* 0: no bound */
    size_t ready_target;        /* blocks the thread keeps ready flat out now: low_water,
                                   raised while callers find none ready */
    uint64_t acquires;          /* blocks handed out */
    uint64_t acquires_ready;    /* ... that were ready when asked for */
    uint64_t acquires_waited;   /* ... that were not (prepared by the caller or waited for) */
    uint64_t wait_ns;           /* time those took, in all */
    uint64_t wait_max_ns;       /* the longest */
    uint64_t refused;           /* takes that found no block (READY_ONLY, timeouts) */
    uint64_t releases;
    uint64_t zeroed_bytes;      /* by the pool's thread */
    uint64_t zero_ns;           /* time the thread spent zeroing */
    uint64_t paced_bytes;       /* zeroed by the thread at max_rate */
    uint64_t paced_ns;          /* wall time of those, sleeps included */
    uint64_t caller_zeroed_bytes;   /* zeroed by callers that found none ready */
    uint64_t populated_bytes;   /* fresh blocks faulted in (thread and callers) */
    uint64_t grows;             /* times more memory was mapped */
    uint64_t trimmed_bytes;     /* handed back to the kernel by trim */
    uint64_t checked;           /* blocks read back (debug) */
    uint64_t release_zeroed_bytes;  /* zeroed at their release (reuse hot) */
    uint64_t release_zero_ns;   /* the releasers' time spent on that */
    uint64_t reuse_trials;      /* trials of hot against cold (reuse AUTO) */
    int reuse_hot;              /* 1: blocks given back are zeroed at once now */
    int reuse_tried;            /* 1: reuse AUTO, and blocks it tries hot */
    int closed;                 /* 1: closed; 2: closed, memory kept until the last block */
    int forked;                 /* 1: this process is a child of the pool's */
    int error;                  /* the errno of the thread's last failure (map, populate) */
};

/* A pool and its thread.  The caller holds one reference. */
int cp_pool_new(const struct cp_pool_config *config, struct cp_pool **out);

/* References: the memory is unmapped and the thread stopped when the last
 * goes (a forked child leaves the memory as it is). */
void cp_pool_retain(struct cp_pool *pool);
void cp_pool_unref(struct cp_pool *pool);

/* A block's address in *addr.  flags: CP_POOL_*.  asked_ns: when the
 * caller first asked for this block (cp_adapt_now_ns; 0: now), for the
 * statistics of waiting across calls.  EAGAIN: none in time
 * (or none ready, READY_ONLY); ECANCELED: closed; ECHILD: a forked child's
 * copy; ENOMEM etc.: growing or faulting in failed; EIO: debug found a
 * block not zero (it goes back to be zeroed again).  With CP_POOL_WAIT
 * call without the GIL. */
int cp_pool_take(struct cp_pool *pool, int flags, uint64_t asked_ns, uint64_t wait_ns,
                 uintptr_t *addr);

/* Give a block back (it is zeroed before it leaves again: by the thread,
 * or, while the pool reuses blocks hot, here, before this returns).  EINVAL: addr
 * is not the start of a block of this pool that is out. */
int cp_pool_give(struct cp_pool *pool, uintptr_t addr);

/* 1 when [addr, addr + 1) lies in this pool's memory. */
int cp_pool_owns(struct cp_pool *pool, uintptr_t addr);

/* Close: no block leaves any more and the thread stops.  With no block
 * out the memory is unmapped now; otherwise EBUSY (nothing changes), or
 * with when_released the memory stays until the last block comes back. */
int cp_pool_close(struct cp_pool *pool, int when_released);

/* Hand the idle blocks (ready and dirty) back to the kernel
 * (MADV_DONTNEED): they become fresh, reading as zero.  *bytes: how much;
 * an errno where the kernel refused (hugetlb before Linux 5.18: EINVAL). */
int cp_pool_trim(struct cp_pool *pool, uint64_t *bytes);

/* Change the pace: max_rate and low_water as in the config. */
void cp_pool_set_pace(struct cp_pool *pool, uint64_t max_rate, size_t low_water);

void cp_pool_stats(struct cp_pool *pool, struct cp_pool_stats *out);

/* END CDEF */

#endif
