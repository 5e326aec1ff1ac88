/*
 * The pool's core under AddressSanitizer and UndefinedBehaviorSanitizer
 * (tests/test_pool_sanitized.py builds it): threads take, scribble over
 * and give back blocks of one small pool that grows while they do, with
 * reuse auto, cold or hot (argv[1]: CP_POOL_REUSE_*), so that blocks go
 * round between the program, the thread, callers zeroing them and
 * releases zeroing them.  Every block taken must read zero; the counts
 * must add up; the sanitizers fail the run on a bad access or a leak.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

enum { THREADS = 4, ITERATIONS = 4000 };
static const size_t BS = 64 << 10;
static struct cp_pool *pool;

static void zero(void *p, size_t n)
{
    memset(p, 0, n);
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int it = 0; it < ITERATIONS; it++) {
        uintptr_t held[3];
        int want = 1 + (int)(rand_r(&seed) % 3), got = 0;
        for (int j = 0; j < want; j++) {
            if (cp_pool_take(pool, CP_POOL_PREPARE | CP_POOL_WAIT, 0, 10000000000ull,
                             &held[got]) != 0)
                continue;
            const unsigned char *b = (const unsigned char *)held[got];
            for (size_t x = 0; x < BS; x++)
                if (b[x]) {
                    fprintf(stderr, "byte %zu of a block taken is %d\n", x, b[x]);
                    abort();
                }
            memset((void *)held[got], 1 + it % 200, BS);
            got++;
        }
        for (int j = 0; j < got; j++)
            if (cp_pool_give(pool, held[j]) != 0) {
                fprintf(stderr, "a block was not taken back\n");
                abort();
            }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    struct cp_pool_config c = {0};
    c.block_size = BS;
    c.page_size = 4096;
    c.max_blocks = 32;
    c.grow_blocks = 2;          /* grows while the threads work */
    c.low_water = 1;
    c.max_rate = UINT64_MAX;
    c.step = 16 << 10;
    c.zero = zero;
    c.zero_near = zero;
    c.near_tried = 1;
    c.reuse = atoi(argv[1]);
    int err = cp_pool_new(&c, &pool);
    if (err) {
        fprintf(stderr, "cp_pool_new: %s\n", strerror(err));
        return 1;
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    struct cp_pool_stats s;
    cp_pool_stats(pool, &s);
    if (s.acquires != s.releases || s.out
        || s.blocks != s.fresh + s.ready + s.dirty + s.busy + s.out) {
        fprintf(stderr, "counts do not add up\n");
        return 1;
    }
    printf("acquires %llu release_zeroed %llu trials %llu grows %llu reuse_hot %d\n",
           (unsigned long long)s.acquires, (unsigned long long)(s.release_zeroed_bytes / BS),
           (unsigned long long)s.reuse_trials, (unsigned long long)s.grows, s.reuse_hot);
    if (cp_pool_close(pool, 0) != 0)
        return 1;
    cp_pool_unref(pool);
    return 0;
}
