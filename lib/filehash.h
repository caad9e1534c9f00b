/* lib/filehash.h - the whole-file SHA-256 of a push, computed on a helper thread while the caller
 * chunks and hashes each chunk: the two SHA-256 passes run on two cores instead of one after the
 * other, so a push hashes at about the speed of one pass. */
#ifndef KESTREL_FILEHASH_H
#define KESTREL_FILEHASH_H

typedef struct kestrel__filehash kestrel__filehash;

/* Start hashing path (read through its own descriptor). */
int kestrel__filehash_start(kestrel__filehash **out, const char *path);
/* Wait for the hash; hex receives it. Frees h. A read error, or a file whose size changed from
 * expect_size while it was read, is an error. expect_size < 0 abandons the hash (error paths). */
int kestrel__filehash_finish(kestrel__filehash *h, long long expect_size, char hex[65]);

#endif
