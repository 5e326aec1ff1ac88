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

enum { SITES = 16 };

static atomic_int armed;                /* any site armed at all */
static atomic_long countdown[SITES];
static atomic_long fired[SITES];
static atomic_int error[SITES];
static atomic_uintptr_t squat;

void cp_inject_arm(int site, long nth, int err)
{
    if (site <= CP_INJECT_NONE || site >= SITES) {
        atomic_store(&armed, 0);
        for (int i = 0; i < SITES; i++) {
            atomic_store(&countdown[i], 0);
            atomic_store(&fired[i], 0);
        }
        atomic_store(&squat, 0);
        return;
    }
    atomic_store(&fired[site], 0);
    atomic_store(&error[site], err);
    atomic_store(&countdown[site], nth);
    atomic_store(&armed, 1);
}

long cp_inject_fired(int site)
{
    return site > CP_INJECT_NONE && site < SITES ? atomic_load(&fired[site]) : 0;
}

uintptr_t cp_inject_squat(void)
{
    return atomic_load(&squat);
}

int cp_inject_hit(int site)
{
    if (__builtin_expect(!atomic_load_explicit(&armed, memory_order_relaxed), 1))
        return 0;
    if (site <= CP_INJECT_NONE || site >= SITES)
        return 0;
    if (atomic_load(&countdown[site]) <= 0 || atomic_fetch_sub(&countdown[site], 1) != 1)
        return 0;
    atomic_fetch_add(&fired[site], 1);
    return atomic_load(&error[site]);
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

void cp_inject_rival(void *dst, size_t n)
{
    memset(dst, 0, n);
}
