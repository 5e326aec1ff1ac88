/*
 * cp_clear_avx2_nt(dst=%rdi, len=%rsi)          requires AVX2 (OS-enabled)
 *
 * vmovntdq ymm: 32-byte non-temporal stores, two per line; fewer store
 * instructions than movnti for the same streaming behaviour.  Any address,
 * any length (0 too): small clears and the ragged head/tail use ordinary GPR
 * stores; only whole 64-byte-aligned lines are streamed.  vzeroupper before
 * returning so the caller's SSE code pays no transition penalty.
 */
#include "routine.h"

.macro YMM_NT_LINE off
        vmovntdq %ymm0, \off(%rdi)
        vmovntdq %ymm0, \off+32(%rdi)
.endm

ROUTINE_START(cp_clear_avx2_nt_unfenced)
        NT_HEAD
        vpxor   %xmm0, %xmm0, %xmm0     /* VEX: zeroes all of ymm0 */
        NT_LINES YMM_NT_LINE
        vzeroupper
        NT_TAIL_AND_RETURN
ROUTINE_END(cp_clear_avx2_nt_unfenced)

NT_FENCED(cp_clear_avx2_nt, cp_clear_avx2_nt_unfenced)
