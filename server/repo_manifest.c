/* server/repo_manifest.c - GET /api/v1/models/NAME/versions/REF: a version's manifest.
 *
 * In protobuf (what libkestrel asks for), the version's versions/N.pb is sent as it lies, a block
 * at a time, followed by the records kestreld adds to it (its counts, its aliases, metadata "{}":
 * kestrel__store_manifest_open), which protobuf's merge rule lays over N.pb's. It is never decoded:
 * decoded, a 50,000-file dataset's manifest took kestreld 25.5 MiB more to answer, 3.2 times its
 * size, for each pull at once. Where N.pb will not do (an earlier build's store before its first
 * read, a damaged one), and in JSON, the manifest is decoded and encoded as before.
 *
 * Who may: whoever may read NAME (kd_route_repo checks it first: one a caller may not read is
 * answered as one that does not exist). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "api.h"
#include "repo_settle.h"
#include "store.h"
#include "repo.h"

#define BLOCK (64u * 1024)   /* what libmicrohttpd asks of the reader at once */

typedef struct {
    int fd;                 /* N.pb */
    uint64_t size;          /* its length, when it was read */
    kestrel_buf tail;
} manifest_answer;

static ssize_t answer_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    manifest_answer *a = cls;
    if (pos < a->size) {
        size_t take = a->size - pos < max ? (size_t)(a->size - pos) : max;
        ssize_t r;
        do
            r = pread(a->fd, buf, take, (off_t)pos);
        while (r < 0 && errno == EINTR);
        /* N.pb is replaced by a rename, never written in place: cut short is a disk's failure */
        return r > 0 ? r : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (pos - a->size < a->tail.size) {
        size_t left = a->tail.size - (size_t)(pos - a->size), take = left < max ? left : max;
        memcpy(buf, a->tail.ptr + (pos - a->size), take);
        return (ssize_t)take;
    }
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void answer_free(void *cls)
{
    manifest_answer *a = cls;
    close(a->fd);
    kd_answer_file_give();
    kestrel_buf_dispose(&a->tail);
    free(a);
}

/* model@version's N.pb and its tail as the answer: 1 when answered (*reply), 0 when N.pb will not
 * do (the caller decodes the manifest), -1 with *reply when an error was answered. */
static int stream(kd_req *r, const char *model, int64_t version, enum MHD_Result *reply)
{
    manifest_answer *a;
    struct MHD_Response *resp;
    struct stat st;
    int rc, fd = -1;
    kestrel_buf tail = KESTREL_BUF_INIT;
    if ((rc = kestrel__store_manifest_open(r->e->store, model, version, &fd, &tail)) < 0) {
        kestrel_buf_dispose(&tail);
        *reply = kd_reply_failure(r, rc);
        return -1;
    }
    if (fd < 0 || fstat(fd, &st) < 0 || (a = calloc(1, sizeof(*a))) == NULL) {
        if (fd >= 0)
            close(fd);
        kestrel_buf_dispose(&tail);
        return 0;
    }
    a->fd = fd;
    a->size = (uint64_t)st.st_size;
    a->tail = tail;
    /* held until the client reads it, however slowly: N.pb open, counted with the other answers'
     * files (a hostile test: 10,800 answers never read held as many, and kestreld ran out of
     * descriptors), and the block and the tail, from the budget of request memory */
    if (kd_answer_file_take() < 0) {
        close(a->fd);
        kestrel_buf_dispose(&a->tail);
        free(a);
        *reply = kd_reply_busy(r);
        return -1;
    }
    if (kd_answer_hold(r, BLOCK + a->tail.size) < 0) {
        answer_free(a);
        *reply = kd_reply_busy(r);
        return -1;
    }
    resp = MHD_create_response_from_callback(a->size + a->tail.size, BLOCK, answer_read, a, answer_free);
    if (resp == NULL) {
        answer_free(a);
        *reply = MHD_NO;
        return -1;
    }
    *reply = kd_reply_response(r, 200, resp, KESTREL__CT_PROTOBUF);
    return 1;
}

/* model@version, answered. */
static enum MHD_Result answer(kd_req *r, const char *model, int64_t version)
{
    Kestrel__V1__Manifest *pb = NULL;
    enum MHD_Result reply;
    int rc;
    if (!r->want_json && stream(r, model, version, &reply) != 0)
        return reply;
    if ((rc = kestrel__store_manifest(r->e->store, model, version, &pb)) < 0 ||
        (rc = kestrel__store_decorate(r->e->store, pb)) < 0) {
        kestrel__manifest_free(pb);
        return kd_reply_failure(r, rc);
    }
    return kd_reply_owned(r, 200, &pb->base);
}

typedef struct {
    char model[256];
    int64_t version;
} settling;

/* On a thread of its own (api_defer.c): the version's digests settled (seconds for a big file),
 * then answered. */
static enum MHD_Result settle_then_answer(kd_req *r, void *arg)
{
    settling *w = arg;
    enum MHD_Result reply;
    Kestrel__V1__Manifest *m = NULL;
    int rc = kd_settle_read_keep(r->e->repo_settle, w->model, w->version, &m);
    if (rc == 0 && m && (rc = kestrel__store_decorate(r->e->store, m)) == 0)
        reply = kd_reply_owned(r, 200, &m->base);   /* as settled (written or, on a full disk, not) */
    else {
        kestrel__manifest_free(m);
        reply = rc < 0 ? kd_reply_failure(r, rc) : answer(r, w->model, w->version);
    }
    free(w);
    return reply;
}

enum MHD_Result kd_repo_manifest(kd_req *r, const char *name, const char *ref)
{
    char full[512], model[256];
    settling *w;
    int64_t version;
    int rc;
    snprintf(full, sizeof(full), "%s@%s", name, ref);
    if ((rc = kestrel__store_resolve_version(r->e->store, full, model, &version)) < 0)
        return kd_reply_failure(r, rc);
    if (!kd_settle_due(r->e->repo_settle, model, version))
        return answer(r, model, version);
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return kd_reply_error(r, 500, "internal", "out of memory");
    snprintf(w->model, sizeof(w->model), "%s", model);
    w->version = version;
    return kd_defer(r, settle_then_answer, w);
}
