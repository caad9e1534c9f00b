/* lib/repo/records.h - fields read from a file front to back: a push's spool (chunk_spool.c), a
 * pulled manifest (manifest_file.c), a stored manifest's protobuf form (store_manifest.c). */
#ifndef KESTREL_RECORDS_H
#define KESTREL_RECORDS_H

#include <stddef.h>
#include <stdint.h>
#include "internal.h"
#include "wire.h"

/* Fields read from a file front to back (a spool's records, a pulled manifest: manifest_file.h), a
 * buffer at a time; the buffer grows to hold the longest field, up to 64 MiB. Begun with
 * kestrel__records_init: fd, what (for errors: "the pulled manifest"), bad (the code of damage). */
typedef struct {
    int fd;
    const char *what;
    int bad;
    uint8_t *buf;
    size_t cap, len, at;   /* buf[at, len) not taken yet */
    int64_t off;           /* the file's next byte */
} kestrel__records;
/* The next field (kestrel__wire_next_field: its number, wire type and value), and raw (NULL: not
 * asked) the whole of it, key too, valid until the next call: 1; 0 at the end; bad where it is cut
 * short or malformed; KESTREL_EIO where the file cannot be read. */
int kestrel__records_next(kestrel__records *r, unsigned *field, unsigned *type, const uint8_t **data, size_t *n,
                          const uint8_t **raw, size_t *raw_n);
void kestrel__records_init(kestrel__records *r, int fd, const char *what, int bad);
void kestrel__records_rewind(kestrel__records *r);
void kestrel__records_free(kestrel__records *r);

#endif
