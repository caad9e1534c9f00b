/* server/repo_versions.c - GET /api/v1/models/NAME/versions: a model's versions, oldest first, each
 * without its chunk and file lists (its N.listing: lib/repo/store_list.c); ?version=N|latest|ALIAS,
 * the one it names alone (404 when none: what kestrel pull without DEST reads for the pushed name).
 *
 * The answer is made as it is read, a version at a time: kestreld holds one version's listing and
 * a block of the answer, whatever the count. Made whole, 3,000 versions with 64 KiB of metadata each
 * were a 197 MB answer, and a few asks at once took kestreld to 2.5-3 GB (a hostile test). The
 * version numbers are taken when the answer starts; one deleted before its turn is left out, one
 * committed after it is not in this answer. A version whose listing cannot be read (damaged) is left
 * out with a line in kestreld's log, as it always was (and as a file:// listing does); only memory
 * running out midway cuts the answer short, which the client sees as an error (its length is not
 * sent ahead: the answer goes chunked).
 *
 * The bytes are those of the whole ManifestList: in protobuf, each version a record of its field 1
 * (kestrel__wire_pack_element); in JSON, {"versions":[...]} with each version as lib/wire.c writes it.
 *
 * Who may: whoever may read NAME (kd_route_repo checks it first: a model the caller may not read is
 * answered as one that does not exist). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "repo_settle.h"
#include "store.h"
#include "repo.h"

#define BLOCK (64u * 1024)   /* what libmicrohttpd asks of the reader at once */
/* What one answer holds besides its block: the listing of one version (its metadata is at most
 * 64 KiB) decoded and encoded, and the version numbers (8 bytes each). A version an earlier build
 * committed is read whole once, the first time it is listed, to write its listing: not counted. */
#define ONE_VERSION (512u * 1024)
/* An alias read at the start (its name, at most 64 bytes, and version; api_repo.c keeps at most
 * KD_ALIASES_MAX a model). */
#define ALIAS_HELD 112u

typedef struct {
    kestrel__store *store;
    struct kd_settle *settle;   /* a version left to settle is settled as it is reached (repo_settle.h) */
    char *name;
    int64_t *vs;          /* the versions, oldest first, when the answer started */
    kestrel__alias_map aliases;   /* and their aliases then, read once (not once a version) */
    int mapped;
    size_t n, next;       /* how many; the next to encode */
    int json, sent_one, done;
    kestrel_buf piece;    /* encoded and not yet read: the head, a version, or the end */
    size_t at;            /* how much of piece was read */
} versions_answer;

/* The next piece of the answer into a->piece: 1, 0 at the end, -1 where a listing cannot be read. */
static int next_piece(versions_answer *a)
{
    a->piece.size = a->at = 0;
    if (a->done)
        return 0;
    if (a->json && a->next == 0 && !a->sent_one && kestrel__buf_puts(&a->piece, "{\"versions\":[") < 0)
        return -1;
    while (a->next < a->n) {
        Kestrel__V1__Manifest *m = NULL;
        int64_t v = a->vs[a->next++];
        int rc = kestrel__store_listing_mapped(a->store, a->name, v, a->mapped ? &a->aliases : NULL, &m);
        int settled = rc == 0 ? kd_settle_seen(a->settle, a->name, v, m->sha256) : 0;
        if (settled == 1) {   /* settled now (repo_settle.h): read again */
            kestrel__manifest_free(m);
            m = NULL;
            rc = kestrel__store_listing_mapped(a->store, a->name, v, a->mapped ? &a->aliases : NULL, &m);
        } else if (settled < 0) {
            kestrel_error_clear();   /* one that cannot be settled is shown as it is stored */
        }
        if (rc == KESTREL_ENOTFOUND) {   /* deleted since the answer started */
            kestrel_error_clear();
            continue;
        }
        if (rc < 0 && rc != KESTREL_ENOMEM) {   /* one damaged version hides no other (as file:// lists) */
            fprintf(stderr, "kestreld: %s@%lld left out of its model's versions: %s\n", a->name, (long long)v,
                    kestrel_error_last()->message);
            kestrel_error_clear();
            continue;
        }
        if (rc == 0)
            rc = !a->json ? kestrel__wire_pack_element(&a->piece, 1, &m->base)
                 : (a->sent_one && (rc = kestrel__buf_puts(&a->piece, ",")) < 0) ? rc
                                                                                  : kestrel__wire_to_json(&a->piece, &m->base, 0);
        kestrel__manifest_free(m);
        if (rc < 0) {
            fprintf(stderr, "kestreld: GET %s's versions cut short: %s\n", a->name, kestrel_error_last()->message);
            return -1;
        }
        a->sent_one = 1;
        return 1;
    }
    a->done = 1;
    if (a->json && kestrel__buf_puts(&a->piece, "]}\n") < 0)
        return -1;
    return a->piece.size > 0;
}

static ssize_t answer_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    versions_answer *a = cls;
    size_t take;
    int rc;
    (void)pos;
    while (a->at == a->piece.size)
        if ((rc = next_piece(a)) <= 0)
            return rc == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    take = a->piece.size - a->at < max ? a->piece.size - a->at : max;
    memcpy(buf, a->piece.ptr + a->at, take);
    a->at += take;
    return (ssize_t)take;
}

static void answer_free(void *cls)
{
    versions_answer *a = cls;
    kestrel_buf_dispose(&a->piece);
    kestrel__alias_map_free(&a->aliases);
    free(a->vs);
    free(a->name);
    free(a);
}

static enum MHD_Result answer(kd_req *r, const char *name);

/* On a thread of its own (api_defer.c): the model's versions waiting to be settled settled (seconds
 * for big files), then the answer made (a version found unsettled as it is sent after all is settled there, on the HTTP
 * thread: one a killed kestreld left). */
static enum MHD_Result settled_answer(kd_req *r, void *arg)
{
    char *name = arg;
    enum MHD_Result reply;
    if (kd_settle_model(r->e->repo_settle, name) < 0)
        kestrel_error_clear();   /* one that cannot be settled is listed as it is stored */
    reply = answer(r, name);
    free(name);
    return reply;
}

enum MHD_Result kd_repo_versions(kd_req *r, const char *name)
{
    char *copy;
    if (!kd_settle_pending(r->e->repo_settle, name))
        return answer(r, name);
    if ((copy = kestrel__strdup(name)) == NULL)
        return kd_reply_error(r, 500, "internal", "out of memory");
    return kd_defer(r, settled_answer, copy);
}

static enum MHD_Result answer(kd_req *r, const char *name)
{
    versions_answer *a = calloc(1, sizeof(*a));
    struct MHD_Response *resp;
    const char *sel;
    int rc;
    if (a == NULL || (a->name = kestrel__strdup(name)) == NULL) {
        free(a);
        return kd_reply_error(r, 500, "internal", "out of memory");
    }
    a->store = r->e->store;
    a->settle = r->e->repo_settle;
    a->json = r->want_json;
    if ((sel = kd_query(r, "version")) != NULL) {   /* ?version=N|latest|ALIAS: that one alone */
        char ref[600], model[256];
        Kestrel__V1__Manifest *m = NULL;
        snprintf(ref, sizeof(ref), "%s@%.200s", name, sel);
        if ((a->vs = malloc(sizeof(*a->vs))) == NULL)
            rc = kestrel__error_oom();
        else if ((rc = kestrel__ref_split(ref, model, sizeof(model), &sel)) == 0 &&
                 (rc = kestrel__store_resolve_version(r->e->store, ref, model, a->vs)) == 0 &&
                 (rc = kestrel__store_listing(r->e->store, name, a->vs[0], &m)) == 0)
            a->n = 1;   /* there now (a delete before its turn leaves the answer empty, as above) */
        kestrel__manifest_free(m);
    } else if ((rc = kestrel__store_versions(r->e->store, name, &a->vs, &a->n)) == 0 &&
               (rc = kestrel__store_alias_map(r->e->store, name, &a->aliases)) == 0) {
        a->mapped = 1;
    }
    if (rc < 0) {
        answer_free(a);
        return kd_reply_failure(r, rc);
    }
    /* held until the client reads it, however slowly: from the budget of request memory */
    if (kd_answer_hold(r, BLOCK + ONE_VERSION + a->n * sizeof(*a->vs) + a->aliases.n * ALIAS_HELD) < 0) {
        answer_free(a);
        return kd_reply_busy(r);
    }
    if ((resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, BLOCK, answer_read, a, answer_free)) == NULL) {
        answer_free(a);
        return MHD_NO;
    }
    return kd_reply_response(r, 200, resp, a->json ? KESTREL__CT_JSON : KESTREL__CT_PROTOBUF);
}
