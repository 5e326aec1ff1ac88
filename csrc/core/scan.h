/*
 * Zero detection: is every byte of a buffer zero, and which pages of it
 * hold a nonzero byte (scan.c).
 *
 * One scanner per instruction-set variant, each compiled for its own target
 * (function attributes), so the module runs on any x86-64 and only a CPU
 * with the feature ever executes the variant.  The caller picks the variant
 * from the CPU's (masked) features: cp_scan_requires() says which feature
 * bits each one needs.  Every scanner reads only bytes inside the buffer and
 * writes nothing.
 */
#ifndef CLEARPAGES_SCAN_H
#define CLEARPAGES_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

/* The variants, in order of preference (the highest usable one wins). */
enum {
    CP_SCAN_WORDS = 0,      /* 8-byte loads: any CPU, the portable build */
    CP_SCAN_SSE2,           /* 16-byte loads, one test per 256 bytes */
    CP_SCAN_AVX2,           /* 32-byte loads, one test per 256 bytes */
    CP_SCAN_COUNT
};

/* "words", "sse2", "avx2"; NULL outside 0..CP_SCAN_COUNT-1. */
const char *cp_scan_name(int variant);
/* 1 << CP_FEAT_* bits the variant needs (0: none). */
uint64_t cp_scan_requires(int variant);
/* 1 when this build has the variant (a portable build has only words). */
int cp_scan_built(int variant);

/* 1 when the len bytes at buf are all zero, else 0.  threads > 1 splits a
 * large buffer between that many threads (each stops as soon as any finds
 * a nonzero byte); where a thread cannot be started its share is scanned
 * by the caller.  A variant not built here scans with words. */
int cp_scan_is_zero(int variant, const void *buf, size_t len, int threads);

/* The pages [buf + i*page_size, buf + min((i+1)*page_size, len)) that hold
 * a nonzero byte: their indices i, ascending, written to out (room for
 * ceil(len / page_size) entries); returns how many.  page_size > 0. */
size_t cp_scan_nonzero_pages(int variant, const void *buf, size_t len,
                             size_t page_size, int64_t *out, int threads);

/* END CDEF */

#endif
