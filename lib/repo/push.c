/* lib/repo/push.c - the one push, over any transport: list the files (one, or a directory's), cut
 * each into content-defined chunks and hash them (or take both from the stat cache), and hand them
 * batch by batch to the sender thread (push_sender.c), which asks the repository which it lacks and
 * sends those while the hashing goes on (a big new file's later chunks go unnamed, for kestreld to
 * name); then commit the manifest. The repository checks what it receives; nothing is visible
 * before the commit. */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "chunk.h"
#include "chunk_spool.h"
#include "file_open.h"
#include "filehash.h"
#include "push_digests.h"
#include "push_cache.h"
#include "push_sender.h"
#include "store.h"
#include "transfer.h"
#include "transport.h"

#define READ_BUF (8u * 1024 * 1024)
/* Read-ahead for many small files: the disk serves many reads at once, but one reader waits for
 * each in turn. So the files after the one being hashed are opened early and their reads started
 * (POSIX_FADV_WILLNEED), up to AHEAD_FILES files and about AHEAD_BYTES bytes ahead (of a larger
 * file, its first AHEAD_FILE_MAX bytes: its own reads are sequential then). Files the stat cache
 * vouches for are opened ahead but not read; empty ones not either. */
#define AHEAD_FILES 64
#define AHEAD_BYTES (16 * 1024 * 1024)
#define AHEAD_FILE_MAX (1024 * 1024)
#define BATCH_BYTES KESTREL__PUSH_BATCH_BYTES
#define FIRST_BATCH_BYTES (8u * 1024 * 1024)   /* the first time: the repository starts checking sooner */
#define BATCH_CHUNKS KESTREL__PUSH_BATCH_CHUNKS




typedef struct {
    kestrel__progress *pr;
    kestrel__sender *out;
    size_t handed;              /* refs [0, handed) are the sender's */
    int64_t read;               /* bytes read from the files since the last hand-over (not vouched for) */
    kestrel__pushcache *cache;  /* NULL: none */
    kestrel__chunk_ref *refs;   /* the chunks not yet handed to the sender, and the current file's */
    size_t n, cap;
    size_t dropped;             /* chunks before refs[0]: handed over, and in the manifest (refs_drop) */
    uint8_t *buf;               /* READ_BUF, reused file after file */
    int hash_whole;             /* hash each whole file too (else its digest is left to the repository) */
    uint32_t unnamed;           /* the current file's chunks sent unnamed so far */
    int named_here;             /* the last file read had chunks the repository named (not hashed here) */
    int64_t done;               /* bytes of the files before the current one */
} push_state;

static int handover(push_state *ps, int final);

/* The end of a file with chunks sent unnamed: hand the rest over, and take their digests from
 * kestreld's answers (refs[first..]): the stat cache and the manifest take them. */
static int take_names(push_state *ps, size_t first)
{
    int rc = handover(ps, 1);
    return rc < 0 ? rc : kestrel__sender_names(ps->out, ps->refs + first, ps->n - first, ps->unnamed, ps->pr);
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Top the read buffer up to READ_BUF bytes (fewer at the end of the file: *eof). */
static int fill(int fd, uint8_t *buf, size_t *have, int *eof, const char *path)
{
    while (!*eof && *have < READ_BUF) {
        ssize_t r = read(fd, buf + *have, READ_BUF - *have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", path);
        *eof |= r == 0;
        *have += (size_t)r;
    }
    return 0;
}

/* Chunk and hash the open file fd: its chunks appended to ps->refs (file index file), its SHA-256.
 * The file is read once: with file:// (hash_whole), each buffer's chunks are hashed on this thread
 * while a helper advances the whole-file SHA-256 over the same bytes (a file of one chunk: that
 * chunk's digest); with kestreld, the buffer's chunks are split between this thread and a helper
 * (kestrel__hash_chunks). When the
 * repository computes whole-file digests itself (kestreld), a file of several chunks gets "". Past
 * the probe of a big new file, chunks go unnamed (KESTREL__PUSH_UNNAMED_MIN): not hashed here, their digests
 * taken from kestreld's answers at the file's end, once every one is sent (so the caller's check that
 * the file did not change covers the sending too). */
static int chunk_fd(push_state *ps, int fd, const char *path, uint32_t file, const struct stat *st, char sha[65])
{
    int64_t size = (int64_t)st->st_size;
    EVP_MD_CTX *whole = NULL;
    size_t have = 0, first_ref = ps->n;
    int64_t offset = 0, fed = 0;   /* fed: the bytes the whole-file hash has had */
    int eof = 0, rc = 0, probed = 0, candidate = !ps->hash_whole && size >= KESTREL__PUSH_UNNAMED_MIN;
    int64_t found = kestrel__sender_file_begin(ps->out, file, st);
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
        size_t off = 0, first = ps->n, wlen = 0;
        int64_t buf_at = offset;   /* the file offset of buf[0] */
        const uint8_t *wp = NULL;
        if ((rc = fill(fd, ps->buf, &have, &eof, path)) < 0)
            break;
        while (off < have && (eof || have - off >= KESTREL__CHUNK_MAX)) {
            size_t cut = kestrel__chunk_next(ps->buf + off, have - off, eof);
            kestrel__chunk_ref *r;
            if ((rc = kestrel__array_grow(&ps->refs, &ps->cap, ps->n + 1, sizeof(*ps->refs))) < 0)
                break;
            r = &ps->refs[ps->n++];
            r->offset = offset;
            r->len = (uint32_t)cut;
            ps->read += (int64_t)cut;
            r->file = file;
            r->missing = 0;
            r->unnamed = 0;
            off += cut;
            offset += (int64_t)cut;
        }
        if (rc < 0)
            break;
        if (candidate && kestrel__sender_unnamed_now(ps->out, file, found)) {   /* kestreld hashes them: not here */
            if ((rc = kestrel__sender_unnamed_room(ps->out, ps->unnamed + (ps->n - first))) < 0)
                break;
            for (size_t i = first; i < ps->n; i++) {
                ps->refs[i].unnamed = 1;
                ps->refs[i].seq = ps->unnamed++;
                ps->refs[i].hex[0] = '\0';
            }
        } else if (ps->hash_whole && !(eof && buf_at == 0 && ps->n - first_ref == 1)) {   /* more than one chunk */
            if (whole == NULL && ((whole = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(whole, EVP_sha256(), NULL) != 1)) {
                rc = kestrel__error_oom();
                break;
            }
            wp = ps->buf + (fed - buf_at);
            wlen = (size_t)(buf_at + (int64_t)have - fed);
            fed += (int64_t)wlen;
        }
        if ((first == ps->n || !ps->refs[first].unnamed) &&
            (rc = kestrel__hash_chunks(ps->buf, buf_at, ps->refs + first, ps->n - first, whole, wp, wlen)) < 0)
            break;
        ps->pr->p.bytes_done = ps->done + offset;
        ps->pr->p.chunks_done = (int64_t)(ps->dropped + ps->n);
        /* a big file's first PROBE_BYTES go to the sender at once: its answer says whether it is new */
        if ((rc = handover(ps, candidate && !probed && offset >= KESTREL__PUSH_PROBE_BYTES)) < 0 ||
            (rc = kestrel__progress_report(ps->pr, 0)) < 0)
            break;
        probed |= offset >= KESTREL__PUSH_PROBE_BYTES;
        memmove(ps->buf, ps->buf + off, have - off);
        have -= off;
        if (eof && have == 0)
            break;
    }
    if (rc == 0 && offset != size)
        rc = kestrel__error_set(KESTREL_EIO, "%s changed while it was pushed (%lld bytes, then %lld)", path,
                                (long long)size, (long long)offset);
    ps->named_here = ps->unnamed > 0;
    if (ps->unnamed) {   /* its chunks sent unnamed: sent now, named by kestreld (every one, or a failure) */
        int r = rc < 0 ? rc : take_names(ps, first_ref);
        rc = rc < 0 ? rc : r;
        ps->unnamed = 0;
    }
    if (rc == 0 && whole == NULL) {
        if (ps->n - first_ref == 1)
            memcpy(sha, ps->refs[first_ref].hex, 65);
        else if (ps->n == first_ref)
            kestrel__sha256_hex("", 0, sha);   /* an empty file */
        else
            sha[0] = '\0';   /* left to the repository */
    }
    else if (rc == 0) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(whole, md, &n) != 1)
            rc = kestrel__error_oom();
        if (rc == 0)
            kestrel__hex(md, 32, sha);
    }
    EVP_MD_CTX_free(whole);
    return rc;
}

/* A file written to while it was read (same size): its chunks may be neither its old bytes nor its
 * new ones, each of them true to its digest, so no check downstream would see it (tar's "file changed
 * as we read it"). Every write moves the ctime, and so does a touch that puts the mtime back. A link
 * made or removed moves it too and changes no byte (the pull cache links the files a pull left; a
 * save renamed over the file unlinks the one read): with the link count moved and the mtime not, the
 * bytes read are taken as one version. Not for a file with chunks sent unnamed (strict): those were
 * read twice, cut from the first read and sent from the second, and a write between them with the
 * mtime put back and a link made would pass (a hostile test made such a version of neither state).
 * A write in the same clock tick as the one before the open is not seen (timestamps are coarse). */
static int unchanged_since(int fd, const struct stat *st, const char *path, int strict)
{
    struct stat now;
    if (fstat(fd, &now) < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot stat %s", path);
    if (now.st_size != st->st_size || now.st_mtim.tv_sec != st->st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
        ((now.st_nlink == st->st_nlink || strict) &&
         (now.st_ctim.tv_sec != st->st_ctim.tv_sec || now.st_ctim.tv_nsec != st->st_ctim.tv_nsec)))
        return kestrel__error_set(KESTREL_EIO, "%s changed while it was pushed (written to as it was read): "
                                  "push it again once it is complete", path);
    return 0;
}

/* One file of the push: from the stat cache when it is unchanged since an earlier push read it,
 * else read and hashed. fd: the file opened ahead (closed here), or -1; rel: its path in the pushed
 * directory ("" for a pushed file); chunks: how many it has. */
static int chunk_one(push_state *ps, int fd, const char *path, const char *rel, uint32_t file, int64_t want_size,
                     char sha[65], int64_t *chunks)
{
    kestrel__chunk_ref *cached = NULL;
    size_t k = 0, before = ps->n;
    struct stat st;
    int64_t started;
    int rc = 0;
    fd = kestrel__file_open_regular(fd, path, rel[0] != '\0', &st);
    if (fd < 0)
        return fd;
    if (want_size >= 0 && (int64_t)st.st_size != want_size) {
        close(fd);
        return kestrel__error_set(KESTREL_EIO, "%s changed while it was pushed", path);
    }
    if (kestrel__pushcache_lookup(ps->cache, rel, &st, &cached, &k, sha)) {
        /* its chunks and digest hold (the repository still checks every chunk it receives) */
        if ((rc = kestrel__array_grow(&ps->refs, &ps->cap, ps->n + k + 1, sizeof(*ps->refs))) == 0) {
            for (size_t i = 0; i < k; i++)
                cached[i].file = file;
            memcpy(ps->refs + ps->n, cached, k * sizeof(*cached));
            ps->n += k;
        }
        free(cached);
        close(fd);
        *chunks = (int64_t)k;
        ps->pr->p.bytes_done = ps->done + (int64_t)st.st_size;
        ps->pr->p.chunks_done = (int64_t)(ps->dropped + ps->n);
        if (rc == 0)
            rc = handover(ps, 0);
        return rc < 0 ? rc : kestrel__progress_report(ps->pr, 0);
    }
    started = now_ns() - 1000000000;   /* timestamps are coarse */
    rc = chunk_fd(ps, fd, path, file, &st, sha);
    if (rc == 0)
        rc = unchanged_since(fd, &st, path, ps->named_here);
    close(fd);
    if (rc < 0)
        return rc;
    *chunks = (int64_t)(ps->n - before);
    kestrel__pushcache_remember(ps->cache, rel, &st, started, ps->refs + before, ps->n - before, sha,
                                ps->named_here ? ps->out->t->where : NULL);
    return 0;
}

/* The files opened ahead of the one being hashed: file i's descriptor in fd[i % AHEAD_FILES]. */
typedef struct {
    int fd[AHEAD_FILES];        /* -1: not opened (the hasher opens it, and says why it cannot) */
    int64_t started[AHEAD_FILES];   /* the bytes whose read it started */
    size_t next;                /* the first file not opened ahead yet */
    int64_t bytes;              /* started and not yet hashed */
    size_t window;              /* files opened ahead at most (0: none) */
} ahead;

/* Nothing opened; a window of AHEAD_FILES, less where the process may open few descriptors (a
 * sixteenth of them at most: the senders, the connections and the caller's own need the rest). */
static void ahead_init(ahead *a)
{
    struct rlimit lim;
    memset(a, 0, sizeof(*a));
    for (size_t i = 0; i < AHEAD_FILES; i++)
        a->fd[i] = -1;
    a->window = AHEAD_FILES;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur / 16 < AHEAD_FILES)
        a->window = (size_t)(lim.rlim_cur / 16);
}

/* Close every descriptor opened ahead (the hasher opens those files itself). */
static void ahead_close(ahead *a)
{
    for (size_t i = 0; i < AHEAD_FILES; i++) {
        if (a->fd[i] >= 0)
            close(a->fd[i]);
        a->fd[i] = -1;
        a->started[i] = 0;
    }
    a->bytes = 0;
}

/* Open the files after file cur ahead (file cur taken already), and start the reads of those the
 * stat cache does not hold. Out of descriptors, it gives back all it holds and stops for the rest of
 * the push: the hasher opens each file itself. */
static void ahead_fill(ahead *a, push_state *ps, size_t cur, const kestrel__push_files *files)
{
    const kestrel__listing *l = files->list;
    size_t n = l->n;
    if (a->next <= cur)
        a->next = cur + 1;
    while (a->next < n && a->next - cur <= a->window && a->bytes < AHEAD_BYTES) {
        size_t i = a->next, slot = i % AHEAD_FILES;
        int64_t size = l->f[i].size, len = size < AHEAD_FILE_MAX ? size : AHEAD_FILE_MAX;
        struct stat st;
        char path[KESTREL__PUSH_PATH_MAX];
        int fd = kestrel__file_open(kestrel__push_file_path(files, (uint32_t)i, path), 1, &st);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            ahead_close(a);
            a->window = 0;
            break;
        }
        a->next++;
        a->fd[slot] = fd;
        a->started[slot] = 0;
        if (fd < 0 || len == 0 || !S_ISREG(st.st_mode) ||
            kestrel__pushcache_holds(ps->cache, kestrel__listed_path(l, i), &st))
            continue;
        if (posix_fadvise(fd, 0, (off_t)len, POSIX_FADV_WILLNEED) == 0) {
            a->started[slot] = len;
            a->bytes += len;
        }
    }
}

/* File i's descriptor opened ahead (-1: none), no longer the read-ahead's. */
static int ahead_take(ahead *a, size_t i)
{
    size_t slot = i % AHEAD_FILES;
    int fd;
    if (i >= a->next)
        return -1;
    fd = a->fd[slot];
    a->fd[slot] = -1;
    a->bytes -= a->started[slot];
    a->started[slot] = 0;
    return fd;
}

/* Between files: the chunks handed to the sender (its copy) are in the manifest already, so they
 * go, once they are a batch or all there is; refs then holds about a batch, whatever the count of
 * files (a file's own chunks stay until it is done: the stat cache and the manifest take them). */
static void refs_drop(push_state *ps)
{
    size_t k = ps->handed;
    if (k == 0 || (k < ps->n && k < BATCH_CHUNKS))
        return;
    memmove(ps->refs, ps->refs + k, (ps->n - k) * sizeof(*ps->refs));
    ps->n -= k;
    ps->handed = 0;
    ps->dropped += k;
}

/* Hand the chunks hashed since the last hand-over to the sender once they make a batch (final:
 * whatever is left); report progress, and the sender's failure if it had one. A batch is counted in
 * bytes read, or in chunks: what the stat cache vouched for was not read and waits for the chunk
 * count, so an unchanged re-push is asked about in as few questions as the chunks allow, however its
 * pace and the sender's meet (counted in bytes, it was one a 64 MiB and whenever the sender was idle:
 * 2 to 5 questions for 64 files of 8 MiB, by the machine's load, where one holds them all). */
static int handover(push_state *ps, int final)
{
    kestrel__sender *s = ps->out;
    int rc;
    kestrel__sender_progress(s, ps->pr);
    if ((rc = kestrel__sender_failed(s)) < 0)
        return rc;
    if (ps->n == ps->handed ||
        (!final && ps->read < (int64_t)(ps->dropped + ps->handed ? BATCH_BYTES : FIRST_BATCH_BYTES) &&
         ps->n - ps->handed < BATCH_CHUNKS))
        return 0;
    if ((rc = kestrel__sender_put(s, ps->refs + ps->handed, ps->n - ps->handed, ps->read, ps->pr)) < 0)
        return rc;
    ps->handed = ps->n;
    ps->read = 0;
    return 0;
}

/* A commit refused because chunks it names are not stored: a collection with a grace shorter than
 * the push removed them after they were sent or found there (lib/repo/store_gc.c). Ask which of the
 * manifest's chunks (its chunk list, read again) the repository lacks, BATCH_CHUNKS at a time, and
 * send those again from the files (each still checked against its digest); *lost: how many it lacked. */
static int resend_lost(kestrel__transport *t, kestrel__spool *lists, const kestrel__push_files *files,
                       kestrel__progress *pr, size_t *lost)
{
    kestrel__chunk_ref *refs = malloc(BATCH_CHUNKS * sizeof(*refs));
    Kestrel__V1__TreeFile *f;
    uint32_t file = 0;   /* the file whose lists come next: its record follows them */
    int64_t off = 0;
    int rc, more = 1;
    *lost = 0;
    if (refs == NULL)
        return kestrel__error_oom();
    rc = kestrel__spool_rewind(lists);
    while (rc == 0 && more) {
        size_t n = 0, sent = 0;
        while (n < BATCH_CHUNKS && rc == 0) {
            if ((rc = kestrel__spool_next(lists, refs[n].hex, &refs[n].len, &f)) <= 0) {
                more = 0;
                break;
            }
            if (rc == 2) {   /* the end of a file's chunks */
                if (files->list == NULL || file >= files->list->n ||
                    strcmp(f->path, kestrel__listed_path(files->list, file)))
                    rc = kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
                protobuf_c_message_free_unpacked(&f->base, NULL);
                file++;
                off = 0;
                rc = rc < 0 ? rc : 0;
                continue;
            }
            if (files->list && file >= files->list->n) {   /* a chunk after the last file */
                rc = kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
                break;
            }
            rc = 0;
            refs[n].offset = off;
            refs[n].file = file;
            refs[n].missing = 0;
            refs[n].unnamed = 0;
            off += refs[n].len;
            n++;
        }
        if (rc == 0 && n > 0 && (rc = kestrel__send_missing(t, refs, n, files, pr, &sent, NULL)) == 0)
            *lost += sent;
    }
    free(refs);
    return rc;
}

/* File i of the push: chunked and hashed (or taken from the stat cache), its chunks handed to the
 * sender and spooled, then, of a directory, its record (path, size, mode, chunk count, digest), which
 * also advances the listing's digest while every file's digest is known (*listing_digest: freed and
 * NULL once one is not, the listing's digest then left to the repository). sha: the file's digest. */
static int push_file(push_state *ps, ahead *ra, const kestrel__push_files *files, kestrel__spool *lists, size_t i,
                     EVP_MD_CTX **listing_digest, char sha[65])
{
    Kestrel__V1__TreeFile f = KESTREL__V1__TREE_FILE__INIT;
    const kestrel__listing *list = files->list;
    char fpath[KESTREL__PUSH_PATH_MAX];
    int64_t nchunks = 0;
    size_t first = ps->n;
    int fd = ahead_take(ra, i), rc;
    if (list) {
        f.path = (char *)kestrel__listed_path(list, i);
        f.size = list->f[i].size;
        f.mode = list->f[i].mode;
        ahead_fill(ra, ps, i, files);
    }
    if ((rc = chunk_one(ps, fd, kestrel__push_file_path(files, (uint32_t)i, fpath), list ? f.path : "",
                        (uint32_t)i, list ? f.size : -1, sha, &nchunks)) < 0 ||
        (rc = kestrel__spool_add(lists, ps->refs + first, ps->n - first)) < 0)
        return rc;
    refs_drop(ps);
    if (list == NULL)
        return 0;
    f.chunks = nchunks;   /* its record, after its chunks */
    /* a file of one chunk: its digest is its chunk's, in the manifest already, which the repository
     * (or digests_here) fills in: 200,000 small files do not hold it twice */
    if (nchunks != 1 && sha[0])
        f.sha256 = sha;
    if (!f.sha256[0] && *listing_digest) {   /* the listing's digest is then the repository's */
        EVP_MD_CTX_free(*listing_digest);
        *listing_digest = NULL;
    }
    if (*listing_digest)
        kestrel__manifest_tree_digest_file(*listing_digest, &f);
    rc = kestrel__spool_add_file(lists, &f);
    ps->done += f.size;
    return rc;
}

/* Commit m, whose lists are in the spool: once more, when chunks were lost ("... is not stored":
 * kestreld, file://, and kestreld before it named the collection), after sending those again; any
 * other refusal is said as it came. A stop is seen while the commit (and a resend) waits, too. */
static int commit_version(kestrel__transport *t, Kestrel__V1__Manifest *m, kestrel__spool *lists,
                          const kestrel__push_files *files, kestrel__progress *pr, int64_t *version)
{
    int rc;
    t->tick = pr;
    if ((rc = t->ops->commit(t, m, lists, version)) == KESTREL_EINVALID && strstr(kestrel_error_last()->message,
                                                                           "is not stored")) {
        kestrel__error_kept why;
        size_t lost = 0;
        kestrel__error_keep(&why);
        if ((rc = resend_lost(t, lists, files, pr, &lost)) == 0)
            rc = lost ? t->ops->commit(t, m, lists, version) : kestrel__error_restore(&why);
    }
    t->tick = NULL;
    return rc;
}

int kestrel__push(kestrel__transport *t, const char *name, const char *path, char *const *select, size_t nselect,
                  const kestrel_transfer_options *o, kestrel__progress *pr, int64_t *version)
{
    push_state ps;
    kestrel__sender out;
    ahead ra;
    Kestrel__V1__Manifest *m = kestrel__manifest_new();
    kestrel__spool *lists = NULL;   /* m's chunks and files, on disk until the commit sends them */
    kestrel__listing list;           /* a directory's files: paths, sizes, modes */
    kestrel__push_files files = { NULL, NULL };
    EVP_MD_CTX *listing_digest = NULL;   /* of a directory's files, while each one's digest is known */
    char root[PATH_MAX], sha[65] = "";
    size_t nfiles = 0;
    struct stat st;
    int rc = 0;
    memset(&list, 0, sizeof(list));
    memset(&ps, 0, sizeof(ps));
    ahead_init(&ra);
    ps.pr = pr;
    ps.hash_whole = t->hash_whole;
    if (m == NULL || (ps.buf = malloc(READ_BUF)) == NULL) {
        rc = kestrel__error_oom();
        goto done;
    }
    if ((rc = kestrel__spool_open(&lists)) < 0)
        goto done;
    if (stat(path, &st) < 0) {
        rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", path);
        goto done;
    }
    if (realpath(path, root) == NULL) {   /* its files are opened by this path, refusing links in it */
        rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot resolve %s", path);
        goto done;
    }
    ps.cache = kestrel__pushcache_open(root, t->where);
    if (S_ISDIR(st.st_mode)) {
        if ((rc = kestrel__tree_list(path, select, nselect, &list)) < 0)
            goto done;
        nfiles = list.n;
        pr->p.bytes_total = 0;
        for (size_t i = 0; i < list.n; i++)
            pr->p.bytes_total += list.f[i].size;
        if ((listing_digest = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(listing_digest, EVP_sha256(), NULL) != 1) {
            rc = kestrel__error_oom();
            goto done;
        }
    } else {
        nfiles = 1;
        pr->p.bytes_total = (int64_t)st.st_size;
    }
    /* every file by the resolved path of the pushed file or directory: every later open refuses a
     * link in it (file_open.h) */
    files = (kestrel__push_files){ root, S_ISDIR(st.st_mode) ? &list : NULL };
    if ((rc = kestrel__sender_start(&out, t, &files)) < 0)
        goto done;
    ps.out = &out;
    for (size_t i = 0; i < nfiles && rc == 0; i++)
        rc = push_file(&ps, &ra, &files, lists, i, &listing_digest, sha);
    if (rc == 0)
        rc = handover(&ps, 1);
    {
        int r = kestrel__sender_finish(&out, rc < 0, pr);   /* everything sent, or the first failure */
        rc = rc < 0 ? rc : r;
    }
    pr->p.bytes_new = out.pr.p.bytes_new;
    pr->p.chunks_new = out.pr.p.chunks_new;
    if (rc < 0)
        goto done;
    if (files.list) {   /* the listing's digest, when every file's is known (else the repository's) */
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdn = 0;
        sha[0] = '\0';
        if (listing_digest && EVP_DigestFinal_ex(listing_digest, md, &mdn) == 1)
            kestrel__hex(md, 32, sha);
    }
    if (!t->fills_digests && (rc = kestrel__push_digests_here(&lists, &files, pr->p.bytes_total, sha)) < 0)
        goto done;
    m->size = pr->p.bytes_total;
    if ((m->name = kestrel__strdup(name)) == NULL || (m->sha256 = kestrel__strdup(sha)) == NULL ||
        (m->metadata_json = kestrel__strdup(o->metadata_json ? o->metadata_json : "")) == NULL ||
        (m->alias = kestrel__strdup(o->alias ? o->alias : "")) == NULL) {
        rc = rc < 0 ? rc : kestrel__error_oom();
        goto done;
    }
    m->created_ms = kestrel__now_ms();
    free(ps.refs);   /* the spool holds the chunks now: what only the hashing needed goes before the commit */
    free(ps.buf);
    ps.refs = NULL;
    ps.buf = NULL;
    if ((rc = commit_version(t, m, lists, &files, pr, version)) < 0)
        goto done;
    pr->p.bytes_done = pr->p.bytes_total;
    (void)kestrel__progress_report(pr, 1);   /* the version exists: too late to cancel (repo.h) */
    rc = 0;
done:
    /* refused for what it read (a chunk that is not its bytes, a digest that does not hold, a file
     * that changed): a record of the stat cache may be what lied, so none is trusted next time */
    if (rc < 0 && (rc == KESTREL_EINVALID || strstr(kestrel_error_last()->message, "changed while it was pushed")))
        kestrel__pushcache_forget(ps.cache);
    ahead_close(&ra);
    EVP_MD_CTX_free(listing_digest);
    kestrel__listing_free(&list);
    kestrel__spool_close(lists);
    kestrel__pushcache_close(ps.cache);
    free(ps.refs);
    free(ps.buf);
    if (m) {   /* fields never set stay the shared empty string */
        if (m->name == NULL) m->name = (char *)protobuf_c_empty_string;
        if (m->sha256 == NULL) m->sha256 = (char *)protobuf_c_empty_string;
        if (m->metadata_json == NULL) m->metadata_json = (char *)protobuf_c_empty_string;
        if (m->alias == NULL) m->alias = (char *)protobuf_c_empty_string;
    }
    kestrel__manifest_free(m);
    return rc;
}
