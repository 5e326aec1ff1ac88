/* fork: handlers for the state a forked child must not inherit as it is. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "clearpages.h"

#ifdef __GLIBC__
/* glibc's pthread_atfork is a static stub (libc_nonshared.a) that passes
 * the module's __dso_handle, which comes from crtbegin; the native module
 * is linked without start files (_ffi_build.py says why), so register the
 * way the stub does, with no handle (nothing unloads an extension module). */
extern int __register_atfork(void (*prepare)(void), void (*parent)(void),
                             void (*child)(void), void *dso_handle);

int cp_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    return __register_atfork(prepare, parent, child, NULL);
}
#else
int cp_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    return pthread_atfork(prepare, parent, child);
}
#endif

static atomic_uint_least64_t generation;

static void count_child(void)
{
    atomic_fetch_add_explicit(&generation, 1, memory_order_relaxed);
}

__attribute__((constructor)) static void register_fork_count(void)
{
    cp_at_fork(NULL, NULL, count_child);
}

uint64_t cp_fork_generation(void)
{
    return atomic_load_explicit(&generation, memory_order_relaxed);
}
