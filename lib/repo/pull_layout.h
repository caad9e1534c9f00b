/* lib/repo/pull_layout.h - where the chunks of a pulled file go. Each distinct chunk is fetched once
 * and written at every offset it occupies; as the file fills in from the front, a helper thread
 * hashes it (filehash follow mode), so the whole-file check runs beside the download instead of
 * re-reading the file after it. A directory's window goes through the same layout into a sink
 * (tree.c's kestrel__tree_out_write), without the whole-file hash: its files are checked each on
 * its own (kestrel__tree_out_settle). */
#ifndef KESTREL_PULL_LAYOUT_H
#define KESTREL_PULL_LAYOUT_H

#include "repo.h"

typedef struct kestrel__layout kestrel__layout;

/* Where the bytes of a directory go: write len bytes at offset at of the files' concatenation. */
typedef int (*kestrel__layout_sink)(void *ctx, int64_t at, const void *data, size_t len);

/* Plan mf's chunks into the (empty) file fd, named name in errors, and start hashing it; or (fd < 0)
 * hand every placement to sink (a directory: no hash of the whole, each file is checked on its own). */
int kestrel__layout_new(kestrel__layout **out, const Kestrel__V1__Manifest *mf, int fd, const char *name,
                        kestrel__layout_sink sink, void *sink_ctx);
/* Chunk i is the first with its digest (the only one to fetch). */
int kestrel__layout_first(const kestrel__layout *l, size_t i);
/* Write the bytes of chunk i (checked as the pull's kind needs, pull.c) wherever its digest occurs;
 * KESTREL_ECANCELLED once *stop (kestrel__layout_stop_on) is set, between two of them: a chunk may
 * occur hundreds of thousands of times (a hostile test: 300 GB from one 1 MiB chunk). */
int kestrel__layout_place(kestrel__layout *l, size_t i, const void *data, size_t len);
/* The flag (atomic; NULL: none) another thread sets to stop kestrel__layout_place. */
void kestrel__layout_stop_on(kestrel__layout *l, const int *stop);
/* Everything placed: wait for the hash of the whole file (hex; "" with a sink) and free l. */
int kestrel__layout_finish(kestrel__layout *l, char sha[65]);
/* Abandon (error paths); NULL is fine. */
void kestrel__layout_free(kestrel__layout *l);

#endif
