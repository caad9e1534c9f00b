/* lib/repo/filehash.h - the whole-file SHA-256 of a file on disk, on a helper thread: a pull's file,
 * followed as its chunks are written (so the check runs beside the download), or read back whole (a
 * pulled directory's files, tree.c; a push's files for a kestreld that does not fill digests in,
 * push_digests.c). A push to file:// hashes the bytes it already read instead: chunk_hash.c. */
#ifndef KESTREL_FILEHASH_H
#define KESTREL_FILEHASH_H

typedef struct kestrel__filehash kestrel__filehash;

/* Start hashing path (read through its own descriptor; other than a regular file is refused, and with
 * nofollow a link in its path too: a push hands its files' resolved paths; a pull checks files it
 * wrote itself, wherever the user's dest leads). */
int kestrel__filehash_start(kestrel__filehash **out, const char *path, int nofollow);
/* Follow a file being written (fd is duplicated): hash its bytes in order, up to what
 * kestrel__filehash_advance says is written, so the hash of a download runs beside it. */
int kestrel__filehash_follow(kestrel__filehash **out, int fd);
void kestrel__filehash_advance(kestrel__filehash *h, long long ready);
/* Wait for the hash; hex receives it. Frees h. A read error, or a file whose size changed from
 * expect_size while it was read, is an error. expect_size < 0 abandons the hash (error paths). */
int kestrel__filehash_finish(kestrel__filehash *h, long long expect_size, char hex[65]);

#endif
