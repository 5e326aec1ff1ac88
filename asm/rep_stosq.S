/*
 * cp_clear_rep_stosq(dst=%rdi, len=%rsi)
 *
 * rep stosq: the kernel's clear_page_rep, for CPUs with fast strings but
 * without ERMS, where the 8-byte string store beats rep stosb.  Any address,
 * any length (0 too): below 64 bytes the shared overlapping small clear
 * (rep's start-up cost would dominate); otherwise one unaligned qword at the
 * start and one ending exactly at the end cover the ragged edges, and
 * rep stosq fills the 8-byte-aligned body between them.
 */
#include "routine.h"

ROUTINE_START(cp_clear_rep_stosq)
        xorl    %eax, %eax
        cmpq    $64, %rsi
        jb      .Lsmall
        movq    %rax, (%rdi)            /* head: [dst, dst+8) */
        movq    %rax, -8(%rdi, %rsi)    /* tail: [end-8, end) */
        leaq    (%rdi, %rsi), %rcx      /* end */
        addq    $8, %rdi
        andq    $-8, %rdi               /* first qword boundary after dst */
        subq    %rdi, %rcx
        shrq    $3, %rcx                /* whole qwords in [that, end) */
        rep stosq
        ret
.Lsmall:
        CLEAR_SMALL %rdi, %rsi
        ret
ROUTINE_END(cp_clear_rep_stosq)
