/*
 * cp_clear_movnti(dst=%rdi, len=%rsi)
 *
 * movnti: 8-byte non-temporal stores, available on every x86-64 (SSE2).
 * Above the last-level cache it skips the read-for-ownership and leaves the
 * cache to data that is still useful.  Any address, any length (0 too):
 * small clears and the ragged head/tail use ordinary stores (NT_HEAD,
 * NT_TAIL_AND_RETURN); only whole 64-byte lines are streamed, so the write-
 * combining buffers always fill complete lines.
 */
#include "routine.h"

.macro MOVNTI_LINE off
    .irp i, 0, 8, 16, 24, 32, 40, 48, 56
        movnti  %rax, \off+\i(%rdi)
    .endr
.endm

ROUTINE_START(cp_clear_movnti_unfenced)
        NT_HEAD
        NT_LINES MOVNTI_LINE
        NT_TAIL_AND_RETURN
ROUTINE_END(cp_clear_movnti_unfenced)

NT_FENCED(cp_clear_movnti, cp_clear_movnti_unfenced)
