/* The C library's memset as a routine: always available, the baseline. */
#include <string.h>

#include "clearpages.h"

void cp_clear_libc(void *dst, size_t len)
{
    memset(dst, 0, len);
}
