/*
 * Test-only: asm/clzero.S with the clzero instruction replaced by ordinary
 * stores to the aligned-down line (see CLZERO_RAX in routine.h), exported as
 * cp_clear_clzero_emulated, so tests/c/test_routines.c can check the
 * head/body/tail logic of the clzero routine on CPUs without CLZERO.
 */
#define CP_EMULATE_CLZERO 1
#include "../../asm/clzero.S"
