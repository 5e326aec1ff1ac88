/*
 * Standalone harness for the asm/ clearing routines.
 *
 *   gcc -O2 -fcf-protection=full -Iasm tests/c/test_routines.c \
 *       tests/c/clzero_emulated.S asm/[all .S files] -o /tmp/tr && /tmp/tr
 *   /tmp/tr --bench          # GB/s on 8 MiB and 512 MiB (not a test)
 *
 * For every routine the CPU can run: every length 0..600 at each of 64
 * alignments, guarded by 256 bytes of 0xAA on both sides (prefilled with 0x55
 * inside); large odd lengths at odd alignments; buffers that end right at a
 * PROT_NONE page (a stray write past the end faults); and the callee-saved
 * registers (rbx, rbp, r12-r15, rsp) checked around each call.
 * Routines the CPU lacks are skipped with a message.
 * cp_clear_clzero_emulated (clzero.S built with -DCP_EMULATE_CLZERO) runs
 * everywhere and tests the clzero routine's head/body/tail logic.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef void (*clear_fn)(void *dst, size_t len);

void cp_clear_rep_stosb(void *, size_t);
void cp_clear_rep_stosq(void *, size_t);
void cp_clear_mov_loop(void *, size_t);
void cp_clear_movnti(void *, size_t);
void cp_clear_avx2_nt(void *, size_t);
void cp_clear_avx512_nt(void *, size_t);
void cp_clear_clzero(void *, size_t);
void cp_clear_clzero_emulated(void *, size_t);

struct routine {
    const char *name;
    clear_fn fn;
    const char *requires;       /* NULL, "avx2", "avx512f" or "clzero" */
};

static const struct routine ROUTINES[] = {
    {"rep_stosb", cp_clear_rep_stosb, NULL},
    {"rep_stosq", cp_clear_rep_stosq, NULL},
    {"mov_loop", cp_clear_mov_loop, NULL},
    {"movnti", cp_clear_movnti, NULL},
    {"avx2_nt", cp_clear_avx2_nt, "avx2"},
    {"avx512_nt", cp_clear_avx512_nt, "avx512f"},
    {"clzero", cp_clear_clzero, "clzero"},
    {"clzero(emulated)", cp_clear_clzero_emulated, NULL},
};
#define NROUTINES (sizeof ROUTINES / sizeof ROUTINES[0])

static int has_clzero(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000008u)
        return 0;
    __get_cpuid(0x80000008u, &a, &b, &c, &d);
    return b & 1;
}

static int supported(const struct routine *r)
{
    if (!r->requires)
        return 1;
    /* libgcc's cpu model also checks XCR0, so "avx512f" means OS-enabled. */
    if (!strcmp(r->requires, "avx2"))
        return __builtin_cpu_supports("avx2");
    if (!strcmp(r->requires, "avx512f"))
        return __builtin_cpu_supports("avx512f");
    if (!strcmp(r->requires, "clzero"))
        return has_clzero();
    return 0;
}

/* Calls fn(dst, len) with sentinels in the callee-saved registers; returns 0
 * if all of them and %rsp come back unchanged. */
uint64_t call_checked(clear_fn fn, void *dst, size_t len);
uint64_t saved_rsp __attribute__((used));
__asm__(
    ".text\n"
    ".globl call_checked\n"
    ".type call_checked, @function\n"
    "call_checked:\n"
    "  endbr64\n"
    "  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
    "  sub $8, %rsp\n"
    "  mov %rsp, saved_rsp(%rip)\n"
    "  mov %rdi, %rax\n  mov %rsi, %rdi\n  mov %rdx, %rsi\n"
    "  movabs $0x1b1b1b1b1b1b1b1b, %rbx\n"
    "  movabs $0x2b2b2b2b2b2b2b2b, %rbp\n"
    "  movabs $0x1212121212121212, %r12\n"
    "  movabs $0x1313131313131313, %r13\n"
    "  movabs $0x1414141414141414, %r14\n"
    "  movabs $0x1515151515151515, %r15\n"
    "  call *%rax\n"
    "  xor %eax, %eax\n"
    "  cmp saved_rsp(%rip), %rsp\n  setne %al\n"
    "  movabs $0x1b1b1b1b1b1b1b1b, %rcx\n  xor %rcx, %rbx\n  or %rbx, %rax\n"
    "  movabs $0x2b2b2b2b2b2b2b2b, %rcx\n  xor %rcx, %rbp\n  or %rbp, %rax\n"
    "  movabs $0x1212121212121212, %rcx\n  xor %rcx, %r12\n  or %r12, %rax\n"
    "  movabs $0x1313131313131313, %rcx\n  xor %rcx, %r13\n  or %r13, %rax\n"
    "  movabs $0x1414141414141414, %rcx\n  xor %rcx, %r14\n  or %r14, %rax\n"
    "  movabs $0x1515151515151515, %rcx\n  xor %rcx, %r15\n  or %r15, %rax\n"
    "  add $8, %rsp\n"
    "  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"
    "  ret\n"
    ".size call_checked, .-call_checked\n");

static long failures;

static void fail(const char *name, size_t align, size_t len, const char *what,
                 long at)
{
    if (failures++ < 20)
        fprintf(stderr, "FAIL %s align=%zu len=%zu: %s (offset %ld)\n",
                name, align, len, what, at);
}

#define GUARD 256

/* buf has GUARD bytes before dst and GUARD bytes after dst+len. */
static void check_one(const struct routine *r, unsigned char *buf,
                      size_t align, size_t len)
{
    unsigned char *dst = buf + GUARD + align;
    size_t total = GUARD + align + len + GUARD;

    memset(buf, 0xAA, total);
    memset(dst, 0x55, len);
    if (call_checked(r->fn, dst, len))
        fail(r->name, align, len, "callee-saved register or %rsp changed", -1);
    for (size_t i = 0; i < GUARD + align; i++)
        if (buf[i] != 0xAA) {
            fail(r->name, align, len, "wrote before dst", (long)i - (long)(GUARD + align));
            return;
        }
    for (size_t i = 0; i < len; i++)
        if (dst[i] != 0) {
            fail(r->name, align, len, "byte not cleared", (long)i);
            return;
        }
    for (size_t i = 0; i < GUARD; i++)
        if (dst[len + i] != 0xAA) {
            fail(r->name, align, len, "wrote past the end", (long)(len + i));
            return;
        }
}

/* dst+len ends exactly at a PROT_NONE page, dst starts just after one. */
static void check_fenced(const struct routine *r, unsigned char *fence_lo,
                         unsigned char *fence_hi, size_t len)
{
    unsigned char *dst = fence_hi - len;
    memset(dst, 0x55, len);
    r->fn(dst, len);
    for (size_t i = 0; i < len; i++)
        if (dst[i] != 0) {
            fail(r->name, (uintptr_t)dst & 63, len, "fenced-end: byte not cleared", (long)i);
            return;
        }
    dst = fence_lo;
    memset(dst, 0x55, len);
    r->fn(dst, len);
    for (size_t i = 0; i < len; i++)
        if (dst[i] != 0) {
            fail(r->name, 0, len, "fenced-start: byte not cleared", (long)i);
            return;
        }
}

static unsigned char *map(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

static int run_tests(void)
{
    static const size_t big_lens[] = {
        4095, 4096, 4097, 65535, 65536, 65537, (1 << 20) + 1, (1 << 20) + 13,
        (2 << 20) + 63, (3 << 20) + 4095,
    };
    static const size_t big_aligns[] = {0, 1, 7, 8, 31, 33, 63, 64 + 17, 4095};
    const size_t big_max = (3 << 20) + 4095 + 4096;
    unsigned char *small = map(2 * GUARD + 64 + 600 + 4096);
    unsigned char *big = map(2 * GUARD + big_max);
    long page = sysconf(_SC_PAGESIZE);
    /* [ PROT_NONE | 2 pages RW | PROT_NONE ] */
    unsigned char *fenced = map(4 * page);
    mprotect(fenced, page, PROT_NONE);
    mprotect(fenced + 3 * page, page, PROT_NONE);

    for (size_t k = 0; k < NROUTINES; k++) {
        const struct routine *r = &ROUTINES[k];
        long before = failures;
        if (!supported(r)) {
            printf("SKIP %-17s (this CPU lacks %s)\n", r->name, r->requires);
            continue;
        }
        for (size_t align = 0; align < 64; align++)
            for (size_t len = 0; len <= 600; len++)
                check_one(r, small, align, len);
        for (size_t i = 0; i < sizeof big_lens / sizeof *big_lens; i++)
            for (size_t j = 0; j < sizeof big_aligns / sizeof *big_aligns; j++)
                check_one(r, big, big_aligns[j], big_lens[i]);
        for (size_t len = 0; len <= 2 * (size_t)page; len++)
            check_fenced(r, fenced + page, fenced + 3 * page, len);
        printf("%s %-17s\n", failures == before ? "ok  " : "FAIL", r->name);
    }
    printf("%s: %ld failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures != 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int run_bench(void)
{
    static const size_t sizes[] = {8u << 20, 512u << 20};
    printf("%-17s %12s %12s\n", "routine", "8 MiB GB/s", "512 MiB GB/s");
    unsigned char *bufs[2];
    for (int s = 0; s < 2; s++) {
        bufs[s] = map(sizes[s]);
        memset(bufs[s], 1, sizes[s]);          /* prefault */
    }
    for (size_t k = 0; k < NROUTINES; k++) {
        const struct routine *r = &ROUTINES[k];
        if (!supported(r))
            continue;
        printf("%-17s", r->name);
        for (int s = 0; s < 2; s++) {
            int reps = s == 0 ? 40 : 5;
            double best = 1e30;
            r->fn(bufs[s], sizes[s]);          /* warm up */
            for (int i = 0; i < reps; i++) {
                double t = now();
                r->fn(bufs[s], sizes[s]);
                t = now() - t;
                if (t < best)
                    best = t;
            }
            printf(" %12.1f", sizes[s] / best / 1e9);
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--bench"))
        return run_bench();
    return run_tests();
}
