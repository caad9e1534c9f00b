/* server/repo_pack.c - POST /api/v1/chunks/pack: a pack of chunks, each verified against its digest
 * as it streams in and stored; at most one chunk in memory (and up to 15 its run holds: repo_runs.h),
 * never the pack (api.h: kd_pack_*). Not routed through api_repo.c: api.c's on_request takes the pack
 * at its headers (kd_pack_begin, after the token and scope checks), feeds its body as it arrives
 * (kd_pack_feed) and answers at its end (kd_pack_finish). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "api.h"
#include "disk_floor.h"
#include "metrics.h"
#include "repo_runs.h"
#include "repo_settle.h"
#include "chunk.h"
#include "store.h"
#include "repo.h"
#include "upload_mem.h"

struct kd_pack {
    kestrel__store *store;
    uint8_t head[36];
    size_t head_len;
    uint32_t want;          /* bytes of the current chunk */
    kestrel_buf chunk;      /* at most one chunk in memory (and up to 15 its run has), never the pack */
    kd_run_feed *run;       /* the run the pack advances (NULL: none) */
    int64_t bytes, named_bytes;   /* named_bytes: of bytes, those of chunks sent unnamed */
    int full;               /* the store's disk is full: 507, not the client's fault */
    int io;                 /* the store could not write: 500, not the client's fault either */
    /* What storing the chunks came to, written by the threads that store them (where the pack has a
     * run, its helper and, when the helper is behind, the receiving thread, both at once: the counts
     * are atomic, and the first failure is the one told; else the receiving thread alone) and read by
     * the receiving thread once store_failed says so, or after kd_run_feed_end; the failure's message
     * is set before it */
    int64_t stored;
    int64_t named_held;     /* chunks sent unnamed that the store held already */
    int store_full, store_failed;
    int store_failing;      /* a store failed: set first, by exchange, so that one failure is told
                             * (store_full, store_error, then store_failed) and no store starts after */
    char store_error[256];
    int too_big;            /* past KD_MAX_PACK: 413 */
    int busy;               /* the budget of upload_mem.h could not hold the next chunk: 503 */
    kd_upload_mem *mem;     /* the chunk buffers' memory is taken from it: held bytes, for user */
    uint64_t held;
    int64_t user;
    unsigned nbufs;         /* chunk buffers it may have at once */
    uint64_t received;      /* every byte of the body so far (a chunked upload has no Content-Length) */
    kestrel_buf named;      /* the digests of the chunks sent unnamed, 32 bytes each, for the answer */
    uint64_t named_mem;     /* what named's memory took from mem */
    char error[256];
};

/* Chunks a pack may send unnamed (an all-zero digest: the server names them), at most: the answer
 * then holds up to 512 KiB of their digests, grown as they come, taken from the budget of
 * upload_mem.h. A push sends those of a big file, in packs of at most 256 MiB: 4,097 chunks at most
 * (FastCDC's 64 KiB least, and the tail; lib/repo/transport_http.c checks it at build time). */
#define UNNAMED_MAX 16384
static const uint8_t unnamed[32];

/* Room for a chunk of want bytes in each buffer the pack may have at once: its own, and with a
 * run those its helper holds (repo_runs.h), each grown to exactly a chunk when it is filled. -1: the
 * budget refused it. */
static int room_for(kd_pack *p, uint32_t want)
{
    uint64_t each = p->held / p->nbufs;
    if ((uint64_t)want + 1 > each) {
        if (kd_upload_mem_take(p->mem, p->user, p->nbufs * ((uint64_t)want + 1 - each)) < 0)
            return -1;
        p->held = p->nbufs * ((uint64_t)want + 1);
    }
    return kestrel__buf_reserve(&p->chunk, (size_t)want + 1);   /* a buffer the helper gave back may be new */
}

static void pack_fail(kd_pack *p, const char *msg)
{
    if (!p->error[0])
        snprintf(p->error, sizeof(p->error), "%s", msg);
}

/* The data disk keeps its floor (disk_floor.h) free of chunks, for the catalog (job
 * states, tokens, logs) and jobs' output: one user's packs, committed or not, filled it, and every
 * other user's submit and token failed (a hostile test). A chunk (or a commit's version files,
 * api_repo.c) that would take the disk below it fails as a full disk does (ENOSPC: 507), before it is
 * written. A disk that statvfs cannot read is left to the write. */
int kd_repo_keeps_floor(struct kestrel__store *s, const char *what, int64_t len)
{
    int64_t avail, keep;
    if (kd_disk_floor(kestrel__store_root(s), &avail, &keep) < 0 || avail - len >= keep)
        return 0;
    return kestrel__error_sys(KESTREL_EIO, ENOSPC, "cannot store %s: the data disk keeps its last %lld KiB free for "
                              "the catalog and jobs' output", what, (long long)(keep >> 10));
}

/* A verified chunk stored unless the store has it: 0, or -1 with store_* set (a kd_run_chunk_fn:
 * on the run's helper thread or the receiving thread, up to two at once; or on the receiving thread
 * for a pack without a run). */
static int store_chunk(void *ctx, const char *hex, const kestrel_buf *chunk, int named)
{
    kd_pack *p = ctx;
    int err;
    if (__atomic_load_n(&p->store_failing, __ATOMIC_ACQUIRE))
        return -1;   /* the other thread's store failed: none starts after it */
    if (kestrel__store_has_chunk(p->store, hex)) {
        __atomic_add_fetch(&p->named_held, named, __ATOMIC_RELAXED);
        return 0;
    }
    char what[32];
    snprintf(what, sizeof(what), "chunk %.12s", hex);
    if (kd_repo_keeps_floor(p->store, what, (int64_t)chunk->size) == 0 &&
        kestrel__store_put_chunk(p->store, hex, chunk->ptr ? chunk->ptr : "", chunk->size) == 0) {
        __atomic_add_fetch(&p->stored, 1, __ATOMIC_RELAXED);
        return 0;
    }
    err = kestrel__error_errno();   /* this thread's last error, as its message */
    if (__atomic_exchange_n(&p->store_failing, 1, __ATOMIC_ACQ_REL))
        return -1;   /* the other thread's failure is the one told */
    p->store_full = err == ENOSPC || err == EDQUOT || err == EFBIG;
    snprintf(p->store_error, sizeof(p->store_error), "%s", kestrel_error_last()->message);
    __atomic_store_n(&p->store_failed, 1, __ATOMIC_RELEASE);
    return -1;
}

/* The pack fails as its store did (a full disk: 507, else 500). That failure comes first in the
 * pack whatever the receiving thread found since: the helper is handed chunks only while nothing
 * has failed, and may store up to 15 behind the thread that goes on to check the next (which stores
 * some of them itself when the helper is that far behind: repo_runs.h). */
static void store_failure_heard(kd_pack *p)
{
    if (!__atomic_load_n(&p->store_failed, __ATOMIC_ACQUIRE))
        return;
    p->full = p->store_full;
    p->io = 1;
    p->too_big = p->busy = 0;
    snprintf(p->error, sizeof(p->error), "%s", p->store_error);
}

/* The chunk buffers a pack with a run takes (repo_runs.h): KD_RUN_BUFFERS where a user's quarter of
 * the budget holds a push's packs that deep (KD_RUN_DEEP_ROOM) beside the largest body decoded (5
 * times it, as main.c sizes the default budget, which does), else KD_RUN_BUFFERS_LEAST: a budget
 * given smaller keeps the room for that body, and for the packs it had before. A pack that finds
 * the user's other packs holding the room for KD_RUN_BUFFERS takes KD_RUN_BUFFERS_LEAST if those
 * fit (kd_pack_begin): the same user's pushes at once go on side by side as before, where each
 * 16 deep would leave the next one 503 (a hostile test: 4 pushes of 2 GiB at the threshold, one
 * failed after the client's 25 s of tries). */
static unsigned run_buffers(const kd_engine *e, const kd_upload_mem *mem)
{
    if (mem == NULL)   /* no budget */
        return KD_RUN_BUFFERS;
    return kd_upload_mem_total(mem) >= KD_RUN_DEEP_BUDGET(e->cfg ? kd_config_largest_body(e->cfg) : 0)
               ? KD_RUN_BUFFERS : KD_RUN_BUFFERS_LEAST;
}

kd_pack *kd_pack_begin(kd_engine *e, kd_upload_mem *mem, int64_t user, const char *run, const char *at,
                       const char *whole, int *busy)
{
    kd_pack *p = calloc(1, sizeof(*p));
    char *end = NULL;
    long long off = at ? strtoll(at, &end, 10) : -1;
    int with_run = run && end && end != at && *end == '\0' && off >= 0, rc;
    *busy = 0;
    kd_settle_stir(e->repo_settle);   /* the repository is busy: settles wait (repo_settle.h) */
    if (p == NULL)
        return NULL;
    p->store = e->store;
    p->mem = mem;
    p->user = user;
    p->nbufs = with_run ? run_buffers(e, mem) : 1;
    rc = room_for(p, KESTREL__CHUNK_MAX);   /* FastCDC's largest chunks, or not now (before any run) */
    if (rc < 0 && p->held == 0 && p->nbufs > KD_RUN_BUFFERS_LEAST) {
        p->nbufs = KD_RUN_BUFFERS_LEAST;   /* the user's other packs hold the room: as deep as that leaves */
        rc = room_for(p, KESTREL__CHUNK_MAX);
    }
    if (rc < 0) {
        *busy = p->held == 0;
        kd_pack_free(p);
        return NULL;
    }
    /* its chunks stored on the run's helper thread, off the receiving one, but where the helper is
     * a full ring behind (kd_run_feed_chunk, kd_run_feed_end) */
    if (with_run && (p->run = kd_run_feed_begin(e->repo_runs, user, run, off, p->nbufs,
                                                 !(whole && !strcmp(whole, "0")), store_chunk, p)) == NULL) {
        uint64_t each = p->held / p->nbufs;   /* no run after all (busy, not at `at`): one buffer */
        kd_upload_mem_give(p->mem, p->user, p->held - each);
        p->held = each;
        p->nbufs = 1;
    }
    return p;
}

/* An unnamed chunk's digest, kept for the answer (its memory from the budget, grown by doubling):
 * 0, or -1 (the pack failed: too many, the budget or memory spent). */
static int keep_name(kd_pack *p, const uint8_t md[32])
{
    int rc;
    if (p->named.size >= UNNAMED_MAX * 32) {
        pack_fail(p, "a pack sends at most 16384 chunks unnamed: send more packs");
        return -1;
    }
    if ((rc = kd_upload_mem_fit(p->mem, p->user, &p->named_mem, &p->named, p->named.size + 32, 1,
                                UNNAMED_MAX * 32 + 1)) != 0) {
        p->busy = rc == -1;
        p->io = rc != -1;
        pack_fail(p, p->busy ? "no memory for the digests of its unnamed chunks" : "out of memory");
        return -1;
    }
    memcpy(p->named.ptr + p->named.size, md, 32);
    p->named.size += 32;
    p->named.ptr[p->named.size] = '\0';   /* a kestrel_buf's rule */
    return 0;
}

/* The chunk in p->chunk is whole: verified against the digest it came with (or, sent unnamed,
 * named by its bytes), then stored unless the store has it: here, or with a run as it is fed to the
 * run (on its helper thread, or on this one when the helper is a full ring behind). */
static void chunk_done(kd_pack *p)
{
    char want[KESTREL__HEX_LEN + 1], got[KESTREL__HEX_LEN + 1];
    unsigned char md[EVP_MAX_MD_SIZE];   /* hashed once: bytes for an unnamed chunk's answer, hex to compare */
    unsigned int mdn = 0;
    int name_it = !memcmp(p->head, unnamed, sizeof(unnamed));
    store_failure_heard(p);   /* an earlier chunk of the run could not be stored: no more */
    if (p->error[0])
        goto out;
    kestrel__hex(p->head, 32, want);
    if (EVP_Digest(p->chunk.ptr ? p->chunk.ptr : "", p->chunk.size, md, &mdn, EVP_sha256(), NULL) != 1 || mdn != 32) {
        /* OpenSSL failed: not the client's fault */
        p->io = 1;
        pack_fail(p, "cannot hash a chunk (OpenSSL failed)");
        goto out;
    }
    kestrel__hex(md, 32, got);
    if (name_it) {
        memcpy(want, got, sizeof(want));
        if (keep_name(p, md) < 0)
            goto out;
        p->named_bytes += (int64_t)p->chunk.size;
    }
    if (strcmp(want, got)) {
        char msg[200];
        snprintf(msg, sizeof(msg), "chunk %.12s does not match its bytes (they hash to %.12s): nothing stored for it",
                 want, got);
        pack_fail(p, msg);
    } else if (p->run == NULL && store_chunk(p, want, &p->chunk, name_it) < 0)
        store_failure_heard(p);
    p->bytes += (int64_t)p->chunk.size;
    if (p->run && !p->error[0])   /* stored and hashed into the run (the buffer swapped): see repo_runs.h */
        kd_run_feed_chunk(p->run, want, &p->chunk, name_it);
out:
    p->chunk.size = 0;
    p->head_len = 0;
}

void kd_pack_feed(kd_pack *p, const char *data, size_t len)
{
    if ((p->received += len) > KD_MAX_PACK && !p->error[0]) {   /* found by a hostile test: a chunked */
        p->too_big = 1;                                           /* upload stored 1.1 GiB */
        pack_fail(p, "a pack is at most 1 GiB: send more packs");
    }
    while (len > 0 && !p->error[0]) {
        if (p->head_len < 36) {
            size_t take = 36 - p->head_len < len ? 36 - p->head_len : len;
            memcpy(p->head + p->head_len, data, take);
            p->head_len += take;
            data += take;
            len -= take;
            if (p->head_len == 36) {
                p->want = ((uint32_t)p->head[32] << 24) | ((uint32_t)p->head[33] << 16) | ((uint32_t)p->head[34] << 8) |
                          p->head[35];
                if (p->want > KESTREL__CHUNK_MAX * 4)
                    pack_fail(p, "a chunk in the pack is larger than 4 MiB");
                else if (room_for(p, p->want) < 0) {
                    p->busy = 1;
                    pack_fail(p, "no memory for its next chunk");
                } else if (p->want == 0)
                    chunk_done(p);
            }
            continue;
        }
        {
            size_t take = p->want - p->chunk.size < len ? p->want - p->chunk.size : len;
            if (kestrel__buf_put(&p->chunk, data, take) < 0) {
                pack_fail(p, "out of memory");
                return;
            }
            data += take;
            len -= take;
            if (p->chunk.size == p->want)
                chunk_done(p);
        }
    }
}

enum MHD_Result kd_pack_finish(kd_req *r, kd_pack *p)
{
    Kestrel__V1__PackResult res = KESTREL__V1__PACK_RESULT__INIT;
    enum MHD_Result reply;
    if (!p->error[0] && (p->head_len || p->chunk.size))
        pack_fail(p, "the pack ends in the middle of a chunk");
    kd_run_feed_end(p->run, !p->error[0]);   /* every chunk stored, or the store failed */
    p->run = NULL;
    store_failure_heard(p);
    if (p->error[0]) {
        if (p->io && !p->full)
            fprintf(stderr, "kestreld: %s %s: %s\n", r->method, r->path, p->error);
        reply = p->too_big ? kd_reply_error(r, 413, "too_large", p->error)
                : p->busy ? kd_reply_busy(r)
                : p->full ? kd_reply_error(r, 507, "insufficient_storage", p->error)
                : p->io ? kd_reply_error(r, 500, "internal", p->error)
                        : kd_reply_error(r, 400, "invalid_argument", p->error);
    } else {
        res.stored = p->stored;
        res.bytes = p->bytes;
        res.named.data = (uint8_t *)p->named.ptr;
        res.named.len = p->named.size;
        res.named_held = p->named_held;
        kd_metrics_repo_bytes(r->e->metrics, 1, (uint64_t)p->bytes);
        kd_metrics_repo_named(r->e->metrics, (uint64_t)p->named_bytes);
        reply = kd_reply_msg(r, 200, &res.base);
    }
    return reply;
}

void kd_pack_free(kd_pack *p)
{
    if (p) {
        kd_run_feed_end(p->run, 0);   /* a pack cut short: its run is dropped */
        kestrel_buf_dispose(&p->chunk);
        kestrel_buf_dispose(&p->named);
        kd_upload_mem_give(p->mem, p->user, p->named_mem);
        kd_upload_mem_give(p->mem, p->user, p->held);
        free(p);
    }
}

