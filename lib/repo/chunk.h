/* lib/repo/chunk.h - FastCDC content-defined chunking (gear hash, normalized chunking).
 * Sizes: min 64 KiB, average 256 KiB, max 1 MiB (README: why 256 KiB). */
#ifndef KESTREL_CHUNK_H
#define KESTREL_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#define KESTREL__CHUNK_MIN (64u * 1024)
#define KESTREL__CHUNK_AVG (256u * 1024)
#define KESTREL__CHUNK_MAX (1024u * 1024)
/* The length a batch's chunk head gives for a chunk the repository no longer stores (its version
 * deleted and collected as it was sent): the answer ends there (server/repo_fetch.c, fetch_batch.c). */
#define KESTREL__CHUNK_GONE 0xFFFFFFFFu

/* Length of the next chunk at the start of data[0..len); len itself when the data ends first
 * (eof != 0) or no boundary lies within KESTREL__CHUNK_MAX. Needs len >= KESTREL__CHUNK_MAX unless eof. */
size_t kestrel__chunk_next(const uint8_t *data, size_t len, int eof);

#endif
