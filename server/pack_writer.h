/* server/pack_writer.h - a run pack's writer threads: they store the pack's verified chunks while
 * the connection's thread receives, verifies and hashes (into the pack's run, repo_runs.h) the
 * next ones.
 *
 * A run pack carries a big file's new chunks in order. Its chunks are stored around the page cache
 * (kestrel__store_put_chunk_direct), which spares kestreld the CPU of filling the page cache but
 * waits for the disk: the waiting is done here, two chunks at a time, not where the bytes are
 * received. At most DEPTH chunks wait for the writers: the pack is never buffered. */
#ifndef KD_PACK_WRITER_H
#define KD_PACK_WRITER_H

#include <stddef.h>
#include <kestrel/buffer.h>
#include "store.h"

typedef struct kd_pack_writer kd_pack_writer;

/* Writers into store. NULL (out of memory, no thread): the caller stores the chunks itself. */
kd_pack_writer *kd_pack_writer_start(kestrel__store *store);
/* Hands over a verified chunk that the store lacks: *chunk is swapped for a buffer the writers are
 * done with (empty), so no chunk is copied. 0, or -1 once a chunk could not be stored
 * (kd_pack_writer_end says why). */
int kd_pack_writer_put(kd_pack_writer *w, const char *hex, kestrel_buf *chunk);
/* Waits for the writers and frees w. 0 when every chunk was stored; else -1, err says why, and
 * *full is set when the store's disk or quota is full. */
int kd_pack_writer_end(kd_pack_writer *w, char *err, size_t n, int *full);

#endif
