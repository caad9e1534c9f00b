/* lib/repo/push_digests.h - the whole-file digests a push leaves to kestreld, filled in by the push
 * itself for a kestreld that does not compute them (one older than ChunkQueryResult.fills_digests,
 * or one never asked which chunks it lacks: a directory of empty files). */
#ifndef KESTREL_PUSH_DIGESTS_H
#define KESTREL_PUSH_DIGESTS_H

#include "chunk_spool.h"
#include "repo.h"

/* A file of one chunk takes its chunk's digest, the others are read back and hashed. sha: a pushed
 * file's digest (files->list NULL); of a directory, its listing's, once each file's is filled in. A
 * directory's file records are written again, with their digests, to a new spool that replaces
 * *lists (the old one is closed); on a failure *lists is as it was. */
int kestrel__push_digests_here(kestrel__spool **lists, const kestrel__push_files *files, int64_t size, char sha[65]);

#endif
