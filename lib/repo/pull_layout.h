/* lib/repo/pull_layout.h - where the chunks of a pulled file go. Each distinct chunk is fetched once
 * and written at every offset it occupies; as the file fills in from the front, a helper thread
 * hashes it (filehash follow mode), so the whole-file check runs beside the download instead of
 * re-reading the file after it. */
#ifndef KESTREL_PULL_LAYOUT_H
#define KESTREL_PULL_LAYOUT_H

#include "repo.h"

typedef struct kestrel__layout kestrel__layout;

/* Plan mf's chunks into the (empty) file fd and start hashing it. */
int kestrel__layout_new(kestrel__layout **out, const Kestrel__V1__Manifest *mf, int fd);
/* Chunk i is the first with its digest (the only one to fetch). */
int kestrel__layout_first(const kestrel__layout *l, size_t i);
/* Write the verified bytes of chunk i wherever its digest occurs. */
int kestrel__layout_place(kestrel__layout *l, size_t i, const void *data, size_t len);
/* Everything placed: wait for the hash of the whole file (hex) and free l. */
int kestrel__layout_finish(kestrel__layout *l, char sha[65]);
/* Abandon (error paths); NULL is fine. */
void kestrel__layout_free(kestrel__layout *l);

#endif
