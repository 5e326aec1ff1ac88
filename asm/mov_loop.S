/*
 * cp_clear_mov_loop(dst=%rdi, len=%rsi)
 *
 * Unrolled ordinary stores, 8 x movq per 64 bytes: the kernel's
 * clear_page_orig, for CPUs whose string instructions are slow (no
 * REP_GOOD/ERMS) and as the plain baseline the others are measured against.
 * Any address, any length (0 too); the shared CLEAR_LINES aligns the loop to
 * 64 bytes and finishes with a block ending exactly at the end.
 */
#include "routine.h"

ROUTINE_START(cp_clear_mov_loop)
        xorl    %eax, %eax
        CLEAR_TEMPORAL_AND_RETURN
ROUTINE_END(cp_clear_mov_loop)
