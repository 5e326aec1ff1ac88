/*
 * Shared entry/exit for the clearing routines (included by every routine source).
 *
 * Every routine is  void cp_clear_<name>(void *dst, size_t len)  under the
 * SysV ABI: dst in %rdi, len in %rsi; it may clobber %rax, %rcx, %rdx,
 * %rsi, %rdi, %r8-%r11 and the vector registers, and nothing else.
 */
#ifndef CLEARPAGES_ROUTINE_H
#define CLEARPAGES_ROUTINE_H

#ifdef __CET__
#include <cet.h>        /* .note.gnu.property: IBT and SHSTK compatible */
#endif

#define ROUTINE_START(name)          \
        .text;                       \
        .globl name;                 \
        .hidden name;                \
        .type name, @function;       \
        .p2align 5;                  \
name:                                \
        .cfi_startproc;              \
        endbr64

#define ROUTINE_END(name)            \
        .cfi_endproc;                \
        .size name, .-name

/* The extension's stack stays non-executable. */
        .section .note.GNU-stack, "", @progbits

/*
 * Shared head/tail handling.  The conventions every macro below relies on:
 * dst in %rdi, len in %rsi, and %rax == 0 (the zero the GPR stores write).
 * Labels are made unique per expansion with \@, so a macro may be used more
 * than once in a file.  Nothing touches the stack, so the CFI never changes.
 */

/* Below this many bytes the non-temporal routines clear with ordinary stores:
 * the head/tail dispatch and the fence cost more than the read-for-ownership
 * they save, and the lines are likely to be read again soon anyway.  It also
 * guarantees the streamed body is at least three whole lines: B - A >= len - 126
 * (see NT_HEAD), a multiple of 64, so >= 192. */
#define NT_MIN_BYTES 256

/* Four qword stores of %rax at off(base) or off(base,idx): 32 bytes, any
 * alignment.  ZERO64 is two of them. */
.macro ZERO32 off:req, base:req, idx
    .irp i, 0, 8, 16, 24
    .ifb \idx
        movq    %rax, \off+\i(\base)
    .else
        movq    %rax, \off+\i(\base, \idx)
    .endif
    .endr
.endm

.macro ZERO64 off:req, base:req, idx
        ZERO32  \off, \base, \idx
        ZERO32  \off+32, \base, \idx
.endm

/* Clear [ptr, ptr+len) for len < 64 without a loop: two runs of stores, one
 * from the start and one ending exactly at the end, which overlap in the
 * middle (glibc's memset-vec-unaligned pattern, with GPRs):
 * 32..63 -> 4+4 qwords, 16..31 -> 2+2, 8..15 -> 1+1, 4..7 -> 2 dwords,
 * 2..3 -> 2 words, 1 -> 1 byte, 0 -> nothing.  Every path falls out of the
 * bottom of the macro; only the flags are clobbered. */
.macro CLEAR_SMALL ptr:req, len:req
        cmpq    $32, \len
        jb      .Lsmall_lt32\@
        ZERO32 0, \ptr
        ZERO32 -32, \ptr, \len
        jmp     .Lsmall_done\@
.Lsmall_lt32\@:
        cmpq    $16, \len
        jb      .Lsmall_lt16\@
        movq    %rax, (\ptr)
        movq    %rax, 8(\ptr)
        movq    %rax, -16(\ptr, \len)
        movq    %rax, -8(\ptr, \len)
        jmp     .Lsmall_done\@
.Lsmall_lt16\@:
        cmpq    $8, \len
        jb      .Lsmall_lt8\@
        movq    %rax, (\ptr)
        movq    %rax, -8(\ptr, \len)
        jmp     .Lsmall_done\@
.Lsmall_lt8\@:
        cmpq    $4, \len
        jb      .Lsmall_lt4\@
        movl    %eax, (\ptr)
        movl    %eax, -4(\ptr, \len)
        jmp     .Lsmall_done\@
.Lsmall_lt4\@:
        cmpq    $2, \len
        jb      .Lsmall_lt2\@
        movw    %ax, (\ptr)
        movw    %ax, -2(\ptr, \len)
        jmp     .Lsmall_done\@
.Lsmall_lt2\@:
        testq   \len, \len
        jz      .Lsmall_done\@
        movb    %al, (\ptr)
.Lsmall_done\@:
.endm

/* Clear [%rdi, %rdi+%rsi) for len >= 64 with ordinary qword stores (the shape
 * of the kernel's clear_page_orig, made safe for any address and length):
 * one unaligned 64-byte block at the start, then 64-byte-aligned blocks while
 * a whole block fits before the last 64 bytes, then one 64-byte block ending
 * exactly at the end.  The three pieces overlap; none reaches outside.
 * Clobbers %rdi, %rdx. */
.macro CLEAR_LINES
        leaq    -64(%rdi, %rsi), %rdx   /* the last block starts here */
        ZERO64  0, %rdi
        addq    $64, %rdi
        andq    $-64, %rdi              /* first line boundary after dst */
        cmpq    %rdx, %rdi
        jae     .Llines_tail\@
.Llines_loop\@:
        ZERO64  0, %rdi
        addq    $64, %rdi
        cmpq    %rdx, %rdi
        jb      .Llines_loop\@
.Llines_tail\@:
        ZERO64  0, %rdx
.endm

/* A complete temporal clear of [%rdi, %rdi+%rsi) for any length; returns. */
.macro CLEAR_TEMPORAL_AND_RETURN
        cmpq    $64, %rsi
        jae     .Ltemporal_lines\@
        CLEAR_SMALL %rdi, %rsi
        ret
.Ltemporal_lines\@:
        CLEAR_LINES
        ret
.endm

/* Entry of a non-temporal routine.  Below NT_MIN_BYTES: a temporal clear and
 * return.  Otherwise clear the head [dst, A) with ordinary stores, where A is
 * the first 64-byte boundary at or after dst, and fall through with
 *   %rdi = A (64-byte aligned), %rcx = B - A (a multiple of 64, >= 192),
 *   %r9  = dst + len (the end),
 * where B = end rounded down to 64: the body [A, B) is whole lines only, the
 * only lines an NT store (or clzero) may touch. */
.macro NT_HEAD
        xorl    %eax, %eax
        cmpq    $NT_MIN_BYTES, %rsi
        jae     .Lnt_big\@
        CLEAR_TEMPORAL_AND_RETURN
.Lnt_big\@:
        leaq    (%rdi, %rsi), %r9
        leaq    63(%rdi), %r8
        andq    $-64, %r8
        movq    %r8, %rsi
        subq    %rdi, %rsi              /* head length, 0..63 */
        CLEAR_SMALL %rdi, %rsi
        movq    %r8, %rdi
        movq    %r9, %rcx
        andq    $-64, %rcx
        subq    %rdi, %rcx
.endm

/* The streamed body: call line_macro off for each 64-byte line at off(%rdi),
 * four lines per iteration while 256 bytes remain, then one at a time.
 * Expects %rdi aligned, %rcx a non-zero multiple of 64 (as NT_HEAD leaves
 * them); leaves %rdi = B, %rcx = 0. */
.macro NT_LINES line_macro:req
        cmpq    $256, %rcx
        jb      .Lnt_one\@
.Lnt_four\@:
        \line_macro 0
        \line_macro 64
        \line_macro 128
        \line_macro 192
        addq    $256, %rdi
        subq    $256, %rcx
        cmpq    $256, %rcx
        jae     .Lnt_four\@
        testq   %rcx, %rcx
        jz      .Lnt_done\@
.Lnt_one\@:
        \line_macro 0
        addq    $64, %rdi
        subq    $64, %rcx
        jnz     .Lnt_one\@
.Lnt_done\@:
.endm

/* Exit of a non-temporal routine: clear the tail [B, end) (< 64 bytes) with
 * ordinary stores and return.  No fence here: this is the body of the
 * routine's _unfenced entry, which a job calls for each of many extents and
 * fences once per thread at the end (a fence per 4 KiB page cost a third of
 * the throughput).  The plain entry (NT_FENCED) adds the sfence.  AVX
 * routines issue vzeroupper before this. */
.macro NT_TAIL_AND_RETURN
        xorl    %eax, %eax              /* clzero used %rax as its address */
        movq    %r9, %rsi
        subq    %rdi, %rsi              /* tail length, 0..63 */
        CLEAR_SMALL %rdi, %rsi
        ret
.endm

/* The plain entry of a non-temporal routine: the unfenced body, then sfence,
 * so that every later store of the caller (and whoever it signals) is
 * ordered after the weakly ordered streaming stores.  No stack is used
 * before the call, so the CFA stays %rsp+8 throughout. */
#define NT_FENCED(name, unfenced)    \
        ROUTINE_START(name);         \
        call    unfenced;            \
        sfence;                      \
        ret;                         \
        ROUTINE_END(name)

/* CLZERO_RAX: zero the 64-byte line containing %rax (clzero aligns down).
 * With CP_EMULATE_CLZERO (tests only, for CPUs without clzero) the same
 * effect with ordinary stores, so the head/body/tail logic around it can be
 * run anywhere; clzero.S then names its symbol cp_clear_clzero_emulated. */
#ifdef CP_EMULATE_CLZERO
.macro CLZERO_RAX
        andq    $-64, %rax
    .irp i, 0, 8, 16, 24, 32, 40, 48, 56
        movq    $0, \i(%rax)
    .endr
.endm
#else
.macro CLZERO_RAX
        clzero
.endm
#endif

#endif
