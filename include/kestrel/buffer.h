/* kestrel/buffer.h - caller-owned buffers filled by the library. */
#ifndef KESTREL_BUFFER_H
#define KESTREL_BUFFER_H

#include "common.h"

KESTREL_BEGIN_DECL

/**
 * A buffer the library fills. Start with KESTREL_BUF_INIT, release with
 * kestrel_buf_dispose(). ptr is NUL-terminated when non-NULL; size excludes
 * the NUL. Never free(ptr) yourself.
 */
typedef struct kestrel_buf {
    char *ptr;
    size_t size;
    size_t reserved;   /* allocated size; private */
} kestrel_buf;

#define KESTREL_BUF_INIT { NULL, 0, 0 }

/** Release the memory of a filled buffer and reset it to KESTREL_BUF_INIT. Accepts NULL. */
KESTREL_API void kestrel_buf_dispose(kestrel_buf *buf);

KESTREL_END_DECL

#endif
