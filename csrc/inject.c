/* Fault injection for the tests (inject.h). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "inject.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

static atomic_int armed_site;
static atomic_long countdown;
static atomic_long fired;
static atomic_int error;
static atomic_uintptr_t squat;

void cp_inject_arm(int site, long nth, int err)
{
    atomic_store(&armed_site, CP_INJECT_NONE);
    atomic_store(&countdown, nth);
    atomic_store(&fired, 0);
    atomic_store(&error, err);
    atomic_store(&squat, 0);
    atomic_store(&armed_site, site);
}

long cp_inject_fired(void)
{
    return atomic_load(&fired);
}

uintptr_t cp_inject_squat(void)
{
    return atomic_load(&squat);
}

int cp_inject_hit(int site)
{
    if (__builtin_expect(atomic_load_explicit(&armed_site, memory_order_relaxed) != site, 1))
        return 0;
    if (atomic_fetch_sub(&countdown, 1) != 1)
        return 0;
    atomic_fetch_add(&fired, 1);
    return atomic_load(&error);
}

void cp_inject_do_squat(uintptr_t addr)
{
    void *p = mmap((void *)addr, 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return;
    if ((uintptr_t)p != addr) {
        munmap(p, 4096);
        return;
    }
    memset(p, 0x5A, 4096);
    atomic_store(&squat, addr);
}
