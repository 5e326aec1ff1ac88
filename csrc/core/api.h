/*
 * The one bridge between the native modules: clearpages._native (cffi:
 * the routines and the core) exports this table once, in a capsule named
 * CP_API_CAPSULE, and clearpages._fast (the CPython entries) imports it
 * once, at its import, as numpy and datetime export their C APIs.  Both
 * modules are built from one tree, so the table is checked by version and
 * size only.
 *
 * An entry point is one line of CP_API_FUNCTIONS: the field has the name
 * without "cp_" and the type of the function.
 */
#ifndef CLEARPAGES_API_H
#define CLEARPAGES_API_H

#include <stddef.h>
#include <stdint.h>

#include "adapt.h"
#include "clearpages.h"
#include "policy.h"
#include "pool.h"
#include "region.h"
#include "scan.h"
#include "untouched.h"

#define CP_API_CAPSULE "clearpages._native._C_API"
#define CP_API_VERSION 4
#define CP_API_ROUTINES 16      /* room for the routine table */

#define CP_API_FUNCTIONS(X) \
    X(job_new) X(job_from_pages) X(job_configure) X(job_run) X(job_error) \
    X(job_total) X(job_extents) X(job_skip_untouched) X(job_free) \
    X(region_map) X(region_unmap) X(region_discard) X(region_protect) \
    X(region_resize) X(region_move_to) X(region_move_congruent) \
    X(policy_decide) X(policy_hot_all) \
    X(adapt_choose) X(adapt_record_span) X(adapt_now_ns) \
    X(scan_is_zero) X(scan_nonzero_pages) X(untouched_trim) X(untouched_peekable) X(extents_free) \
    X(fork_generation) \
    X(pool_new) X(pool_retain) X(pool_unref) X(pool_take) X(pool_give) X(pool_owns) \
    X(pool_close) X(pool_trim) X(pool_set_pace) X(pool_stats)

/* A routine of the table: NULL where this build has none. */
struct cp_api_routine {
    cp_clear_fn fn;             /* the routine */
    cp_clear_fn job_fn;         /* its unfenced entry for jobs, else fn */
};

struct cp_api {
    uint32_t version;           /* CP_API_VERSION */
    uint32_t size;              /* sizeof(struct cp_api) */
    /* In the order of the routine table (clearpages/_routines.py). */
    struct cp_api_routine routines[CP_API_ROUTINES];
#define CP_API_FIELD(name) __typeof__(&cp_##name) name;
    CP_API_FUNCTIONS(CP_API_FIELD)
#undef CP_API_FIELD
    /* The learner's settled path, taken inline (adapt.h). */
    struct cp_adapt_fast *adapt_fast;
};

#endif
