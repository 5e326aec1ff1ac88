/*
 * cp_clear_clzero(dst=%rdi, len=%rsi)           requires CLZERO (AMD Zen)
 *
 * clzero zeroes the whole 64-byte line containing %rax without reading it:
 * one instruction per line, weakly ordered like a non-temporal store.  It
 * aligns the address DOWN, so it is issued only for the whole lines [A, B)
 * that NT_HEAD finds inside the buffer; the ragged head and tail (and small
 * clears) use ordinary stores, and the plain entry fences with sfence.
 *
 * Built with -DCP_EMULATE_CLZERO (tests only) the instruction is replaced by
 * ordinary stores to the aligned-down line and the symbol is renamed, so the
 * logic around it can be tested on CPUs without clzero.
 */
#include "routine.h"

#ifdef CP_EMULATE_CLZERO
#define CLZERO_SYMBOL cp_clear_clzero_emulated
#define CLZERO_UNFENCED cp_clear_clzero_emulated_unfenced
#else
#define CLZERO_SYMBOL cp_clear_clzero
#define CLZERO_UNFENCED cp_clear_clzero_unfenced
#endif

.macro CLZERO_LINE off
        leaq    \off(%rdi), %rax
        CLZERO_RAX
.endm

ROUTINE_START(CLZERO_UNFENCED)
        NT_HEAD
        NT_LINES CLZERO_LINE
        NT_TAIL_AND_RETURN
ROUTINE_END(CLZERO_UNFENCED)

NT_FENCED(CLZERO_SYMBOL, CLZERO_UNFENCED)
