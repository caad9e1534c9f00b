/* lib/repo/store_settle.c - a version's whole-file digests settled after its commit: kestreld's
 * commit of a push that asked for it (?settle=later) leaves the digests of files it would read back
 * empty, so that the push is answered without hashing every byte a second time; they are read back
 * and written in here, on kestreld's settling thread or at the version's first read
 * (server/repo_settle.c). N.json is the truth and is written first (temp, fsync, rename), then its
 * protobuf form and the listing: a kill between leaves the listing empty, and the next settle writes
 * it from N.json without hashing again. Above store_digests.c (the hashing) and store_list.c (the
 * listing), below nothing but kestreld. */
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "files.h"
#include "repo.h"
#include "store.h"

static int unsettled(const Kestrel__V1__Manifest *m)
{
    if (!m->sha256[0])
        return 1;
    for (size_t i = 0; i < m->n_files; i++)
        if (!m->files[i]->sha256[0])
            return 1;
    return 0;
}

/* Its chunks all stored at their sizes (a stat each: a chunk quarantined by an earlier settle fails
 * the read at once, not after hashing up to it), then the files left empty hashed; those whose
 * digests the commit settled (a run's, the client's, a file of one chunk) are not read again, and so
 * count against no bound they did not count against at the commit. */
static int hash_unsettled(kestrel__store *s, Kestrel__V1__Manifest *m, uint64_t *hashed, char *msg, size_t n)
{
    unsigned char *known = calloc(m->n_files + 1, 1);
    char **hex = NULL;
    int64_t *size = NULL;
    int rc = known ? kestrel__manifest_chunk_arrays(m, &hex, &size) : kestrel__error_oom();
    for (size_t i = 0; rc == 0 && i < m->n_files; i++)
        known[i] = m->files[i]->sha256[0] != '\0';
    if (rc == 0 && (rc = kestrel__store_chunks_sized(s, hex, size, m->n_chunks)) < 0)
        snprintf(msg, n, "%s", kestrel_error_last()->message);
    if (rc == 0)
        rc = kestrel__store_fill_digests_checked(s, m, known, hashed, msg, n);
    free(hex);
    free(size);
    free(known);
    return rc;
}

int kestrel__store_settle_hash(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out,
                               uint64_t *hashed)
{
    char msg[400] = "out of memory";
    int rc;
    *hashed = 0;
    if ((rc = kestrel__store_manifest(s, name, version, out)) < 0)
        return rc;
    if (unsettled(*out) && (rc = hash_unsettled(s, *out, hashed, msg, sizeof(msg))) < 0)
        rc = kestrel__error_set(rc == KESTREL_EINVALID || rc == KESTREL_ENOTFOUND ? KESTREL_EIO : rc,
                                "%s@%lld: its digests cannot be settled: %s", name, (long long)version, msg);
    else if (rc == 0)
        rc = kestrel__manifest_check(*out);
    if (rc < 0) {
        kestrel__manifest_free(*out);
        *out = NULL;
    }
    return rc;
}

int kestrel__store_settle_write(kestrel__store *s, const Kestrel__V1__Manifest *m)
{
    char path[PATH_MAX];
    Kestrel__V1__Manifest *shown = NULL;
    int rc = 0;
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.json", kestrel__store_root(s), m->name,
             (long long)m->version);
    if (kestrel__store_listing(s, m->name, m->version, &shown) == 0 && !strcmp(shown->sha256, m->sha256)) {
        kestrel__manifest_free(shown);   /* settled, listing and all: another wrote it first */
        return 0;
    }
    kestrel__manifest_free(shown);
    kestrel_error_clear();
    if (access(path, F_OK) != 0)   /* deleted as it was hashed */
        return kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)m->version, m->name);
    /* N.json written again whole (the same bytes where another settle wrote it first), then its
     * protobuf form (best effort: a stale one is made anew from N.json), then the listing (one that
     * cannot be written is read from N.json instead) */
    if ((rc = kestrel__write_message_atomic(path, &m->base, 1, 0)) < 0)
        return rc;
    if (kestrel__store_pb_write(s, m->name, m, NULL) < 0 || kestrel__store_listing_write(s, m->name, m) < 0)
        kestrel_error_clear();
    return 0;
}
