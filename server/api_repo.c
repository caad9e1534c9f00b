/* server/api_repo.c - the model repository over HTTP, on the same store as file:// URLs
 * (lib/repo/store.c): chunk queries, versions and their commits, aliases, a model's settings. The
 * rest of the repository side is in its own files: packs of chunks going up (repo_pack.c, taken at
 * the headers by api.c's on_request, with repo_runs.c for a big file's whole digest), a version's
 * manifest (repo_manifest.c), chunks coming down in batches (repo_fetch.c), a chunk checked again
 * on a client's report of damage (repo_fsck.c), a commit's key for a commit sent again
 * (repo_commit_key.c), and who may do what to a model (repo_acl.c). */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "api.h"
#include "metrics.h"
#include "api_inputs.h"
#include "stage.h"
#include "route.h"
#include "repo_acl.h"
#include "repo_runs.h"
#include "repo_settle.h"
#include "chunk.h"
#include "store.h"
#include "repo.h"
#include "upload_mem.h"

#define MAX_QUERY 100000

/* ---- commits ------------------------------------------------------------------------------- */

/* same_as_latest's walk of the latest version, a record at a time: pass 0 compares, pass 1 fills in. */
typedef struct {
    Kestrel__V1__Manifest *in;
    size_t chunk, file;         /* the records of each list seen in this pass */
    int64_t size;               /* its size and digest as its records say (the last one given counts) */
    char sha256[KESTREL__HEX_LEN + 1];
    int fill;                   /* pass 1: in left its own digest empty */
    int filling;                /* pass 1 began: what fails now has copied some digests into in */
} latest_walk;

/* The records kestrel__store_manifest_each gives (lib/repo/store.h): Manifest's field numbers, and 0
 * once a pass has given them all. */
enum { REC_END = 0, REC_SIZE = 3, REC_SHA256 = 4, REC_CHUNK = 5, REC_FILE = 10 };

/* 1 where the latest version's record differs from in's (the walk ends: not the same). */
static int latest_record(void *ctx, int pass, unsigned field, const Kestrel__V1__Manifest *one)
{
    latest_walk *w = ctx;
    Kestrel__V1__Manifest *in = w->in;
    w->filling = pass == 1;
    if (field == REC_CHUNK && pass == 0) {
        const Kestrel__V1__ChunkRef *c = one->chunks[0], *mine;
        if (w->chunk >= in->n_chunks)
            return 1;
        mine = in->chunks[w->chunk++];
        return c->size != mine->size || strcmp(c->digest, mine->digest);
    }
    if (field == REC_FILE) {
        const Kestrel__V1__TreeFile *t = one->files[0];
        Kestrel__V1__TreeFile *mine;
        if (w->file >= in->n_files)
            return 1;
        mine = in->files[w->file++];
        if (pass == 1)
            return mine->sha256[0] ? 0 : kestrel__wire_set_string(&mine->sha256, t->sha256);
        return t->size != mine->size || t->chunks != mine->chunks || t->mode != mine->mode ||
               strcmp(t->path, mine->path) || (mine->sha256[0] && strcmp(t->sha256, mine->sha256));
    }
    if (field == REC_SIZE && pass == 0)
        w->size = one->size;
    else if (field == REC_SHA256 && pass == 0)
        snprintf(w->sha256, sizeof(w->sha256), "%s", one->sha256);
    else if (field == REC_END && pass == 0) {   /* compared through: as many of each, the same size and digest */
        if (w->chunk != in->n_chunks || w->file != in->n_files || w->size != in->size || !w->sha256[0] ||
            (in->sha256[0] && strcmp(w->sha256, in->sha256)))
            return 1;
        w->chunk = w->file = 0;
        w->fill = !in->sha256[0];
    } else if (field == REC_END && pass == 1 && w->fill)
        return kestrel__wire_set_string(&in->sha256, w->sha256);
    return 0;
}

/* The same files as the model's latest version (a re-push of unchanged data): the same chunks, and
 * for a directory the same paths, sizes and modes. Their digests were computed when that version
 * committed, so the bytes are not read again: the digests in is given must be those, and the ones it
 * leaves empty are taken from it. 1 when so (in filled in), 0 when not the same, < 0 out of memory or
 * the latest changed as its digests were copied (some of them in in by then).
 * Its listing first (N.listing: no list in it): a version of another size, other counts or another
 * given digest is not the same, and is never read further; else its records a record at a time
 * (kestrel__store_manifest_each), compared, then copied where in leaves them empty: the latest is
 * never decoded whole beside in (a 50,000-file version is megabytes of it). */
static int same_as_latest(kd_req *r, const char *name, Kestrel__V1__Manifest *in)
{
    Kestrel__V1__Manifest *l = NULL;
    latest_walk w = { .in = in };
    char model[256];
    int64_t latest = 0;
    int same, rc;
    if (kestrel__store_resolve_version(r->e->store, name, model, &latest) < 0 ||
        kestrel__store_listing(r->e->store, model, latest, &l) < 0) {
        kestrel_error_clear();
        return 0;
    }
    same = l->size == in->size && l->chunk_count == (int64_t)in->n_chunks && l->file_count == (int64_t)in->n_files &&
           (!in->sha256[0] || !strcmp(l->sha256, in->sha256));
    kestrel__manifest_free(l);
    if (!same)
        return 0;
    /* pass 0 compares every record, pass 1 (over the same bytes) copies the digests in leaves empty */
    rc = kestrel__store_manifest_each(r->e->store, model, latest, 2, latest_record, &w);
    if (rc < 0 && rc != KESTREL_ENOMEM && !w.filling) {   /* the latest cannot be read: its digests are not taken */
        kestrel_error_clear();
        return 0;
    }
    return rc < 0 ? rc : rc == 0;
}

/* The digests of in's files that runs computed as their chunks streamed in (repo_runs.h): set
 * where empty, checked where given; known[i] marks each, *streamed counts their bytes. 0,
 * KESTREL_EINVALID (msg says why) or out of memory. */
static int digests_from_runs(kd_req *r, Kestrel__V1__Manifest *in, unsigned char *known, uint64_t *streamed,
                             char *msg, size_t n)
{
    char **hex, got[KESTREL__HEX_LEN + 1];
    int64_t *size;
    size_t at = 0;
    int rc = kestrel__manifest_chunk_arrays(in, &hex, &size);
    for (size_t i = 0; rc == 0 && i < (in->n_files ? in->n_files : 1); i++) {
        size_t k = in->n_files ? (size_t)in->files[i]->chunks : in->n_chunks;
        if (k > 1 && kd_runs_take(r->e->repo_runs, r->who.user_id, hex + at, size + at, k, got)) {
            known[i] = 1;
            *streamed += (uint64_t)(in->n_files ? in->files[i]->size : in->size);
            rc = kestrel__manifest_settle_digest(in, i, got, msg, n);
        }
        at += k;
    }
    free(hex);   /* NULL when they could not be made */
    free(size);
    return rc;
}

/* The metadata of a commit: the client's object, lineage the server's word (set from the job for a
 * job's push, never taken from a client). NULL with the reason in msg when it is no JSON object. */
static char *commit_metadata(kd_req *r, const char *json, char *msg, size_t n)
{
    cJSON *meta = json[0] ? cJSON_Parse(json) : cJSON_CreateObject();
    char *out;
    if (meta == NULL || !cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        snprintf(msg, n, "field 'metadata_json': a JSON object");
        return NULL;
    }
    while (cJSON_GetObjectItemCaseSensitive(meta, "lineage"))   /* JSON may repeat a key */
        cJSON_DeleteItemFromObjectCaseSensitive(meta, "lineage");
    if (r->who.job_id) {
        cJSON *lineage = kd_inputs_lineage(r);
        if (lineage && !cJSON_AddItemToObject(meta, "lineage", lineage))
            cJSON_Delete(lineage);
    }
    out = cJSON_GetArraySize(meta) ? cJSON_PrintUnformatted(meta) : kestrel__strdup("");
    cJSON_Delete(meta);
    if (out == NULL)
        snprintf(msg, n, "out of memory");
    return out;
}

/* The sync of the store, on its own thread: the disk flushes while the files are hashed. */
struct store_sync {
    kestrel__store *s;
    int rc;
};

static void *store_sync_main(void *arg)
{
    struct store_sync *w = arg;
    w->rc = kestrel__store_sync(w->s);
    return NULL;
}

/* The files of in whose digests the commit leaves to settle after it (repo_settle.h): where the
 * client asked (?settle=later) and gave no version digest (one given is checked now, and so is every
 * file's given digest), each file of several chunks with no digest that no run covered. Marked in
 * later (NULL: none), *deferred counts their bytes. 0 or out of memory. */
static int digests_later(kd_req *r, const Kestrel__V1__Manifest *in, const unsigned char *known,
                         unsigned char **later, uint64_t *deferred)
{
    const char *ask = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "settle");
    size_t nf = in->n_files ? in->n_files : 1;
    *later = NULL;
    if (!kd_settle_offered(r->e->repo_settle) || !ask || strcmp(ask, "later") || in->sha256[0])
        return 0;
    if ((*later = calloc(nf, 1)) == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < nf; i++) {
        const Kestrel__V1__TreeFile *f = in->n_files ? in->files[i] : NULL;
        size_t k = f ? (size_t)f->chunks : in->n_chunks;
        if (k > 1 && !known[i] && !(f && f->sha256[0])) {
            (*later)[i] = 1;
            *deferred += (uint64_t)(f ? f->size : in->size);
        }
    }
    if (!kd_settle_room(r->e->repo_settle, *deferred)) {   /* a full queue or backlog: settled now */
        free(*later);
        *later = NULL;
        *deferred = 0;
    }
    return 0;
}

/* Every file's SHA-256 settled before the commit (the latest version's, a run's, a one-chunk file's
 * chunk's, or read back from the stored chunks: checked where the client gave it, else filled in;
 * or, where digests_later says, left to settle after it, its bytes counted against the bound all the same),
 * while the store's sync runs on its own thread, so the chunks are made durable as they are hashed
 * (the commit's sync then has nothing left): 0, or -1 with the answer in *reply. */
static int settle_digests(kd_req *r, const char *name, Kestrel__V1__Manifest *in, uint64_t *left,
                          enum MHD_Result *reply)
{
    char msg[400] = "the manifest's digests do not hold";
    int rc;
    struct store_sync w = { r->e->store, 0 };
    pthread_t th;
    int threaded = pthread_create(&th, NULL, store_sync_main, &w) == 0;
    unsigned char *known = calloc(in->n_files + 1, 1), *later = NULL;   /* from runs: not read back */
    uint64_t streamed = 0, deferred = 0;
    if (known == NULL)
        rc = kestrel__error_oom();
    else if ((rc = same_as_latest(r, name, in)) == 0 &&
             (rc = digests_from_runs(r, in, known, &streamed, msg, sizeof(msg))) == 0 &&
             (rc = digests_later(r, in, known, &later, &deferred)) == 0) {
        uint64_t read_back = 0, size = (uint64_t)in->size, told = 0;
        rc = kestrel__store_fill_digests_but(r->e->store, in, known, later, &read_back, msg, sizeof(msg));
        if (rc == 0) {   /* the rest: files of one chunk (manifest_check held size = sum of the files) */
            told = streamed + read_back + deferred;
            kd_metrics_repo_digests(r->e->metrics, KD_DIGEST_STREAM, streamed);
            kd_metrics_repo_digests(r->e->metrics, KD_DIGEST_STORE, read_back);
            kd_metrics_repo_digests(r->e->metrics, KD_DIGEST_CHUNK, size >= told ? size - told : 0);
        }
    }
    else if (rc > 0) {
        kd_metrics_repo_digests(r->e->metrics, KD_DIGEST_LATEST, (uint64_t)in->size);
        rc = 0;
    }
    free(known);
    free(later);
    *left = deferred;
    /* whole now: a given listing digest must hold (left to settle: the lists' checks only) */
    if (rc == 0 && (in->sha256[0] ? kestrel__manifest_check(in) : kestrel__manifest_check_commit(in)) < 0) {
        snprintf(msg, sizeof(msg), "%s", kestrel_error_last()->message);
        rc = KESTREL_EINVALID;
    }
    if (threaded)
        pthread_join(th, NULL);
    else
        w.rc = kestrel__store_sync(r->e->store);
    if (rc < 0 && rc != KESTREL_EINVALID) {   /* the server's trouble (memory, the disk), not the input's */
        *reply = kd_reply_failure(r, rc);
        return -1;
    }
    if (rc < 0) {
        *reply = kd_reply_error(r, 400, "invalid_argument", msg);
        return -1;
    }
    if (w.rc < 0) {   /* the chunks may not be durable: no version may name them */
        *reply = kd_reply_failure(r, kestrel__error_set(w.rc, "the store could not make the pushed chunks durable"));
        return -1;
    }
    return 0;
}

static enum MHD_Result commit(kd_req *r, void *arg)
{
    const char *name = arg;
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__Manifest *in = (Kestrel__V1__Manifest *)kd_body(r, &kestrel__v1__manifest__descriptor, &reply);
    char msg[400], *s;
    int64_t version = 0;
    uint64_t left = 0;   /* bytes left to settle after the commit */
    int rc, hold = -1, held = 0;
    if (in == NULL)
        return reply;
    /* decoded: the body's buffer goes now (a 50,000-file manifest's is 8 MB), and its charge to the
     * budget of request memory; the decoded manifest's (kd_body) stays until the request ends */
    kestrel_buf_dispose(&r->body);
    kd_upload_mem_give(r->mem, r->held_by, r->held);
    r->held = 0;
    if (kestrel__manifest_check_commit(in) < 0) {   /* whole-file digests may be left to us */
        reply = kd_reply_error(r, 400, "invalid_argument", kestrel_error_last()->message);
        goto out;
    }
    if (in->alias[0] && (!kestrel__alias_valid(in->alias) || !strcmp(in->alias, "latest"))) {
        reply = kd_reply_error(r, 400, "invalid_argument", "field 'alias': " KESTREL__ALIAS_RULE ", not 'latest'");
        goto out;
    }
    if (kd_commit_again(r, name, in, &held, &reply))   /* sent again, its answer lost: the version it made */
        goto out;
    if (in->alias[0] && kd_repo_alias_refused(r, name, in->alias, &reply))
        goto out;
    /* its version files (manifest, its protobuf form, its listing: about 4 times the body) keep the
     * disk's floor too (a hostile test: 20,000 files naming stored chunks filled it at the commit) */
    if (kd_repo_keeps_floor(r->e->store, "the version", 4 * (int64_t)r->body.size) < 0) {
        reply = kd_reply_error(r, 507, "insufficient_storage", kestrel_error_last()->message);
        goto out;
    }
    if (in->alias[0] && r->who.job_id) {   /* a job may name a new alias, never move one */
        int64_t had = 0;
        if (kestrel__store_alias_get(r->e->store, name, in->alias, &had) == 0) {
            snprintf(msg, sizeof(msg), "a job token cannot move the existing alias %s@%s", name, in->alias);
            reply = kd_reply_error(r, 403, "permission_denied", msg);
            goto out;
        }
    }
    if (strlen(in->metadata_json) > KESTREL__METADATA_MAX) {   /* every listing of the model carries it */
        snprintf(msg, sizeof(msg), "field 'metadata_json': %zu bytes, at most %d", strlen(in->metadata_json),
                 KESTREL__METADATA_MAX);
        reply = kd_reply_error(r, 413, "too_large", msg);
        goto out;
    }
    if ((s = commit_metadata(r, in->metadata_json, msg, sizeof(msg))) == NULL) {
        reply = kd_reply_error(r, 400, "invalid_argument", msg);
        goto out;
    }
    if (in->metadata_json != protobuf_c_empty_string)
        free(in->metadata_json);
    in->metadata_json = s;
    /* complete before commit: every chunk is stored, and its bytes are the manifest's */
    if (kestrel__store_all_stored(r->e->store, in) < 0) {
        reply = kd_reply_error(r, 400, "invalid_argument", kestrel_error_last()->message);
        goto out;
    }
    kd_settle_stir(r->e->repo_settle);   /* no settle's hashing beside this commit's */
    if (settle_digests(r, name, in, &left, &reply) < 0)
        goto out;
    if ((s = kestrel__strdup(name)) == NULL) {
        reply = kd_reply_error(r, 500, "internal", "out of memory");
        goto out;
    }
    if (in->name != protobuf_c_empty_string)
        free(in->name);
    in->name = s;
    in->created_ms = kestrel__now_ms();
    in->file_count = 0;
    /* checked again, held to the link, so that no collection removes a chunk checked here; held
     * only now, not while the files were hashed (a review: a collection waited behind that) */
    hold = kestrel__store_commit_hold(r->e->store);
    if (kestrel__store_all_stored(r->e->store, in) < 0) {
        reply = kd_reply_error(r, 400, "invalid_argument", kestrel_error_last()->message);
        goto out;
    }
    rc = kestrel__store_commit(r->e->store, name, in, &version);
    kestrel__store_commit_release(hold);
    hold = -1;
    if (rc < 0 || (in->alias[0] && (rc = kestrel__store_alias_forward(r->e->store, name, in->alias, version)) < 0)) {
        reply = kd_reply_failure(r, rc);
        goto out;
    }
    if (!in->sha256[0])   /* some digests left to settle (repo_settle.h) */
        kd_settle_queue(r->e->repo_settle, name, version, left);
    if (r->who.job_id && kd_catalog_lineage_add(r->e->cat, r->who.job_id, name, version) < 0)   /* the job page's list */
        fprintf(stderr, "kestreld: %s@%lld: cannot record that job %lld pushed it: %s\n", name, (long long)version,
                (long long)r->who.job_id, kestrel_error_last()->message);
    {   /* the reply is the version as a listing shows it, made from what was committed (not read back) */
        Kestrel__V1__Manifest shown;
        kestrel__store_listing_of(in, &shown);
        shown.version = version;
        shown.commit_key = (char *)protobuf_c_empty_string;   /* as listings show it (store.h) */
        reply = (rc = kestrel__store_aliases(r->e->store, &shown)) < 0 ? kd_reply_failure(r, rc)
                                                                       : kd_reply_msg(r, 201, &shown.base);
        for (size_t i = 0; i < shown.n_aliases; i++)
            free(shown.aliases[i]);
        free(shown.aliases);
    }
out:
    kestrel__store_commit_release(hold);
    if (held)
        kd_commit_key_release(in->commit_key);
    protobuf_c_message_free_unpacked(&in->base, NULL);
    return reply;
}

/* A commit syncs the store and may read back and hash its files: seconds, on a thread of its own
 * (api_defer.c), not on the HTTP thread. name is copied: the worker outlives this call. */
static enum MHD_Result commit_work(kd_req *r, void *arg)
{
    enum MHD_Result reply = commit(r, arg);
    free(arg);
    return reply;
}

static enum MHD_Result commit_deferred(kd_req *r, const char *name)
{
    char *copy = kestrel__strdup(name);
    return copy ? kd_defer(r, commit_work, copy) : kd_reply_error(r, 500, "internal", "out of memory");
}

/* Add name@version (its chunk list left out) to list, when its manifest loads. */
static void list_add(kd_req *r, Kestrel__V1__ManifestList *list, const char *name, int64_t version)
{
    Kestrel__V1__Manifest **at = &list->versions[list->n_versions];
    if (kestrel__store_listing(r->e->store, name, version, at) < 0)
        return;
    if (kd_settle_seen(r->e->repo_settle, name, version, (*at)->sha256) == 1) {   /* settled now: read again */
        kestrel__manifest_free(*at);
        *at = NULL;
        if (kestrel__store_listing(r->e->store, name, version, at) < 0)
            return;
    }
    kestrel_error_clear();   /* one that cannot be settled is shown as it is stored */
    list->n_versions++;
}

/* Reply with list, then free what it holds. */
static enum MHD_Result list_reply(kd_req *r, Kestrel__V1__ManifestList *list)
{
    enum MHD_Result reply = kd_reply_msg(r, 200, &list->base);
    for (size_t i = 0; i < list->n_versions; i++)
        protobuf_c_message_free_unpacked(&list->versions[i]->base, NULL);
    free(list->versions);
    return reply;
}

static enum MHD_Result delete_version(kd_req *r, const char *name, const char *ref)
{
    long long v;
    int rc;
    if (kd_parse_int(ref, 1, INT64_MAX, &v) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "delete takes a version number");
    kd_settle_lock(r->e->repo_settle);   /* no settle of it writes it back meanwhile */
    rc = kestrel__store_delete(r->e->store, name, v);
    kd_settle_unlock(r->e->repo_settle);
    if (rc < 0)
        return kd_reply_failure(r, rc);
    return kd_reply_msg(r, 200, &((Kestrel__V1__AliasUpdate)KESTREL__V1__ALIAS_UPDATE__INIT).base);
}

/* A new alias past KD_ALIASES_MAX: every listing of the model reads them all (a hostile test made
 * 3,000 to slow listings down), by PUT or by a push's --alias (a second one). */
int kd_repo_alias_refused(kd_req *r, const char *name, const char *alias, enum MHD_Result *reply)
{
    char msg[200];
    int64_t was;
    if (kestrel__store_alias_get(r->e->store, name, alias, &was) == 0 ||
        kestrel__store_alias_count(r->e->store, name) <= KD_ALIASES_MAX) {   /* "latest" among them */
        kestrel_error_clear();
        return 0;
    }
    kestrel_error_clear();
    snprintf(msg, sizeof(msg), "%s has %d aliases, the most a model keeps: delete some first", name, KD_ALIASES_MAX);
    *reply = kd_reply_error(r, 409, "resource_exhausted", msg);
    return 1;
}

static enum MHD_Result alias(kd_req *r, const char *name, const char *a)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__AliasUpdate *u;
    int rc;
    if (!strcmp(r->method, "DELETE")) {
        if ((rc = kestrel__store_alias_delete(r->e->store, name, a)) < 0)
            return kd_reply_failure(r, rc);
        return kd_reply_msg(r, 200, &((Kestrel__V1__AliasUpdate)KESTREL__V1__ALIAS_UPDATE__INIT).base);
    }
    if ((u = (Kestrel__V1__AliasUpdate *)kd_body(r, &kestrel__v1__alias_update__descriptor, &reply)) == NULL)
        return reply;
    if (kd_repo_alias_refused(r, name, a, &reply)) {
        protobuf_c_message_free_unpacked(&u->base, NULL);
        return reply;
    }
    rc = kestrel__store_alias_set(r->e->store, name, a, u->version);
    reply = rc < 0 ? kd_reply_failure(r, rc) : kd_reply_msg(r, 200, &u->base);
    protobuf_c_message_free_unpacked(&u->base, NULL);
    return reply;
}

/* GET or POST /api/v1/models/NAME/settings: who may read the model. */
static enum MHD_Result settings(kd_req *r, const char *name)
{
    static const char *const vis_names[] = { "all", "team", "private" };
    Kestrel__V1__ModelSettings out = KESTREL__V1__MODEL_SETTINGS__INIT;
    enum MHD_Result reply = MHD_NO;
    char why[400];
    int vis = KD_VIS_ALL, rc, st;
    if (!strcmp(r->method, "POST")) {
        Kestrel__V1__ModelSettings *in;
        if ((st = kd_repo_check(r, name, KD_REPO_SETTINGS, why, sizeof(why))) != 0)
            return kd_reply_error(r, (unsigned)st, st == 403 ? "permission_denied" : "not_found", why);
        if (kd_refused_at_floor(r, &reply))
            return reply;
        if ((in = (Kestrel__V1__ModelSettings *)kd_body(r, &kestrel__v1__model_settings__descriptor, &reply)) == NULL)
            return reply;
        for (vis = 0; vis < 3 && strcmp(in->visibility, vis_names[vis]); vis++)
            ;
        protobuf_c_message_free_unpacked(&in->base, NULL);
        if (vis == 3)
            return kd_reply_error(r, 400, "invalid_argument", "field 'visibility': all, team or private");
        if ((rc = kd_catalog_model_set_visibility(r->e->cat, name, vis)) < 0)
            return kd_reply_failure(r, rc);
    } else if (strcmp(r->method, "GET")) {
        return kd_reply_error(r, 405, "method_not_allowed", "GET or POST");
    } else if ((rc = kd_catalog_model_visibility(r->e->cat, name, &vis)) < 0) {
        return kd_reply_failure(r, rc);
    } else if (kd_repo_check(r, name, KD_REPO_SETTINGS, why, sizeof(why)) != 0) {
        int64_t *vs = NULL;   /* a reader who may not write it: only a model that exists has settings */
        size_t n = 0;
        rc = kestrel__store_versions(r->e->store, name, &vs, &n);
        free(vs);
        if (rc < 0 || n == 0) {
            kestrel_error_clear();
            snprintf(why, sizeof(why), "no model %s", name);
            return kd_reply_error(r, 404, "not_found", why);
        }
    }
    out.name = (char *)name;
    out.visibility = (char *)vis_names[vis];
    return kd_reply_msg(r, 200, &out.base);
}

enum MHD_Result kd_reply_chunks(kd_req *r, struct MHD_Response *resp, uint64_t bytes)
{
    enum MHD_Result ok = kd_reply_response(r, 200, resp, "application/octet-stream");
    if (ok == MHD_YES)
        kd_metrics_repo_bytes(r->e->metrics, 0, bytes);
    return ok;
}

static enum MHD_Result chunk_get(kd_req *r, const char *hex)
{
    char path[4200];
    struct stat st;
    struct MHD_Response *resp;
    int fd;
    if (!kestrel__is_sha256_hex(hex))
        return kd_reply_error(r, 400, "invalid_argument", "a chunk is named by 64 lowercase hex digits");
    kestrel__store_chunk_path(r->e->store, hex, path, sizeof(path));
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        return kd_reply_error(r, 404, "not_found", "no such chunk");
    }
    if ((resp = MHD_create_response_from_fd64((uint64_t)st.st_size, fd)) == NULL) {   /* sendfile */
        close(fd);
        return MHD_NO;
    }
    return kd_reply_chunks(r, resp, (uint64_t)st.st_size);
}

static enum MHD_Result missing(kd_req *r)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__ChunkQuery *q = (Kestrel__V1__ChunkQuery *)kd_body(r, &kestrel__v1__chunk_query__descriptor, &reply);
    Kestrel__V1__ChunkQueryResult res = KESTREL__V1__CHUNK_QUERY_RESULT__INIT;
    if (q == NULL)
        return reply;
    if (q->n_digests > MAX_QUERY) {
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return kd_reply_error(r, 400, "invalid_argument", "at most 100000 digests per query");
    }
    res.missing = calloc(q->n_digests + 1, sizeof(char *));
    for (size_t i = 0; res.missing && i < q->n_digests; i++) {
        if (!kestrel__is_sha256_hex(q->digests[i])) {
            free(res.missing);
            protobuf_c_message_free_unpacked(&q->base, NULL);
            return kd_reply_error(r, 400, "invalid_argument", "field 'digests': 64 lowercase hex digits each");
        }
        if (r->who.scope == KD_SCOPE_READ) {   /* a pull's question: it keeps nothing from the collection */
            char path[PATH_MAX];                  /* (found by a hostile test: a reader kept deleted data) */
            kestrel__store_chunk_path(r->e->store, q->digests[i], path, sizeof(path));
            if (access(path, F_OK) != 0)
                res.missing[res.n_missing++] = q->digests[i];
        } else if (!kestrel__store_has_chunk(r->e->store, q->digests[i])) {   /* a push's: refreshed */
            res.missing[res.n_missing++] = q->digests[i];
        }
    }
    /* a commit may leave whole-file digests to this server: said only to a client that asks, since an
     * older one refuses a field it does not know */
    {
        const char *ask = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "fills_digests");
        res.fills_digests = ask && !strcmp(ask, "1");
        ask = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "names_chunks");
        res.names_chunks = ask && !strcmp(ask, "1");   /* a pack may send chunks unnamed (repo_pack.c) */
        ask = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "settles_later");
        res.settles_later = ask && !strcmp(ask, "1") && kd_settle_offered(r->e->repo_settle);   /* repo_settle.h */
    }
    reply = kd_reply_msg(r, 200, &res.base);
    free(res.missing);
    protobuf_c_message_free_unpacked(&q->base, NULL);
    return reply;
}

/* POST /api/v1/repo/gc?grace_s=N (admin): collect now. */
static enum MHD_Result gc(kd_req *r)
{
    Kestrel__V1__RepoGcResult out = KESTREL__V1__REPO_GC_RESULT__INIT;
    kestrel__store_gc_stats st;
    const char *g = kd_query(r, "grace_s");
    long long grace = r->e->cfg->repo_gc_grace_s;
    int rc;
    if (!r->who.is_admin)
        return kd_reply_error(r, 403, "permission_denied", "only an admin can collect the repository");
    if (g && kd_parse_int(g, 0, INT64_MAX, &grace) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "grace_s must be a number of seconds >= 0");
    if ((rc = kestrel__store_gc(r->e->store, grace, &st)) < 0)
        return kd_reply_failure(r, rc);
    kd_stage_sweep(r->e);   /* and the host's copies of deleted dataset versions */
    out.chunks_live = st.chunks_live;
    out.chunks_removed = st.chunks_removed;
    out.temps_removed = st.temps_removed;
    out.bytes_freed = st.bytes_freed;
    return kd_reply_msg(r, 200, &out.base);
}

/* GET /jobs/{id}/models: the versions a job pushed (recorded at their commit), of the models the
 * caller may read, by model name then version, at most 1,000; a deleted version is left out. */
static enum MHD_Result job_models(kd_req *r, int64_t id, int settle_first);

/* On a thread of its own (api_defer.c): the job's models' versions waiting to be settled settled. */
static enum MHD_Result job_models_settled(kd_req *r, void *arg)
{
    enum MHD_Result reply = job_models(r, *(int64_t *)arg, 1);
    free(arg);
    return reply;
}

enum MHD_Result kd_route_job_models(kd_req *r, int64_t id)
{
    return job_models(r, id, 0);
}

static enum MHD_Result job_models(kd_req *r, int64_t id, int settle_first)
{
    Kestrel__V1__ManifestList list = KESTREL__V1__MANIFEST_LIST__INIT;
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__Job *job = kd_visible_job(r, id, 0, &reply);
    kd_lineage_row *rows = NULL;
    size_t n = 0;
    int rc;
    if (job == NULL)
        return reply;
    protobuf_c_message_free_unpacked(&job->base, NULL);
    if ((rc = kd_catalog_lineage_list(r->e->cat, id, &rows, &n)) < 0) {
        free(rows);
        return kd_reply_failure(r, rc);
    }
    if ((list.versions = calloc(n + 1, sizeof(*list.versions))) == NULL) {
        free(rows);
        return kd_reply_error(r, 500, "internal", "out of memory");
    }
    for (size_t i = 0; i < n && !settle_first; i++)   /* a version waiting: all made on a thread of its own */
        if (kd_repo_may_read(r, rows[i].name) && kd_settle_pending(r->e->repo_settle, rows[i].name)) {
            int64_t *arg = malloc(sizeof(*arg));
            free(rows);
            free(list.versions);
            if (arg == NULL)
                return kd_reply_error(r, 500, "internal", "out of memory");
            *arg = id;
            return kd_defer(r, job_models_settled, arg);
        }
    for (size_t i = 0; i < n; i++)
        if (kd_repo_may_read(r, rows[i].name))
            list_add(r, &list, rows[i].name, rows[i].version);
    reply = list_reply(r, &list);
    free(rows);
    return reply;
}

enum MHD_Result kd_route_repo(kd_req *r)
{
    const char *p = r->path;
    int get_ = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
    if (!strcmp(p, "/api/v1/chunks/missing") && post)
        return missing(r);
    if (!strcmp(p, "/api/v1/chunks/fetch"))
        return post ? kd_repo_fetch(r) : kd_reply_error(r, 405, "method_not_allowed", "POST a ChunkQuery");
    if (!strncmp(p, "/api/v1/chunks/", 15) && get_)
        return chunk_get(r, p + 15);
    if (!strcmp(p, "/api/v1/repo/gc") && post)
        return kd_defer_route(r, gc);   /* a walk of the whole store: off the HTTP thread */
    if (!strcmp(p, "/api/v1/models") && get_) {
        Kestrel__V1__ModelList list = KESTREL__V1__MODEL_LIST__INIT;
        kestrel_buf names = KESTREL_BUF_INIT;
        enum MHD_Result reply;
        int rc = kestrel__store_list(r->e->store, &names);
        if (rc < 0)
            return kd_reply_failure(r, rc);
        list.names = calloc(names.size / 2 + 2, sizeof(char *));
        for (char *save = NULL, *n = names.ptr ? strtok_r(names.ptr, "\n", &save) : NULL; list.names && n;
             n = strtok_r(NULL, "\n", &save))
            if (kd_repo_may_read(r, n))
                list.names[list.n_names++] = n;
        reply = kd_reply_msg(r, 200, &list.base);
        free(list.names);
        kestrel_buf_dispose(&names);
        return reply;
    }
    if (!strncmp(p, "/api/v1/models/", 15)) {
        /* NAME/versions[/REF], NAME/aliases/ALIAS or NAME/settings (route.h); NAME may hold '/' */
        char name[256], why[400];
        const char *arg;
        kd_model_part part;
        int del = !strcmp(r->method, "DELETE"), st = kd_route_model(p + 15, name, sizeof(name), &part, &arg);
        if (st == -1)
            return kd_reply_error(r, 404, "not_found", "no such endpoint");
        if (st == -2)
            return kd_reply_error(r, 400, "invalid_argument", "bad model name: " KESTREL__NAME_RULE);
        /* one a caller may not read is answered as one that does not exist, word for word (the store's
         * "no model NAME"); a change is refused by the namespace alone (kd_repo_check: 403 whether or
         * not the model exists), never 404 for a private one and 403 for a missing one (found by a
         * hostile test: the difference told which private models exist). A read of a missing one is
         * "no model" before its ref or route is looked at: a bad ref or an unknown route was "bad
         * alias" or "no such endpoint" for a missing model and "no model" for a private one (another).
         * Settings say the same themselves, but to who may write them (set before a first push). */
        if (get_ && (!kd_repo_may_read(r, name) ||
                     (part != KD_MODEL_SETTINGS && !kestrel__store_model_exists(r->e->store, name)))) {
            snprintf(why, sizeof(why), "no model %s", name);
            return kd_reply_error(r, 404, "not_found", why);
        }
        if (part == KD_MODEL_SETTINGS)
            return settings(r, name);
        if (part == KD_MODEL_VERSIONS) {
            /* api.c's on_request checked this at the headers, before reading the body; checked again
             * here, where the route is served, so that the rule stands without that early check */
            if (post && (st = kd_repo_check(r, name, KD_REPO_PUSH, why, sizeof(why))) != 0)
                return kd_reply_error(r, (unsigned)st, st == 403 ? "permission_denied" : "not_found", why);
            return post ? commit_deferred(r, name) : get_ ? kd_repo_versions(r, name) : kd_reply_error(r, 405, "method_not_allowed", "GET or POST");
        }
        if (part == KD_MODEL_VERSION && (get_ || del)) {
            if (del && (st = kd_repo_check(r, name, KD_REPO_DELETE, why, sizeof(why))) != 0)
                return kd_reply_error(r, (unsigned)st, st == 403 ? "permission_denied" : "not_found", why);
            return del ? delete_version(r, name, arg) : kd_repo_manifest(r, name, arg);
        }
        if (part == KD_MODEL_ALIAS && (!strcmp(r->method, "PUT") || del)) {
            if ((st = kd_repo_check(r, name, KD_REPO_ALIAS, why, sizeof(why))) != 0)
                return kd_reply_error(r, (unsigned)st, st == 403 ? "permission_denied" : "not_found", why);
            return alias(r, name, arg);
        }
    }
    return kd_reply_error(r, 404, "not_found", "no such endpoint");
}
