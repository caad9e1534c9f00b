/* lib/repo/transport_http.c - a repository behind kestreld. One connection pool a transfer (a curl
 * multi handle kept for the transport's life) and at most STREAMS transfers at once, whatever the
 * number of files: which chunks are missing is asked in batches of QUERY_BATCH digests; missing
 * chunks go up in packs of up to PACK_MAX bytes read straight from their files (kestreld verifies
 * each as it streams and never buffers a pack); chunks come down STREAMS requests at a time, the
 * small ones in batches (fetch_start). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <openssl/rand.h>
#include "chunk.h"
#include "fetch_batch.h"
#include "file_open.h"
#include "http.h"
#include "http_streams.h"
#include "store.h"
#include "transport.h"
#include "wire.h"

#define PACK_MAX (32u << 20)
#define RUN_PACK_MAX (256u << 20)   /* a pack of a run (well under kestreld's 1 GiB a pack) */
#define RUN_MIN (16u << 20)         /* fewer bytes of a file in a batch, ending in it: no run, read back */
/* kestreld names at most 16,384 chunks a pack (server/repo_pack.c): FastCDC's cuts fit in any pack */
_Static_assert(RUN_PACK_MAX / KESTREL__CHUNK_MIN + 1 <= 16384 && PACK_MAX / KESTREL__CHUNK_MIN + 1 <= 16384,
               "a pack of unnamed chunks kestreld would refuse");
#define QUERY_BATCH 10000
/* A pack kestreld answered 503 "unavailable" (its memory for requests spent: server/upload_mem.h) is sent
 * again after 0.1 s, 0.2 s, ... 12.8 s (25 s in all, with the client's retry_backoff_ms); one lost
 * on the way (a reset connection) is sent again too, twice more, counted apart from the busy
 * answers (found in CI: a reset after two 503s failed the push); storing chunks twice is harmless.
 * Not with max_retries < 0. */
#define PACK_TRIES 9
#define PACK_RESETS 3

typedef kestrel__http_transport http;
typedef kestrel__stream stream;

/* ---- push ----------------------------------------------------------------------------------- */

static int missing(kestrel__transport *t, kestrel__chunk_ref *refs, size_t n)
{
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0; off += QUERY_BATCH) {
        size_t k = n - off < QUERY_BATCH ? n - off : QUERY_BATCH, nq = 0;
        Kestrel__V1__ChunkQuery q = KESTREL__V1__CHUNK_QUERY__INIT;
        /* ?fills_digests=1, ?names_chunks=1: an answer may say so (a kestreld that does not know one
         * ignores it, and one that does sets the field only when asked: an older client refuses
         * unknown fields) */
        kestrel__request req = { "POST", "/api/v1/chunks/missing?fills_digests=1&names_chunks=1&settles_later=1", &q.base, &kestrel__v1__chunk_query_result__descriptor, 1, 0,
                                 NULL, t->tick ? kestrel__http_tick : NULL, t };
        ProtobufCMessage *res;
        const Kestrel__V1__ChunkQueryResult *qr;
        size_t at = 0;
        if ((q.digests = malloc(k * sizeof(char *))) == NULL)
            return kestrel__error_oom();
        for (size_t i = 0; i < k; i++)
            if (nq == 0 || strcmp(q.digests[nq - 1], refs[off + i].hex))
                q.digests[nq++] = refs[off + i].hex;   /* each digest once */
        q.n_digests = nq;
        rc = kestrel__http_call(&res, CLIENT(t), &req);
        free(q.digests);
        if (rc < 0)
            break;
        qr = (const Kestrel__V1__ChunkQueryResult *)res;
        if (qr->fills_digests)   /* kestreld computes each file's digest at commit anyway: the push need not */
            t->fills_digests = 1;
        if (qr->names_chunks)    /* and it names a chunk sent unnamed, hashing it as it would verify it */
            __atomic_store_n(&t->names_chunks, 1, __ATOMIC_RELAXED);   /* read by the push's thread */
        if (qr->settles_later)   /* and it settles them after the commit: no run need stream them */
            __atomic_store_n(&t->settles_later, 1, __ATOMIC_RELAXED);
        for (size_t i = 0; i < k; i++) {   /* both sorted: one walk */
            while (at < qr->n_missing && strcmp(qr->missing[at], refs[off + i].hex) < 0)
                at++;
            refs[off + i].missing = at < qr->n_missing && !strcmp(qr->missing[at], refs[off + i].hex);
        }
        protobuf_c_message_free_unpacked(res, NULL);
    }
    return rc;
}

typedef struct {
    const kestrel__push_files *files;
    kestrel__chunk_ref *const *todo;
    size_t n, i;         /* the pack's chunks: todo[0, n); i: the one pack_read is at */
    int fd;
    uint32_t fd_file;
    int open_rc;         /* its file could not be read again: the error, kept (curl sets its own) */
    const struct stat *read;   /* packs.read */
    kestrel__error_kept open_err;
    uint8_t head[36];
    size_t in_head, in_chunk;
    kestrel__http_transport *run;   /* a pack of the transport's run: it is busy until this one ends */
    char url[2300];
    int tries;           /* sent this often already; again once due (ms, CLOCK_MONOTONIC) */
    int resets;          /* of those, lost on the way */
    int64_t due;
} pack_upload;

typedef struct {
    const kestrel__push_files *files;
    kestrel__chunk_ref *const *todo;
    size_t n, next;
    kestrel__progress *pr;
    char url[2200];
    pack_upload *again[STREAMS];   /* packs to send again (PACK_TRIES) */
    size_t nagain;
    http *h;
    const struct stat *read;        /* the file of the unnamed chunks, as the push read it (NULL: none) */
} packs;

static size_t pack_read(char *buf, size_t size, size_t nitems, void *payload)
{
    pack_upload *u = payload;
    size_t room = size * nitems, done = 0;
    while (done < room && u->i < u->n) {
        const kestrel__chunk_ref *c = u->todo[u->i];
        if (u->in_head < 36) {
            size_t take;
            if (u->in_head == 0) {
                if (c->unnamed)
                    memset(u->head, 0, 32);   /* kestreld names it (names_chunks) */
                else
                    (void)kestrel__unhex(c->hex, 32, u->head);   /* hashed here: 64 hex digits */
                u->head[32] = (uint8_t)(c->len >> 24);
                u->head[33] = (uint8_t)(c->len >> 16);
                u->head[34] = (uint8_t)(c->len >> 8);
                u->head[35] = (uint8_t)c->len;
            }
            take = 36 - u->in_head < room - done ? 36 - u->in_head : room - done;
            memcpy(buf + done, u->head + u->in_head, take);
            u->in_head += take;
            done += take;
            continue;
        }
        if (u->fd < 0 || u->fd_file != c->file) {
            struct stat st;
            char path[KESTREL__PUSH_PATH_MAX];
            if (u->fd >= 0)
                close(u->fd);
            u->fd_file = c->file;
            if ((u->fd = kestrel__file_open_regular(-1, kestrel__push_file_path(u->files, c->file, path), 1, &st)) < 0 ||
                (c->unnamed && u->read && (st.st_dev != u->read->st_dev || st.st_ino != u->read->st_ino))) {
                if (u->fd >= 0) {   /* another file renamed over the one read: kestreld would name its bytes */
                    close(u->fd);
                    u->fd = kestrel__error_set(KESTREL_EIO, "%s changed while it was pushed (another file took its "
                                                            "place): push it again once it is complete", path);
                }
                u->open_rc = u->fd;   /* for pack_end */
                kestrel__error_keep(&u->open_err);
                u->fd = -1;
                return CURL_READFUNC_ABORT;
            }
        }
        {
            size_t want = c->len - u->in_chunk, take = want < room - done ? want : room - done;
            ssize_t r = take ? pread(u->fd, buf + done, take, c->offset + (off_t)u->in_chunk) : 0;
            if (r <= 0 && take)
                return CURL_READFUNC_ABORT;   /* unreadable, or the file shrank under us */
            u->in_chunk += (size_t)r;
            done += (size_t)r;
            if (u->in_chunk == c->len) {
                u->i++;
                u->in_head = u->in_chunk = 0;
            }
        }
    }
    return done;
}

/* curl's rewind of a pack it must send again from its start (kestreld died or restarted as it was
 * sent: curl connects again and starts over). Without it, a push ended "Send failed since
 * rewinding of the data stream failed" where kestreld restarted or died mid-pack (a hostile test). */
static int pack_seek(void *payload, curl_off_t offset, int origin)
{
    pack_upload *u = payload;
    if (origin != SEEK_SET || offset != 0)
        return CURL_SEEKFUNC_CANTSEEK;
    u->i = u->in_head = u->in_chunk = 0;
    return CURL_SEEKFUNC_OK;
}

/* todo[i] and todo[i + 1]: the same file, one right after the other. */
static int follows(kestrel__chunk_ref *const *todo, size_t n, size_t i)
{
    return i + 1 < n && todo[i + 1]->file == todo[i]->file && todo[i + 1]->offset == todo[i]->offset + todo[i]->len;
}

/* todo[i] goes in a pack of a run: it is the next chunk of the current run, or the first of a
 * file's chunks that make at least RUN_MIN bytes here or go on to the batch's end (and maybe past
 * it). A smaller file's chunks go in plain packs, and kestreld reads it back at commit. */
static int run_starts(const http *h, kestrel__chunk_ref *const *todo, size_t n, size_t i)
{
    const kestrel__chunk_ref *c = todo[i];
    int64_t bytes = 0;
    if (h->run_id[0] && c->file == h->run_file && c->offset == h->run_next)
        return 1;
    if (c->offset != 0 || !follows(todo, n, i))
        return 0;
    for (;; i++) {
        bytes += todo[i]->len;
        if (bytes >= (int64_t)RUN_MIN || !follows(todo, n, i))
            break;
    }
    return bytes >= (int64_t)RUN_MIN || i + 1 == n;
}

/* Send u on s (again, for a pack tried before). */
static int pack_launch(http *h, stream *s, pack_upload *u)
{
    int64_t total = 0;
    for (size_t i = 0; i < u->n; i++)
        total += 36 + u->todo[i]->len;
    u->i = u->in_head = u->in_chunk = 0;
    if (kestrel__stream_open(h, s, u->url, "application/octet-stream", 1u << 20, total) < 0)
        return KESTREL_ENOMEM;
    s->job = u;
    if (u->run)
        u->run->run_busy = 1;
    curl_easy_setopt(s->e, CURLOPT_POST, 1L);
    curl_easy_setopt(s->e, CURLOPT_READFUNCTION, pack_read);
    curl_easy_setopt(s->e, CURLOPT_READDATA, u);
    curl_easy_setopt(s->e, CURLOPT_SEEKFUNCTION, pack_seek);
    curl_easy_setopt(s->e, CURLOPT_SEEKDATA, u);
    curl_easy_setopt(s->e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)total);
    curl_easy_setopt(s->e, CURLOPT_UPLOAD_BUFFERSIZE, 2L << 20);   /* the 64 KiB default halves throughput */
    return 1;
}

static int pack_start(void *ctx, http *h, stream *s)
{
    packs *p = ctx;
    pack_upload *u;
    size_t first = p->next;
    int64_t bytes = 0;
    http *run = NULL;
    if (p->nagain) {   /* a pack to send again goes first, once due; none new meanwhile (kestreld is busy) */
        int64_t now = kestrel__mono_ms();
        for (size_t i = 0; i < p->nagain; i++)
            if (p->again[i]->due <= now) {
                u = p->again[i];
                p->again[i] = p->again[--p->nagain];
                if (pack_launch(h, s, u) < 0) {
                    p->again[p->nagain++] = u;
                    return KESTREL_ENOMEM;
                }
                return 1;
            }
        return 2;
    }
    if (p->next >= p->n)
        return 0;
    if ((u = calloc(1, sizeof(*u))) == NULL)
        return kestrel__error_oom();
    snprintf(u->url, sizeof(u->url), "%s", p->url);
    if (run_starts(h, p->todo, p->n, first)) {
        /* a file's chunks in order, up to RUN_PACK_MAX of this batch's in one pack, one pack of a run in
         * flight at a time: kestreld hashes the file as they come (?run=ID&at=its bytes before this pack) */
        const kestrel__chunk_ref *c = p->todo[first];
        if (h->run_busy) {
            free(u);
            return 2;   /* its last pack is still in flight: the run's bytes must arrive in order */
        }
        if (c->offset == 0 || c->file != h->run_file) {
            unsigned char id[16];
            if (RAND_bytes(id, sizeof(id)) != 1) {   /* OpenSSL's generator is not seeded: the system's entropy */
                free(u);
                return kestrel__error_set(KESTREL_EIO, "cannot pick a run id: OpenSSL has no random bytes "
                                                      "(check /dev/urandom and the getrandom system call)");
            }
            kestrel__hex(id, 16, h->run_id);
            h->run_file = c->file;
        }
        while (p->next == first || (p->next < p->n && follows(p->todo, p->n, p->next - 1) &&
                                    bytes + p->todo[p->next]->len <= RUN_PACK_MAX))
            bytes += p->todo[p->next++]->len;
        h->run_next = p->todo[p->next - 1]->offset + p->todo[p->next - 1]->len;
        run = h;
        snprintf(u->url + strlen(u->url), sizeof(u->url) - strlen(u->url), "?run=%s&at=%lld%s", h->run_id,
                 (long long)c->offset, __atomic_load_n(&h->base.settles_later, __ATOMIC_RELAXED) ? "&whole=0" : "");
    } else {   /* other chunks: packs of up to PACK_MAX, each ending before a run */
        while (p->next < p->n && (p->next == first || (bytes + p->todo[p->next]->len <= PACK_MAX &&
                                                        !run_starts(h, p->todo, p->n, p->next))))
            bytes += p->todo[p->next++]->len;
    }
    u->files = p->files;
    u->read = p->read;
    u->todo = p->todo + first;
    u->n = p->next - first;
    u->fd = -1;
    u->run = run;
    if (pack_launch(h, s, u) < 0) {
        free(u);
        return KESTREL_ENOMEM;
    }
    return 1;
}

static void pack_release(stream *s)
{
    pack_upload *u = s->job;
    if (u->run)
        u->run->run_busy = 0;
    if (u->fd >= 0)
        close(u->fd);
    free(u);
}

/* The digests kestreld gave the chunks u sent unnamed, from its answer, into their refs; those of
 * them it held already are counted in found_unnamed. */
static int pack_names(http *h, pack_upload *u, const kestrel_buf *resp)
{
    Kestrel__V1__PackResult *res = NULL;
    size_t k = 0, unnamed = 0;
    int rc;
    for (size_t i = 0; i < u->n; i++)
        unnamed += u->todo[i]->unnamed != 0;
    if (unnamed == 0)
        return 0;
    if ((rc = kestrel__wire_unpack((ProtobufCMessage **)&res, &kestrel__v1__pack_result__descriptor,
                                   (const uint8_t *)(resp->ptr ? resp->ptr : ""), resp->size)) < 0)
        return kestrel__error_set(KESTREL_EPROTO, "pack upload: kestreld's answer is not a PackResult");
    if (res->named.len != 32 * unnamed) {
        rc = kestrel__error_set(KESTREL_EPROTO, "pack upload: kestreld named %zu of the %zu chunks sent unnamed",
                                res->named.len / 32, unnamed);
        protobuf_c_message_free_unpacked(&res->base, NULL);
        return rc;
    }
    for (size_t i = 0; i < u->n; i++)
        if (u->todo[i]->unnamed)
            kestrel__hex(res->named.data + 32 * k++, 32, u->todo[i]->hex);
    if (res->named_held > 0)   /* it held some of them: the push hashes the rest of the file (push.c) */
        __atomic_fetch_add(&h->base.found_unnamed, res->named_held, __ATOMIC_RELAXED);
    protobuf_c_message_free_unpacked(&res->base, NULL);
    return 0;
}

/* Whether u, ended with cc, goes again (PACK_TRIES, PACK_RESETS). */
static int pack_again(const packs *p, pack_upload *u, stream *s, CURLcode cc)
{
    int reset = cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR || cc == CURLE_GOT_NOTHING;
    if (u->open_rc != 0 || p->h->c->opts.max_retries < 0 || p->nagain >= STREAMS || u->tries + 1 >= PACK_TRIES)
        return 0;
    if (reset)
        return ++u->resets < PACK_RESETS;
    return cc == CURLE_OK && kestrel__http_busy(kestrel__stream_status(s), &s->resp);
}

static int pack_end(void *ctx, stream *s, CURLcode cc)
{
    packs *p = ctx;
    pack_upload *u = s->job;
    int rc;
    const kestrel_client_options *o = &p->h->c->opts;
    if (pack_again(p, u, s, cc)) {   /* u is kept: it goes again (its run stays busy, so the run's next
                                      * pack waits); its file is opened anew then */
        if (u->fd >= 0)
            close(u->fd);
        u->fd = -1;
        u->due = kestrel__mono_ms() + (int64_t)(o->retry_backoff_ms ? o->retry_backoff_ms : 100) * (1 << u->tries++);
        p->again[p->nagain++] = u;
        return 0;
    }
    rc = kestrel__stream_result(s->e, cc, &s->resp, "pack upload");
    if (rc < 0 && u->open_rc < 0) {   /* say why the file could not be read again, not "changed" */
        rc = kestrel__error_restore(&u->open_err);
    } else if (rc == KESTREL_EINVALID) {   /* a chunk did not match its bytes: they changed since they were hashed */
        char why[300];
        snprintf(why, sizeof(why), "%s", kestrel_error_last()->message);
        rc = kestrel__error_set(KESTREL_EIO, "a file changed while it was pushed (kestreld: %s)", why);
    }
    if (rc == 0)
        rc = pack_names(p->h, u, &s->resp);
    if (rc == 0) {
        int64_t bytes = 0;
        for (size_t i = 0; i < u->n; i++)
            bytes += u->todo[i]->len;
        __atomic_fetch_add(&p->pr->p.bytes_new, bytes, __ATOMIC_RELAXED);   /* read by the push's thread */
        __atomic_fetch_add(&p->pr->p.chunks_new, (int64_t)u->n, __ATOMIC_RELAXED);
        rc = kestrel__progress_report(p->pr, 0);
    }
    pack_release(s);
    return rc;
}

static int send_chunks(kestrel__transport *t, const kestrel__push_files *files, kestrel__chunk_ref *const *todo,
                       size_t n, kestrel__progress *pr, const struct stat *read)
{
    packs p = { files, todo, n, 0, pr, "", { NULL }, 0, (http *)t, read };
    int rc;
    snprintf(p.url, sizeof(p.url), "%s/api/v1/chunks/pack", CLIENT(t)->url);
    ((http *)t)->run_busy = 0;
    do   /* a pack to send again came back after the last new one started */
        rc = kestrel__streams_run((http *)t, pack_start, pack_end, pack_release, &p);
    while (rc == 0 && p.nagain > 0);
    for (size_t i = 0; i < p.nagain; i++) {   /* given up on an error elsewhere */
        stream s = { .job = p.again[i] };
        pack_release(&s);
    }
    return rc;
}

static int64_t chunks_read(void *ctx, int64_t at, void *buf, size_t n)
{
    return kestrel__spool_pread(ctx, at, buf, n);
}

/* The manifest as one body: m packed, then its chunks' and files' records as they lie in the spool
 * (a message followed by elements of its lists decodes as the message with them: wire.h), read as
 * curl sends them. It carries a key picked at random (commit_key): sent again, by a retry after
 * kestreld died having made the version, it is answered that version (server/repo_commit_key.c).
 * To a kestreld known to keep keys it is retried as an idempotent request is (lib/http.c): after a
 * proxy's 502, 503 or 504 and a connection lost once it was sent too (before it was, each failed a
 * push whose version may have been made, and the push run again made a second one). Known: it said
 * it names chunks (`missing`'s answer), which came after keys; a kestreld before keys ignores the
 * field, and a commit it is sent again makes a second version, so there a lost answer still fails
 * the push, as it did. There a timeout is retried once too (lib/http.h: patient). A stop (the
 * push's progress callback) is seen while it is under way and between its tries; a push that fails
 * or stops once a try went out whole, unanswered, says first that its version may have been made,
 * its code and HTTP status kept, and kestrel_error_outcome_unknown() is 1 (which the CLI and Python
 * read). */
#define MAYBE_MADE "its version may have been made all the same (list the model's versions to see)"
static int commit(kestrel__transport *t, Kestrel__V1__Manifest *m, kestrel__spool *chunks, int64_t *version)
{
    char path[600], key[33];
    unsigned char r[16];
    ProtobufCMessage *resp = NULL;
    kestrel__request req = { "POST", path, &m->base, &kestrel__v1__manifest__descriptor, 0, 0, NULL,
                             t->tick ? kestrel__http_tick : NULL, t };
    int rc, unknown = 0;
    req.outcome_unknown = &unknown;
    if (getentropy(r, sizeof(r)) == 0) {   /* else none: a commit sent again makes a second version */
        kestrel__hex(r, sizeof(r), key);
        m->commit_key = key;
        req.idempotent = __atomic_load_n(&t->names_chunks, __ATOMIC_RELAXED);   /* it keeps keys */
        req.patient = req.idempotent;   /* for as long as a restart takes (a hostile test: 0.7 s did not) */
    }
    if (chunks && m->n_chunks == 0 && m->n_files == 0) {
        req.tail = chunks_read;
        req.tail_ctx = chunks;
        req.tail_size = kestrel__spool_bytes(chunks);
    }
    snprintf(path, sizeof(path), "/api/v1/models/%s/versions%s", m->name,
             __atomic_load_n(&t->settles_later, __ATOMIC_RELAXED) ? "?settle=later" : "");
    rc = kestrel__http_call(&resp, CLIENT(t), &req);
    m->commit_key = (char *)protobuf_c_empty_string;
    if (rc < 0 && unknown) {   /* a push must not say "failed" of a version that may be there */
        kestrel__error_kept was;   /* its code, status and transport code stay; said first, the cause after */
        char msg[sizeof(was.msg)];
        kestrel__error_keep(&was);
        if (rc == KESTREL_ECANCELLED || rc == KESTREL_EUSER)
            snprintf(msg, sizeof(msg), "stopped while the commit of %s was unanswered: " MAYBE_MADE, m->name);
        else
            snprintf(msg, sizeof(msg), "the commit of %s was sent and its answer lost, so " MAYBE_MADE ": %s",
                     m->name, was.msg);
        was.err.message = msg;
        rc = kestrel__error_restore(&was);
        kestrel__error_outcome_unknown();
        return rc;
    }
    if (rc < 0)
        return rc;
    *version = ((Kestrel__V1__Manifest *)resp)->version;
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

/* ---- pull ----------------------------------------------------------------------------------- */

/* The manifest goes into fd as it comes: a dataset's is long (manifest_file.h). */
static int resolve(kestrel__transport *t, const char *ref, int fd)
{
    char name[256], path[700];
    const char *at;
    kestrel__request req = { "GET", path, NULL, NULL, 1, 0, NULL,
                             t->tick ? kestrel__http_tick : NULL, t };   /* a pull's stop: nothing is written yet */
    int rc = kestrel__ref_split(ref, name, sizeof(name), &at);
    if (rc < 0)
        return rc;
    req.to_fd = &fd;
    snprintf(path, sizeof(path), "/api/v1/models/%s/versions/%s", name, at);
    /* the temp file, not the network: not kestreld's own storage (its 507 or 500 io_error, its own words) */
    if ((rc = kestrel__http_call(NULL, CLIENT(t), &req)) == KESTREL_EIO && !kestrel_error_last()->http_status)
        rc = kestrel__error_set(KESTREL_EIO, "cannot keep the manifest of %s in a temp file ($TMPDIR, else /var/tmp, else /tmp): %s",
                                ref, kestrel_error_last()->message);
    return rc;
}

/* kestreld re-hashes its copy and quarantines it when the stored bytes are wrong, so the next push
 * heals every version using it (a network fault changes nothing there): server/repo_fsck.c. */
static void damaged(kestrel__transport *t, const char *digest)
{
    char path[128];
    kestrel__request req = { "POST", path, NULL, NULL, 0, 0, NULL };
    snprintf(path, sizeof(path), "/api/v1/chunks/%s/verify", digest);
    kestrel__http_call(NULL, CLIENT(t), &req);   /* the pull sets its own error after this */
}

/* A pull's downloads. Chunks up to FETCH_SMALL, every chunk Kestrel cuts, come FETCH_BATCH (or
 * FETCH_BATCH_BYTES) at a time in one POST /api/v1/chunks/fetch (server/repo_fetch.c), each handed on
 * as soon as its bytes are in: kestreld reads the files of a batch ahead, so a cold store is read
 * with many reads in flight (a 1 GiB pull from a cold store, 3,600 chunks: 3.4-4.4 s with the chunks
 * over 256 KiB one GET each, 2.7-3.0 s batched; the same warm). A chunk left alone (the last, or one
 * beside a larger one) is one GET; so are larger ones, which only another client may have stored
 * (kestreld sends those with sendfile). A kestreld that refuses a batch (refused()) is asked one
 * chunk at a time from then on, the refused batch's too. */
#define FETCH_SMALL KESTREL__CHUNK_MAX
#define FETCH_BATCH 256
#define FETCH_BATCH_BYTES (8u << 20)

typedef struct {
    const kestrel__want *want;
    size_t n, next;
    kestrel__fetched got;
    void *ctx;
    size_t redo[STREAMS][2];   /* want[first, first + count) of batches refused: fetched one by one */
    size_t inflight;           /* downloads started and not ended: one may yet be refused */
    http *h;
} fetches;

typedef struct {
    fetches *f;
    size_t first, count;         /* want[first, first + count): a POST of several (a batch), or one GET */
    kestrel_buf query;           /* a batch's ChunkQuery, sent from here */
    kestrel__batch parse;        /* its answer as it comes */
    int rc;                      /* got()'s failure, or a framing error, kept for fetch_end */
} download;

#define BATCH(d) ((d)->count > 1)

static void download_free(download *d)
{
    kestrel_buf_dispose(&d->query);
    kestrel__batch_dispose(&d->parse);
    free(d);
}

static void download_release(stream *s)
{
    download_free(s->job);
}

/* A batch's answer as curl hands it over (fetch_batch.h); an error answer is collected. */
static size_t batch_write(char *data, size_t size, size_t nitems, void *payload)
{
    stream *s = payload;
    download *d = s->job;
    if (kestrel__stream_status(s) != 200)
        return kestrel__stream_collect(data, size, nitems, s);
    d->rc = kestrel__batch_feed(&d->parse, (const uint8_t *)data, size * nitems);
    return d->rc < 0 ? 0 : size * nitems;
}

static int fetch_start(void *ctx, http *h, stream *s)
{
    fetches *f = ctx;
    download *d;
    char url[2300];
    size_t first = f->next, count = 1;
    int64_t bytes = 0;
    for (int i = 0; i < STREAMS && first == f->next; i++)
        if (f->redo[i][1]) {   /* a chunk of a refused batch */
            first = f->redo[i][0]++;
            f->redo[i][1]--;
        }
    if (first == f->next && h->no_batch == 2) {   /* busy before: batches again once its chunks came */
        int left = 0;
        for (int i = 0; i < STREAMS; i++)
            left |= f->redo[i][1] != 0;
        if (!left)
            h->no_batch = 0;
    }
    if (first == f->next) {
        if (f->next >= f->n)
            return f->inflight ? 2 : 0;   /* all asked for: unless a batch in flight is refused */
        count = 0;
        while (!h->no_batch && first + count < f->n && count < FETCH_BATCH && f->want[first + count].size <= FETCH_SMALL &&
               bytes + f->want[first + count].size <= FETCH_BATCH_BYTES)
            bytes += f->want[first + count++].size;
        count = count < 2 ? 1 : count;
        f->next += count;
    }
    if ((d = calloc(1, sizeof(*d))) == NULL)
        return kestrel__error_oom();
    d->f = f;
    d->first = first;
    d->count = count;
    kestrel__batch_init(&d->parse, f->want + first, count, f->got, f->ctx);
    if (BATCH(d)) {
        Kestrel__V1__ChunkQuery q = KESTREL__V1__CHUNK_QUERY__INIT;
        int rc;
        if ((q.digests = malloc(count * sizeof(char *))) == NULL) {
            download_free(d);
            return kestrel__error_oom();
        }
        for (size_t i = 0; i < count; i++)
            q.digests[i] = (char *)f->want[first + i].digest;
        q.n_digests = count;
        rc = kestrel__wire_pack(&d->query, &q.base);
        free(q.digests);
        snprintf(url, sizeof(url), "%s/api/v1/chunks/fetch?gone=1", h->c->url);   /* KESTREL__CHUNK_GONE heads */
        if (rc < 0 || kestrel__stream_open(h, s, url, KESTREL__CT_PROTOBUF, ERROR_MAX, (int64_t)d->query.size) < 0) {
            download_free(d);
            return rc < 0 ? rc : kestrel__error_oom();
        }
        curl_easy_setopt(s->e, CURLOPT_POST, 1L);
        curl_easy_setopt(s->e, CURLOPT_POSTFIELDS, d->query.ptr);
        curl_easy_setopt(s->e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->query.size);
        curl_easy_setopt(s->e, CURLOPT_WRITEFUNCTION, batch_write);
    } else {
        snprintf(url, sizeof(url), "%s/api/v1/chunks/%s", h->c->url, f->want[first].digest);
        if (kestrel__stream_open(h, s, url, NULL, (size_t)f->want[first].size, 0) < 0) {
            download_free(d);
            return kestrel__error_oom();
        }
    }
    curl_easy_setopt(s->e, CURLOPT_BUFFERSIZE, 512L * 1024);
    s->job = d;
    f->inflight++;
    return 1;
}

/* Whether kestreld refused a batch as one that does not serve them would: an older kestreld
 * (404 "no such endpoint", 405), a read-scoped token there (403), a request over its --max-body
 * (413), its memory for request bodies spent (503: a GET has no body). A 404 for a chunk it does
 * not store is an answer: the pull fails as a GET would have. */
static int refused(long status, const kestrel_buf *body)
{
    if (status == 404)
        return !(body->ptr && memmem(body->ptr, body->size, "no such chunk", 13));
    return status == 403 || status == 405 || status == 413 || status == 503;
}

static int fetch_end(void *ctx, stream *s, CURLcode cc)
{
    fetches *f = ctx;
    download *d = s->job;
    const kestrel__want *w = &f->want[d->first];
    int rc = d->rc;
    f->inflight--;
    if (rc == 0 && BATCH(d) && refused(kestrel__stream_status(s), &s->resp)) {
        int i = 0;   /* one by one from now on (at most STREAMS batches refused: no new one after the first) */
        while (i < STREAMS && f->redo[i][1])
            i++;
        if (i == STREAMS)
            rc = kestrel__error_set(KESTREL_ERROR, "chunk download: more batches refused than streams");
        else {
            f->redo[i][0] = d->first;
            f->redo[i][1] = d->count;
            if (f->h->no_batch != 1)   /* kestreld busy (503): only until these are fetched (a review) */
                f->h->no_batch = kestrel__stream_status(s) == 503 ? 2 : 1;
        }
    } else if (rc == 0 && !BATCH(d) && cc == CURLE_WRITE_ERROR && s->over) {   /* more bytes than the chunk holds */
        damaged(&f->h->base, w->digest);   /* its stored copy grew: kestreld re-checks it */
        rc = kestrel__error_set(KESTREL_EPROTO, "chunk %.12s arrived damaged (more than its %lld bytes)", w->digest,
                                (long long)w->size);
    } else if (rc == 0 && (rc = kestrel__stream_result(s->e, cc, &s->resp, "chunk download")) == 0) {
        rc = BATCH(d) ? kestrel__batch_end(&d->parse) : f->got(f->ctx, w, s->resp.ptr ? s->resp.ptr : "", s->resp.size);
    }
    download_free(d);
    return rc;
}

static int fetch(kestrel__transport *t, const kestrel__want *want, size_t n, kestrel__fetched got, void *ctx)
{
    fetches f = { want, n, 0, got, ctx, { { 0, 0 } }, 0, (http *)t };
    return kestrel__streams_run((http *)t, fetch_start, fetch_end, download_release, &f);
}

/* ---- the rest of the repository API ------------------------------------------------------------ */

static int versions(kestrel__transport *t, const char *name, const char *sel, Kestrel__V1__ManifestList **out)
{
    char path[600];
    kestrel__request req = { "GET", path, NULL, &kestrel__v1__manifest_list__descriptor, 1, 0, NULL };
    /* (sel is a number or an alias: [a-z0-9._-], nothing to escape) */
    snprintf(path, sizeof(path), "/api/v1/models/%s/versions%s%s", name, sel ? "?version=" : "", sel ? sel : "");
    return kestrel__http_call((ProtobufCMessage **)out, CLIENT(t), &req);
}

static int list(kestrel__transport *t, kestrel_buf *out)
{
    kestrel__request req = { "GET", "/api/v1/models", NULL, &kestrel__v1__model_list__descriptor, 1, 0, NULL };
    ProtobufCMessage *m;
    int rc = kestrel__http_call(&m, CLIENT(t), &req);
    if (rc < 0)
        return rc;
    rc = kestrel__buf_puts(out, "");
    for (size_t i = 0; rc == 0 && i < ((Kestrel__V1__ModelList *)m)->n_names; i++)
        rc = kestrel__buf_printf(out, "%s\n", ((Kestrel__V1__ModelList *)m)->names[i]);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

static int alias_call(kestrel__transport *t, const char *name, const char *alias, int64_t version, int del)
{
    char path[700];
    Kestrel__V1__AliasUpdate u = KESTREL__V1__ALIAS_UPDATE__INIT;
    kestrel__request req = { del ? "DELETE" : "PUT", path, del ? NULL : &u.base, NULL, 1, 0, NULL };
    u.version = version;
    snprintf(path, sizeof(path), "/api/v1/models/%s/aliases/%s", name, alias);
    return kestrel__http_call(NULL, CLIENT(t), &req);
}

static int alias_set(kestrel__transport *t, const char *name, const char *alias, int64_t version)
{
    return alias_call(t, name, alias, version, 0);
}

static int alias_delete(kestrel__transport *t, const char *name, const char *alias)
{
    return alias_call(t, name, alias, 0, 1);
}

static int remove_version(kestrel__transport *t, const char *name, int64_t version)
{
    char path[700];
    kestrel__request req = { "DELETE", path, NULL, NULL, 1, 0, NULL };
    snprintf(path, sizeof(path), "/api/v1/models/%s/versions/%" PRId64, name, version);
    return kestrel__http_call(NULL, CLIENT(t), &req);
}

static int gc(kestrel__transport *t, int64_t grace_s, kestrel__store_gc_stats *out)
{
    char path[64];
    ProtobufCMessage *res = NULL;
    kestrel__request req = { "POST", path, NULL, &kestrel__v1__repo_gc_result__descriptor, 0, 0, NULL };
    const Kestrel__V1__RepoGcResult *r;
    int rc;
    if (grace_s < 0)
        snprintf(path, sizeof(path), "/api/v1/repo/gc");
    else
        snprintf(path, sizeof(path), "/api/v1/repo/gc?grace_s=%" PRId64, grace_s);
    if ((rc = kestrel__http_call(&res, CLIENT(t), &req)) < 0)
        return rc;
    r = (const Kestrel__V1__RepoGcResult *)res;
    *out = (kestrel__store_gc_stats){ r->chunks_live, r->chunks_removed, r->temps_removed, r->bytes_freed };
    protobuf_c_message_free_unpacked(res, NULL);
    return 0;
}

static void close_http(kestrel__transport *t)
{
    curl_multi_cleanup(((http *)t)->multi);
    free(t);
}

static const kestrel__transport_ops ops = {
    resolve, missing, send_chunks, commit, fetch, damaged, versions, list, alias_set, alias_delete, remove_version, gc,
    close_http,
};

int kestrel__transport_http(kestrel__transport **out, kestrel_client *c)
{
    http *h = calloc(1, sizeof(*h));
    if (h == NULL || (h->multi = curl_multi_init()) == NULL) {
        free(h);
        return kestrel__error_oom();
    }
    h->base.ops = &ops;
    h->c = c;
    {   /* which kestreld: the stat cache ties the digests its answers named to it */
        char hex[KESTREL__HEX_LEN + 1];
        kestrel__sha256_hex(c->url, strlen(c->url), hex);
        snprintf(h->base.where, sizeof(h->base.where), "%.16s", hex);
    }
    *out = &h->base;
    return 0;
}
