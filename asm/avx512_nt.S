/*
 * cp_clear_avx512_nt(dst=%rdi, len=%rsi)        requires AVX512F (OS-enabled)
 *
 * vmovntdq zmm: one 64-byte non-temporal store per line, a whole line per
 * instruction, the fewest stores of any streaming routine.  Any address, any
 * length (0 too): small clears and the ragged head/tail use ordinary GPR
 * stores; only whole 64-byte-aligned lines are streamed.  Uses zmm0 (not
 * zmm16+), so vzeroupper before returning.
 */
#include "routine.h"

.macro ZMM_NT_LINE off
        vmovntdq %zmm0, \off(%rdi)
.endm

ROUTINE_START(cp_clear_avx512_nt_unfenced)
        NT_HEAD
        vpxor   %xmm0, %xmm0, %xmm0     /* VEX: zeroes all of zmm0 */
        NT_LINES ZMM_NT_LINE
        vzeroupper
        NT_TAIL_AND_RETURN
ROUTINE_END(cp_clear_avx512_nt_unfenced)

NT_FENCED(cp_clear_avx512_nt, cp_clear_avx512_nt_unfenced)
