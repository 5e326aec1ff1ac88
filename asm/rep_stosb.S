/*
 * cp_clear_rep_stosb(dst=%rdi, len=%rsi)
 *
 * rep stosb: with ERMS/FSRM the microcode picks the store width and, on AMD
 * Zen, turns non-temporal around the L3 size; the length is the hint it uses,
 * so callers give it the whole extent.  Any alignment, any length (0 too).
 */
#include "routine.h"

ROUTINE_START(cp_clear_rep_stosb)
        movq    %rsi, %rcx
        xorl    %eax, %eax
        rep stosb
        ret
ROUTINE_END(cp_clear_rep_stosb)
