/*
 * The CPU probe: which clearing instructions exist, whether the OS enabled
 * the register state they need, and how big the caches are.
 *
 * Split in two so the decoding is testable with synthetic CPUs: the dump
 * reads the raw CPUID leaves, the decoder is a pure function of a dump and
 * XCR0.  Bit positions follow the Linux kernel's cpufeatures.h; the cache
 * walk follows glibc's dl-cacheinfo.h (leaf 4 on Intel, 0x8000001D on AMD).
 */
#include <string.h>

#include "clearpages.h"

#if defined(__x86_64__) && !defined(CP_PORTABLE)
#include <cpuid.h>
#define CP_HAVE_CPUID 1
#endif

static const char *const feature_names[CP_FEAT_COUNT] = {
    [CP_FEAT_ERMS] = "erms",
    [CP_FEAT_FSRM] = "fsrm",
    [CP_FEAT_FZRM] = "fzrm",
    [CP_FEAT_FSRS] = "fsrs",
    [CP_FEAT_FSRC] = "fsrc",
    [CP_FEAT_AVX2] = "avx2",
    [CP_FEAT_AVX512F] = "avx512f",
    [CP_FEAT_CLFLUSHOPT] = "clflushopt",
    [CP_FEAT_MOVDIR64B] = "movdir64b",
    [CP_FEAT_CLZERO] = "clzero",
    [CP_FEAT_OSXSAVE] = "osxsave",
    [CP_FEAT_SSE2] = "sse2",
    [CP_FEAT_HYPERVISOR] = "hypervisor",
};

const char *cp_feature_name(int bit)
{
    return (bit >= 0 && bit < CP_FEAT_COUNT) ? feature_names[bit] : NULL;
}

/* XCR0 state components: 1 SSE, 2 AVX (upper ymm), 5-7 opmask/zmm. */
#define XCR0_AVX_STATE    0x06u
#define XCR0_AVX512_STATE 0xe6u

/* ---- reading the CPU -------------------------------------------------- */

#ifdef CP_HAVE_CPUID
static void put(struct cp_cpuid_leaf *out, size_t cap, size_t *n,
                uint32_t leaf, uint32_t subleaf)
{
    if (*n >= cap)
        return;
    struct cp_cpuid_leaf *l = &out[(*n)++];
    l->leaf = leaf;
    l->subleaf = subleaf;
    __cpuid_count(leaf, subleaf, l->eax, l->ebx, l->ecx, l->edx);
}

/* The deterministic cache leaves end with a subleaf whose type is 0. */
static void put_cache_walk(struct cp_cpuid_leaf *out, size_t cap, size_t *n,
                           uint32_t leaf)
{
    for (uint32_t sub = 0; sub < 16 && *n < cap; sub++) {
        put(out, cap, n, leaf, sub);
        if ((out[*n - 1].eax & 0x1f) == 0)
            break;
    }
}
#endif

size_t cp_cpuid_dump(struct cp_cpuid_leaf *out, size_t cap)
{
    size_t n = 0;
#ifdef CP_HAVE_CPUID
    unsigned int max_leaf = __get_cpuid_max(0, NULL);
    unsigned int max_ext = __get_cpuid_max(0x80000000u, NULL);

    put(out, cap, &n, 0, 0);
    if (max_leaf >= 1)
        put(out, cap, &n, 1, 0);
    if (max_leaf >= 4)
        put_cache_walk(out, cap, &n, 4);
    if (max_leaf >= 7) {
        put(out, cap, &n, 7, 0);
        put(out, cap, &n, 7, 1);
    }
    put(out, cap, &n, 0x80000000u, 0);
    for (uint32_t leaf = 0x80000002u; leaf <= 0x80000004u && leaf <= max_ext; leaf++)
        put(out, cap, &n, leaf, 0);
    if (max_ext >= 0x80000001u)
        put(out, cap, &n, 0x80000001u, 0);
    for (uint32_t leaf = 0x80000005u; leaf <= 0x80000006u && leaf <= max_ext; leaf++)
        put(out, cap, &n, leaf, 0);
    if (max_ext >= 0x80000008u)
        put(out, cap, &n, 0x80000008u, 0);
    /* 0x8000001D exists only with TOPOEXT (0x80000001 ECX[22]); before
     * that (and in some hypervisors' CPUID) it may hold anything. */
    if (max_ext >= 0x8000001Du) {
        unsigned int a, b, c, d;
        __cpuid(0x80000001u, a, b, c, d);
        if ((c >> 22) & 1)
            put_cache_walk(out, cap, &n, 0x8000001Du);
    }
#else
    (void)out;
    (void)cap;
#endif
    return n;
}

uint64_t cp_xgetbv0(void)
{
#ifdef CP_HAVE_CPUID
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
        return 0;       /* OSXSAVE clear: XGETBV would fault */
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
#else
    return 0;
#endif
}

/* ---- decoding ---------------------------------------------------------- */

static const struct cp_cpuid_leaf *find(const struct cp_cpuid_leaf *leaves,
                                        size_t n, uint32_t leaf,
                                        uint32_t subleaf)
{
    for (size_t i = 0; i < n; i++)
        if (leaves[i].leaf == leaf && leaves[i].subleaf == subleaf)
            return &leaves[i];
    return NULL;
}

static int bit(const struct cp_cpuid_leaf *l, char reg, int b)
{
    if (!l)
        return 0;
    uint32_t v = reg == 'a' ? l->eax : reg == 'b' ? l->ebx
               : reg == 'c' ? l->ecx : l->edx;
    return (v >> b) & 1;
}

static void copy_regs(char *dst, const uint32_t *regs, int count)
{
    memcpy(dst, regs, 4 * (size_t)count);
}

static void decode_caches(const struct cp_cpuid_leaf *leaves, size_t n,
                          uint32_t leaf, struct cp_cpu_info *out)
{
    for (uint32_t sub = 0; sub < 16; sub++) {
        const struct cp_cpuid_leaf *l = find(leaves, n, leaf, sub);
        if (!l)
            break;
        uint32_t type = l->eax & 0x1f;
        uint32_t level = (l->eax >> 5) & 0x7;
        if (type == 0)
            break;
        if (type == 2)
            continue;   /* instruction cache */
        uint64_t size = (uint64_t)(((l->ebx >> 22) & 0x3ff) + 1)
                      * (((l->ebx >> 12) & 0x3ff) + 1)
                      * ((l->ebx & 0xfff) + 1)
                      * ((uint64_t)l->ecx + 1);
        uint32_t sharing = ((l->eax >> 14) & 0xfff) + 1;
        if (level == 1)
            out->l1d = size;
        else if (level == 2)
            out->l2 = size;
        else if (level == 3) {
            out->l3 = size;
            out->l3_sharing = sharing;
        }
    }
}

/* AMD's leaves before TOPOEXT: 0x80000005 ECX[31:24] L1d KiB, 0x80000006
 * ECX[31:16] L2 KiB, EDX[31:18] L3 in 512 KiB units. */
static void decode_legacy_amd_caches(const struct cp_cpuid_leaf *leaves, size_t n,
                                     struct cp_cpu_info *out)
{
    const struct cp_cpuid_leaf *l5 = find(leaves, n, 0x80000005u, 0);
    const struct cp_cpuid_leaf *l6 = find(leaves, n, 0x80000006u, 0);
    if (l5)
        out->l1d = (uint64_t)(l5->ecx >> 24) << 10;
    if (l6) {
        out->l2 = (uint64_t)(l6->ecx >> 16) << 10;
        out->l3 = (uint64_t)(l6->edx >> 18) * (512u << 10);
    }
}

void cp_cpu_decode(const struct cp_cpuid_leaf *leaves, size_t n,
                   uint64_t xcr0, struct cp_cpu_info *out)
{
    memset(out, 0, sizeof(*out));
    const struct cp_cpuid_leaf *l0 = find(leaves, n, 0, 0);
    if (!l0) {
        strcpy(out->vendor, "unknown");
        return;
    }
    out->is_x86 = 1;
    uint32_t vendor_regs[3] = {l0->ebx, l0->edx, l0->ecx};
    copy_regs(out->vendor, vendor_regs, 3);

    const struct cp_cpuid_leaf *l1 = find(leaves, n, 1, 0);
    if (l1) {
        uint32_t family = (l1->eax >> 8) & 0xf;
        uint32_t model = (l1->eax >> 4) & 0xf;
        if (family == 0xf)
            family += (l1->eax >> 20) & 0xff;
        if (family == 6 || family >= 0xf)
            model += ((l1->eax >> 16) & 0xf) << 4;
        out->family = family;
        out->model = model;
        out->stepping = l1->eax & 0xf;
    }

    const struct cp_cpuid_leaf *l7 = find(leaves, n, 7, 0);
    const struct cp_cpuid_leaf *l7_1 = find(leaves, n, 7, 1);
    const struct cp_cpuid_leaf *le8 = find(leaves, n, 0x80000008u, 0);
    uint64_t f = 0;
#define SET(feat, cond) do { if (cond) f |= 1ull << (feat); } while (0)
    SET(CP_FEAT_SSE2, bit(l1, 'd', 26));
    SET(CP_FEAT_OSXSAVE, bit(l1, 'c', 27));
    SET(CP_FEAT_HYPERVISOR, bit(l1, 'c', 31));   /* running as a guest */
    SET(CP_FEAT_AVX2, bit(l7, 'b', 5));
    SET(CP_FEAT_ERMS, bit(l7, 'b', 9));
    SET(CP_FEAT_AVX512F, bit(l7, 'b', 16));
    SET(CP_FEAT_CLFLUSHOPT, bit(l7, 'b', 23));
    SET(CP_FEAT_MOVDIR64B, bit(l7, 'c', 28));
    SET(CP_FEAT_FSRM, bit(l7, 'd', 4));
    SET(CP_FEAT_FZRM, bit(l7_1, 'a', 10));
    SET(CP_FEAT_FSRS, bit(l7_1, 'a', 11));
    SET(CP_FEAT_FSRC, bit(l7_1, 'a', 12));
    SET(CP_FEAT_CLZERO, bit(le8, 'b', 0));
#undef SET
    out->raw_features = f;

    /* A vector extension counts only when the OS saves its registers. */
    int osxsave = (f >> CP_FEAT_OSXSAVE) & 1;
    out->xcr0 = osxsave ? xcr0 : 0;
    if ((out->xcr0 & XCR0_AVX_STATE) != XCR0_AVX_STATE)
        f &= ~((1ull << CP_FEAT_AVX2) | (1ull << CP_FEAT_AVX512F));
    if ((out->xcr0 & XCR0_AVX512_STATE) != XCR0_AVX512_STATE)
        f &= ~(1ull << CP_FEAT_AVX512F);
    out->features = f;

    uint32_t brand[12];
    int have_brand = 1;
    for (uint32_t i = 0; i < 3; i++) {
        const struct cp_cpuid_leaf *b = find(leaves, n, 0x80000002u + i, 0);
        if (!b) {
            have_brand = 0;
            break;
        }
        brand[4 * i] = b->eax;
        brand[4 * i + 1] = b->ebx;
        brand[4 * i + 2] = b->ecx;
        brand[4 * i + 3] = b->edx;
    }
    if (have_brand) {
        copy_regs(out->brand, brand, 12);
        out->brand[48] = '\0';
    }

    /* AMD (and Hygon) describe caches in 0x8000001D, Intel in leaf 4.  On
     * AMD that leaf is read only with TOPOEXT (0x80000001 ECX[22]); without
     * it the legacy leaves 0x80000005/6 give the sizes (not the sharing). */
    int amd = !strcmp(out->vendor, "AuthenticAMD") || !strcmp(out->vendor, "HygonGenuine");
    if (!amd)
        decode_caches(leaves, n, 4, out);
    else if (bit(find(leaves, n, 0x80000001u, 0), 'c', 22))
        decode_caches(leaves, n, 0x8000001Du, out);
    else
        decode_legacy_amd_caches(leaves, n, out);
}

void cp_cpu_probe(struct cp_cpu_info *out)
{
    struct cp_cpuid_leaf leaves[64];
    size_t n = cp_cpuid_dump(leaves, 64);
    cp_cpu_decode(leaves, n, cp_xgetbv0(), out);
}
