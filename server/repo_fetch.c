/* server/repo_fetch.c - POST /api/v1/chunks/fetch: many stored chunks in one answer.
 *
 * A pull of a dataset of small files wants thousands of chunks of a few KiB. One GET each cost
 * kestreld about ten system calls and two TCP segments a chunk (headers, then the bytes), and a
 * synchronous read of each cold file in turn. Here one request names up to FETCH_MAX chunks
 * (a ChunkQuery) and the answer carries them all, in the order asked, each in the framing of a pack
 * (POST /api/v1/chunks/pack): 32 bytes of digest, its length in 4 bytes (big-endian), its bytes.
 *
 * Every chunk is looked up before the answer starts: one that is not stored is a 404 that names it,
 * and nothing is sent. The bytes are read as the answer goes out, AHEAD files opened ahead with
 * their reads started (POSIX_FADV_WILLNEED), so the disk serves many at once; the answer is never
 * in memory whole. A chunk removed meanwhile (its version deleted and collected) gets, for a client
 * that asks (?gone=1), a head whose length is KESTREL__CHUNK_GONE, and the answer ends there: the
 * client says "not found", as a pull from a file:// store does (it was a transfer cut short, a
 * network error: a review). For an older client, and a chunk that cannot be opened for another
 * reason or is cut short as it is read, the answer ends early; the bytes the client has are
 * verified one chunk at a time.
 *
 * An answer holds at most AHEAD descriptors while it goes out (a GET holds one), and only then; all
 * answers together hold at most a quarter of the process's beyond the chunk each is sending.
 *
 * Who may: whoever may GET /api/v1/chunks/{sha256}, every authenticated caller (a read-scoped
 * token too: route.c), since a chunk is named by its content. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include "api.h"
#include "chunk.h"
#include "store.h"

#define FETCH_MAX 4096          /* chunks a request may name */
#define AHEAD 8                 /* chunk files open ahead of the one being sent */
#define BLOCK (256u * 1024)     /* what libmicrohttpd asks of the reader at once */

typedef struct {
    kestrel__store *store;
    size_t n, i;                /* the chunks; the one being sent */
    char (*hex)[KESTREL__HEX_LEN + 1];
    uint32_t *size;
    size_t at;                  /* bytes of chunk i sent, its 36 bytes of head included */
    uint8_t head[36];           /* chunk i's head, made when it starts */
    int gone;                   /* chunk i is no longer stored: its head says so, and the answer ends */
    int say_gone;               /* the client asked for that head (?gone=1; an older one would read it as damage) */
    int enoent[AHEAD];          /* chunk k's open failed for its absence, beside fd[k % AHEAD] */
    size_t opened;              /* chunks [0, opened) were opened (ahead) */
    int fd[AHEAD];              /* chunk k's in fd[k % AHEAD] while k is in [i, opened); -1: could not */
} fetch_answer;

/* Chunk files open in all answers, and how many may be beyond the one each answer is sending: a
 * quarter of the descriptors (found by a hostile test: 2,400 unread answers held 8 files each ahead
 * and kestreld ran out, refusing every connection). */
static long files_open;

static long files_budget(void)
{
    static long budget;
    struct rlimit rl;
    if (__atomic_load_n(&budget, __ATOMIC_RELAXED) == 0) {
        long b = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)(rl.rlim_cur / 4) : 4096;
        __atomic_store_n(&budget, b < 16 ? 16 : b, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&budget, __ATOMIC_RELAXED);
}

int kd_answer_file_take(void)
{
    if (__atomic_add_fetch(&files_open, 1, __ATOMIC_RELAXED) > files_budget()) {
        __atomic_sub_fetch(&files_open, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return 0;
}

void kd_answer_file_give(void)
{
    __atomic_sub_fetch(&files_open, 1, __ATOMIC_RELAXED);
}

static void file_close(int fd)
{
    close(fd);
    kd_answer_file_give();
}

/* Open the chunks from i on, up to AHEAD of them, and start their reads (an empty one is not
 * opened: it has nothing to read); beyond chunk i only while the budget allows. */
static void open_ahead(fetch_answer *a)
{
    if (a->opened < a->i)
        a->opened = a->i;   /* empty chunks were sent past it */
    while (a->opened < a->n && a->opened < a->i + AHEAD) {
        char path[4200];
        int fd = -1;
        if (a->opened > a->i && a->size[a->opened] > 0 &&
            __atomic_load_n(&files_open, __ATOMIC_RELAXED) >= files_budget())
            break;   /* opened when its turn comes */
        kestrel__store_chunk_path(a->store, a->hex[a->opened], path, sizeof(path));
        if (a->size[a->opened] > 0 && (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
            __atomic_add_fetch(&files_open, 1, __ATOMIC_RELAXED);
            (void)posix_fadvise(fd, 0, a->size[a->opened], POSIX_FADV_WILLNEED);
        }
        a->enoent[a->opened % AHEAD] = fd < 0 && errno == ENOENT;
        a->fd[a->opened % AHEAD] = fd;
        a->opened++;
    }
}

static ssize_t answer_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    fetch_answer *a = cls;
    size_t out = 0;
    (void)pos;   /* libmicrohttpd reads the answer once, front to back */
    while (out < max && a->i < a->n) {
        size_t k = a->i, take;
        int fd;
        if (a->at < 36) {
            size_t len = 0;
            if (a->at == 0 && !OPENSSL_hexstr2buf_ex(a->head, 32, &len, a->hex[k], '\0'))
                return out ? (ssize_t)out : MHD_CONTENT_READER_END_WITH_ERROR;   /* cannot be: checked hex */
            if (a->at == 0) {
                uint32_t said = a->size[k];
                if (said > 0) {   /* opened before its head goes: a chunk collected since the lookup is gone */
                    open_ahead(a);
                    /* only for its absence: out of descriptors, or unreadable, it is cut as before */
                    if ((a->gone = a->say_gone && a->fd[k % AHEAD] < 0 && a->enoent[k % AHEAD]))
                        said = KESTREL__CHUNK_GONE;
                }
                a->head[32] = (uint8_t)(said >> 24);
                a->head[33] = (uint8_t)(said >> 16);
                a->head[34] = (uint8_t)(said >> 8);
                a->head[35] = (uint8_t)said;
            }
            take = 36 - a->at < max - out ? 36 - a->at : max - out;
            memcpy(buf + out, a->head + a->at, take);
            out += take;
            a->at += take;
            if (a->gone)   /* its head, then the end */
                return a->at < 36 || out ? (ssize_t)out : MHD_CONTENT_READER_END_WITH_ERROR;
        } else {
            ssize_t r;
            open_ahead(a);
            if ((fd = a->fd[k % AHEAD]) < 0)   /* collected since the lookup: what is read goes first */
                return out ? (ssize_t)out : MHD_CONTENT_READER_END_WITH_ERROR;
            take = a->size[k] - (a->at - 36) < max - out ? a->size[k] - (a->at - 36) : max - out;
            do
                r = take ? pread(fd, buf + out, take, (off_t)(a->at - 36)) : 0;
            while (r < 0 && errno == EINTR);
            if (r < 0 || (r == 0 && take))   /* unreadable, or cut short since */
                return out ? (ssize_t)out : MHD_CONTENT_READER_END_WITH_ERROR;
            out += (size_t)r;
            a->at += (size_t)r;
        }
        if (a->at == 36 + (size_t)a->size[k]) {
            if (k < a->opened && a->fd[k % AHEAD] >= 0)   /* k's slot is its own only while k < opened */
                file_close(a->fd[k % AHEAD]);
            if (k < a->opened)
                a->fd[k % AHEAD] = -1;
            a->i++;
            a->at = 0;
        }
    }
    return out ? (ssize_t)out : MHD_CONTENT_READER_END_OF_STREAM;
}

static void answer_free(void *cls)
{
    fetch_answer *a = cls;
    for (size_t k = a->i; k < a->opened; k++)
        if (a->fd[k % AHEAD] >= 0)
            file_close(a->fd[k % AHEAD]);
    free(a->hex);
    free(a->size);
    free(a);
}

enum MHD_Result kd_repo_fetch(kd_req *r)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__ChunkQuery *q = (Kestrel__V1__ChunkQuery *)kd_body(r, &kestrel__v1__chunk_query__descriptor, &reply);
    struct MHD_Response *resp;
    fetch_answer *a;
    uint64_t total = 0, bytes, cost;
    char msg[300];
    if (q == NULL)
        return reply;
    if (q->n_digests == 0 || q->n_digests > FETCH_MAX) {
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return kd_reply_error(r, 400, "invalid_argument", "field 'digests': 1 to 4096 chunks per fetch");
    }
    /* the answer's memory (libmicrohttpd's block, its list) is held until it is read, however slowly:
     * from the budget of request bodies (a hostile test: 4,000 answers never read held 1.1 GB);
     * refused, the client takes the chunks one GET each (sendfile, no block) */
    cost = BLOCK + q->n_digests * (KESTREL__HEX_LEN + 1 + sizeof(uint32_t)) + sizeof(*a);
    if (kd_answer_hold(r, cost) < 0) {
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return kd_reply_busy(r);
    }
    if ((a = calloc(1, sizeof(*a))) == NULL || (a->hex = calloc(q->n_digests, sizeof(*a->hex))) == NULL ||
        (a->size = calloc(q->n_digests, sizeof(*a->size))) == NULL) {
        protobuf_c_message_free_unpacked(&q->base, NULL);
        if (a)
            answer_free(a);
        return kd_reply_error(r, 500, "internal", "out of memory");
    }
    a->store = r->e->store;
    a->n = q->n_digests;
    a->say_gone = kd_query(r, "gone") && !strcmp(kd_query(r, "gone"), "1");
    for (size_t k = 0; k < a->n; k++) {
        char path[4200];
        struct stat st;
        int found;
        if (!kestrel__is_sha256_hex(q->digests[k])) {
            protobuf_c_message_free_unpacked(&q->base, NULL);
            answer_free(a);
            return kd_reply_error(r, 400, "invalid_argument", "field 'digests': 64 lowercase hex digits each");
        }
        memcpy(a->hex[k], q->digests[k], KESTREL__HEX_LEN + 1);
        kestrel__store_chunk_path(a->store, a->hex[k], path, sizeof(path));
        found = stat(path, &st) == 0 && S_ISREG(st.st_mode);
        if (found && st.st_size > 4 * (off_t)KESTREL__CHUNK_MAX) {   /* no chunk is that large: put aside */
            if (kestrel__store_check_chunk(a->store, a->hex[k]) == 1)
                fprintf(stderr, "kestreld: chunk %.12s is over 4 MiB on disk, damaged: quarantined\n", a->hex[k]);
            found = 0;
        }
        if (!found) {
            snprintf(msg, sizeof(msg), "no such chunk: %.12s is not stored (quarantined, or its versions deleted and "
                     "collected): a push of a file that holds it stores it again", a->hex[k]);
            protobuf_c_message_free_unpacked(&q->base, NULL);
            answer_free(a);
            return kd_reply_error(r, 404, "not_found", msg);
        }
        a->size[k] = (uint32_t)st.st_size;
        total += 36 + (uint64_t)st.st_size;
    }
    protobuf_c_message_free_unpacked(&q->base, NULL);
    bytes = total - 36 * (uint64_t)a->n;
    if ((resp = MHD_create_response_from_callback(total, BLOCK, answer_read, a, answer_free)) == NULL) {
        answer_free(a);
        return MHD_NO;
    }
    return kd_reply_chunks(r, resp, bytes);
}
