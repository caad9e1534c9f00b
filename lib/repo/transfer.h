/* lib/repo/transfer.h - the one push and the one pull, over any transport: what front.c calls. Kept
 * out of transport.h, so that what a transport and the helpers below it see is the interface they
 * implement, not the layer above them. */
#ifndef KESTREL_REPO_TRANSFER_H
#define KESTREL_REPO_TRANSFER_H

#include "transport.h"

/* The one push (push.c): path (a file, or a directory: all its files, or those of select) as the
 * next version of name; *version is its number. */
int kestrel__push(kestrel__transport *t, const char *name, const char *path, char *const *select, size_t nselect,
                  const kestrel_transfer_options *o, kestrel__progress *pr, int64_t *version);
/* The one pull (pull.c): ref's version at dest (a file, or a directory), verified, or nothing. */
int kestrel__pull(kestrel__transport *t, const char *ref, const char *dest, kestrel__progress *pr);

#endif
