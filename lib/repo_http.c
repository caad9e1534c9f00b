/* lib/repo_http.c - the repository through kestreld: chunk and hash first, ask which chunks the
 * server lacks (in batches), send only those in packs of up to 32 MiB over parallel streams read
 * straight from the file, then commit the manifest. Pull fetches missing chunks in parallel into
 * a temp file (each verified, kept in a local cache), checks the whole file, and renames it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "chunk.h"
#include "http.h"
#include "repo_priv.h"
#include "chunk_cache.h"
#include "pull_layout.h"
#include "store.h"
#include "tree.h"

#define STREAMS 4
#define PACK_MAX (32u << 20)
#define STALL_S 60
#define QUERY_BATCH 10000

struct upload_ctx {
    kestrel_client *c;
    kestrel__progress *pr;
};

static int hex_cmp(const void *a, const void *b)
{
    return strcmp(((const kestrel__chunk_ref *)a)->hex, ((const kestrel__chunk_ref *)b)->hex);
}

/* ---- push ----------------------------------------------------------------------------------- */

typedef struct {
    int fd;
    const kestrel__chunk_ref *const *chunks;   /* the pack's chunks */
    size_t n, i;
    uint8_t head[36];
    size_t in_head, in_chunk;   /* progress through the current chunk's header and bytes */
    int64_t sent;
    kestrel_buf resp;
    CURL *h;
    struct curl_slist *hdrs;
} pack_upload;

static size_t pack_read(char *buf, size_t size, size_t nitems, void *payload)
{
    pack_upload *u = payload;
    size_t room = size * nitems, done = 0;
    while (done < room && u->i < u->n) {
        const kestrel__chunk_ref *c = u->chunks[u->i];
        if (u->in_head < 36) {
            size_t take;
            if (u->in_head == 0) {
                for (int k = 0; k < 32; k++) {
                    unsigned v;
                    sscanf(c->hex + 2 * k, "%2x", &v);
                    u->head[k] = (uint8_t)v;
                }
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
        {
            size_t want = c->len - u->in_chunk, take = want < room - done ? want : room - done;
            ssize_t r = take ? pread(u->fd, buf + done, take, c->offset + (off_t)u->in_chunk) : 0;
            if (r < 0)
                return CURL_READFUNC_ABORT;
            if (r == 0 && take)
                return CURL_READFUNC_ABORT;   /* the file shrank under us */
            u->in_chunk += (size_t)r;
            done += (size_t)r;
            u->sent += r;
            if (u->in_chunk == c->len) {
                u->i++;
                u->in_head = u->in_chunk = 0;
            }
        }
    }
    return done;
}

static size_t collect(char *data, size_t size, size_t n, void *payload)
{
    return kestrel__buf_put(payload, data, size * n) < 0 ? 0 : size * n;
}

/* A transfer gives up when nothing moves for STALL_S seconds (a hung server or network), so a
 * pull or push never waits forever; a slow but moving transfer is never cut off. */
static void stall_guard(CURL *h, const kestrel_client *c)
{
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->opts.connect_timeout_ms ? c->opts.connect_timeout_ms : 10000L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)STALL_S);
    kestrel__http_tls(h);
}

/* Tell the server a chunk came damaged: it re-hashes its copy and quarantines it when the stored
 * bytes are wrong, so the next push heals every version using it (a network fault changes
 * nothing there). Best effort: the pull fails either way. */
static void report_damaged(kestrel_client *c, const char *hex)
{
    char path[128];
    kestrel__request req = { "POST", path, NULL, NULL, 0, 0 };
    snprintf(path, sizeof(path), "/api/v1/chunks/%s/verify", hex);
    kestrel__http_call(NULL, c, &req);   /* the caller sets its own error after this */
}

static int start_pack(CURLM *m, kestrel_client *c, pack_upload *u, const char *url)
{
    int64_t total = 0;
    for (size_t i = 0; i < u->n; i++)
        total += 36 + u->chunks[i]->len;
    if ((u->h = curl_easy_init()) == NULL || (u->hdrs = kestrel__http_headers(c, "application/octet-stream")) == NULL)
        return kestrel__error_oom();
    curl_easy_setopt(u->h, CURLOPT_URL, url);
    stall_guard(u->h, c);
    curl_easy_setopt(u->h, CURLOPT_POST, 1L);
    curl_easy_setopt(u->h, CURLOPT_HTTPHEADER, u->hdrs);
    curl_easy_setopt(u->h, CURLOPT_READFUNCTION, pack_read);
    curl_easy_setopt(u->h, CURLOPT_READDATA, u);
    curl_easy_setopt(u->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)total);
    curl_easy_setopt(u->h, CURLOPT_UPLOAD_BUFFERSIZE, 2L << 20);   /* the 64 KiB default halves throughput */
    curl_easy_setopt(u->h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(u->h, CURLOPT_WRITEDATA, &u->resp);
    curl_easy_setopt(u->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(u->h, CURLOPT_PRIVATE, u);
    return curl_multi_add_handle(m, u->h) == CURLM_OK ? 0 : kestrel__error_oom();
}

static int finish_transfer(CURLM *m, CURL *h, CURLcode cc, kestrel_buf *resp, const char *what)
{
    long status = 0;
    char *ctype = NULL;
    int rc = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
    if (cc != CURLE_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s: %s", what, curl_easy_strerror(cc));
        rc = cc == CURLE_ABORTED_BY_CALLBACK ? kestrel__error_set(KESTREL_EIO, "%s: the file changed while it was sent", what)
                                             : kestrel__error_set_net((int)cc, msg);
    } else if (status < 200 || status >= 300) {
        rc = kestrel__http_failure(status, ctype, resp);
    }
    curl_multi_remove_handle(m, h);
    return rc;
}

/* Send the missing chunks (each digest once) in packs over up to STREAMS parallel uploads. */
static int send_packs(kestrel_client *c, int fd, kestrel__chunk_ref *chunks, size_t n, kestrel__progress *pr)
{
    kestrel__chunk_ref **todo = malloc((n + 1) * sizeof(*todo));
    pack_upload up[STREAMS];
    size_t ntodo = 0, next = 0;
    int running = 0, rc = 0, active = 0;
    char url[2200];
    CURLM *m = curl_multi_init();
    memset(up, 0, sizeof(up));
    if (todo == NULL || m == NULL) {
        free(todo);
        if (m)
            curl_multi_cleanup(m);
        return kestrel__error_oom();
    }
    for (size_t i = 0; i < n; i++)
        if (chunks[i].missing && (ntodo == 0 || strcmp(todo[ntodo - 1]->hex, chunks[i].hex)))
            todo[ntodo++] = &chunks[i];   /* chunks sorted by digest here: one copy each */
    snprintf(url, sizeof(url), "%s/api/v1/chunks/pack", c->url);
    for (;;) {
        /* keep STREAMS packs in flight */
        for (int s = 0; s < STREAMS && rc == 0 && next < ntodo; s++) {
            size_t bytes = 0, first = next;
            if (up[s].h)
                continue;
            while (next < ntodo && (next == first || bytes + todo[next]->len <= PACK_MAX))
                bytes += todo[next++]->len;
            up[s] = (pack_upload){ fd, (const kestrel__chunk_ref *const *)todo + first, next - first, 0, { 0 }, 0, 0, 0,
                                   KESTREL_BUF_INIT, NULL, NULL };
            if ((rc = start_pack(m, c, &up[s], url)) < 0)
                break;
            active++;
        }
        if (active == 0)
            break;
        curl_multi_perform(m, &running);
        {
            CURLMsg *msg;
            int left;
            while ((msg = curl_multi_info_read(m, &left)) != NULL) {
                pack_upload *u;
                int r;
                if (msg->msg != CURLMSG_DONE)
                    continue;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&u);
                r = finish_transfer(m, u->h, msg->data.result, &u->resp, "pack upload");
                if (r < 0 && rc == 0)
                    rc = r;
                for (size_t i = 0; i < u->n; i++)
                    pr->p.bytes_new += u->chunks[i]->len;
                pr->p.chunks_new += (int64_t)u->n;
                curl_easy_cleanup(u->h);
                curl_slist_free_all(u->hdrs);
                kestrel_buf_dispose(&u->resp);
                u->h = NULL;
                active--;
            }
        }
        if (rc == 0) {
            int r = kestrel__progress_report(pr, 0);
            if (r < 0)
                rc = r;
        }
        if (rc < 0 && active == 0)
            break;
        if (rc < 0) {   /* stop the others */
            for (int s = 0; s < STREAMS; s++)
                if (up[s].h) {
                    curl_multi_remove_handle(m, up[s].h);
                    curl_easy_cleanup(up[s].h);
                    curl_slist_free_all(up[s].hdrs);
                    kestrel_buf_dispose(&up[s].resp);
                    up[s].h = NULL;
                }
            break;
        }
        if (running)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    curl_multi_cleanup(m);
    free(todo);
    return rc;
}

/* Ask the server which of a file's chunks it lacks (in batches), then send those from the file. */
static int upload(void *ctx, const char *path, kestrel__chunk_ref *chunks, size_t n)
{
    struct upload_ctx *u = ctx;
    kestrel__chunk_ref *sorted;
    int fd = -1, rc = 0;
    if (n == 0)
        return 0;   /* an empty file */
    if ((sorted = malloc((n + 1) * sizeof(*sorted))) == NULL)
        return kestrel__error_oom();
    memcpy(sorted, chunks, n * sizeof(*sorted));
    if (n > 1)
        qsort(sorted, n, sizeof(*sorted), hex_cmp);
    for (size_t off = 0; off < n && rc == 0; off += QUERY_BATCH) {
        size_t k = n - off < QUERY_BATCH ? n - off : QUERY_BATCH;
        Kestrel__V1__ChunkQuery q = KESTREL__V1__CHUNK_QUERY__INIT;
        kestrel__request req = { "POST", "/api/v1/chunks/missing", &q.base, &kestrel__v1__chunk_query_result__descriptor, 1, 0 };
        ProtobufCMessage *res;
        if ((q.digests = malloc(k * sizeof(char *))) == NULL) {
            rc = kestrel__error_oom();
            break;
        }
        for (size_t i = 0; i < k; i++)
            q.digests[i] = sorted[off + i].hex;
        q.n_digests = k;
        rc = kestrel__http_call(&res, u->c, &req);
        free(q.digests);
        if (rc < 0)
            break;
        for (size_t i = 0; i < ((Kestrel__V1__ChunkQueryResult *)res)->n_missing; i++) {
            kestrel__chunk_ref key, *hit;
            snprintf(key.hex, sizeof(key.hex), "%s", ((Kestrel__V1__ChunkQueryResult *)res)->missing[i]);
            if ((hit = bsearch(&key, sorted + off, k, sizeof(*sorted), hex_cmp)) != NULL)
                for (kestrel__chunk_ref *x = hit; x >= sorted + off && !strcmp(x->hex, key.hex); x--)
                    x->missing = 1;
        }
        protobuf_c_message_free_unpacked(res, NULL);
    }
    if (rc == 0 && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        rc = kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(errno));
    if (rc == 0)
        rc = send_packs(u->c, fd, sorted, n, u->pr);
    if (fd >= 0)
        close(fd);
    free(sorted);
    return rc;
}

int kestrel__repo_http_push(int64_t *version_out, kestrel_client *c, const char *name, const char *path,
                            const kestrel_transfer_options *o, kestrel__progress *pr)
{
    kestrel__chunk_ref *chunks = NULL;
    kestrel__tree_file *files = NULL;
    size_t n = 0, nfiles = 0;
    int64_t size = 0;
    char sha[65], upath[600];
    int rc, tree;
    struct stat st;
    struct upload_ctx u = { c, pr };
    Kestrel__V1__Manifest mf = KESTREL__V1__MANIFEST__INIT;
    Kestrel__V1__ChunkRef *refs = NULL, **refp = NULL;
    Kestrel__V1__TreeFile *tf = NULL, **tfp = NULL;
    ProtobufCMessage *resp = NULL;

    if (stat(path, &st) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(errno));
    tree = S_ISDIR(st.st_mode);
    /* hashing is not on the transfer: each file is chunked, then its new chunks are sent */
    if (tree) {
        if ((rc = kestrel__tree_select(path, pr->select, pr->nselect, &files, &nfiles)) < 0 ||
            (rc = kestrel__chunk_tree(path, files, nfiles, &chunks, &n, pr, NULL, NULL, upload, &u)) < 0)
            goto done;
        size = pr->tree_total;
        kestrel__tree_digest(files, nfiles, sha);
    } else if ((rc = kestrel__chunk_file(path, &chunks, &n, &size, sha, pr, NULL, NULL)) < 0 ||
               (rc = upload(&u, path, chunks, n)) < 0) {
        goto done;
    }
    /* commit: the server checks that every chunk is there and the sizes add up */
    refs = calloc(n + 1, sizeof(*refs));
    refp = calloc(n + 1, sizeof(*refp));
    tf = calloc(nfiles + 1, sizeof(*tf));
    tfp = calloc(nfiles + 1, sizeof(*tfp));
    if (refs == NULL || refp == NULL || tf == NULL || tfp == NULL) {
        rc = kestrel__error_oom();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        kestrel__v1__chunk_ref__init(&refs[i]);
        refs[i].digest = chunks[i].hex;
        refs[i].size = chunks[i].len;
        refp[i] = &refs[i];
    }
    for (size_t i = 0; i < nfiles; i++) {
        kestrel__v1__tree_file__init(&tf[i]);
        tf[i].path = files[i].path;
        tf[i].size = files[i].size;
        tf[i].sha256 = files[i].sha;
        tf[i].mode = files[i].mode;
        tf[i].chunks = files[i].chunks;
        tfp[i] = &tf[i];
    }
    mf.name = (char *)name;
    mf.size = size;
    mf.sha256 = sha;
    mf.chunks = refp;
    mf.n_chunks = n;
    mf.files = tfp;
    mf.n_files = nfiles;
    mf.metadata_json = (char *)(o->metadata_json ? o->metadata_json : "");
    mf.alias = (char *)(o->alias ? o->alias : "");
    snprintf(upath, sizeof(upath), "/api/v1/models/%s/versions", name);
    {
        kestrel__request req = { "POST", upath, &mf.base, &kestrel__v1__manifest__descriptor, 0, 0 };
        if ((rc = kestrel__http_call(&resp, c, &req)) < 0)
            goto done;
    }
    if (version_out)
        *version_out = ((Kestrel__V1__Manifest *)resp)->version;
    rc = kestrel__progress_report(pr, 1);
done:
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    free(refs);
    free(refp);
    free(tf);
    free(tfp);
    kestrel__tree_free(files, nfiles);
    free(chunks);
    return rc;
}

/* ---- pull ----------------------------------------------------------------------------------- */

typedef struct {
    const Kestrel__V1__ChunkRef *ref;
    size_t idx;
    kestrel_buf data;
    CURL *h;
} fetch;

/* Keep the pulled file (or blob) at path in the chunk cache as a pack, then bound the cache. */
static void keep_pack(kestrel__chunk_cache *cache, const char *path, const Kestrel__V1__Manifest *mf, int take,
                      int64_t downloaded)
{
    kestrel__cache_item *items = downloaded ? calloc(mf->n_chunks + 1, sizeof(*items)) : NULL;
    if (items == NULL) {   /* all of it came from the cache already (or no memory): nothing new to keep */
        if (take)
            unlink(path);
        return;
    }
    for (size_t i = 0; i < mf->n_chunks; i++) {
        items[i].hex = mf->chunks[i]->digest;
        items[i].len = mf->chunks[i]->size;
    }
    kestrel__cache_add(cache, path, items, mf->n_chunks, take);
    free(items);
    kestrel__cache_trim(cache);
}

int kestrel__repo_http_pull(kestrel_client *c, const char *ref, const char *dest, kestrel__progress *pr)
{
    char name[256], upath[700], tmp[4096] = "", sha[65];
    const char *at = strrchr(ref, '@');
    ProtobufCMessage *m = NULL;
    const Kestrel__V1__Manifest *mf;
    kestrel__layout *lay = NULL;
    fetch fl[STREAMS];
    size_t next = 0;
    int fd = -1, rc;
    kestrel__chunk_cache cache;
    int64_t downloaded = 0;
    CURLM *multi = NULL;
    kestrel_buf b = KESTREL_BUF_INIT;

    snprintf(name, sizeof(name), "%.*s", (int)(at ? at - ref : (long)strlen(ref)), ref);
    if (!kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s'", name);
    snprintf(upath, sizeof(upath), "/api/v1/models/%s/versions/%s", name, at ? at + 1 : "latest");
    {
        kestrel__request req = { "GET", upath, NULL, &kestrel__v1__manifest__descriptor, 1, 0 };
        if ((rc = kestrel__http_call(&m, c, &req)) < 0)
            return rc;
    }
    mf = (const Kestrel__V1__Manifest *)m;
    pr->p.bytes_total = mf->size;
    kestrel__cache_open(&cache);
    snprintf(tmp, sizeof(tmp), "%s.kestrel-tmp.XXXXXX", dest);
    if ((fd = mkstemp(tmp)) < 0) {
        tmp[0] = '\0';
        rc = kestrel__error_set(KESTREL_EIO, "cannot create a temp file next to %s: %s", dest, strerror(errno));
        goto done;
    }
    if ((rc = kestrel__layout_new(&lay, mf, fd)) < 0)
        goto done;
    if ((multi = curl_multi_init()) == NULL) {
        rc = kestrel__error_oom();
        goto done;
    }
    memset(fl, 0, sizeof(fl));
    for (;;) {
        int active = 0, running = 0;
        for (int s = 0; s < STREAMS && rc == 0; s++) {
            while (!fl[s].h && next < mf->n_chunks) {
                size_t idx = next++;
                const Kestrel__V1__ChunkRef *r = mf->chunks[idx];
                char url[2300];
                if (!kestrel__layout_first(lay, idx))
                    continue;   /* a digest seen before was placed everywhere */
                if (kestrel__cache_get(&cache, r->digest, r->size, &b)) {
                    if ((rc = kestrel__layout_place(lay, idx, b.ptr, b.size)) < 0)
                        break;
                    pr->p.bytes_done += r->size;
                    pr->p.chunks_done++;
                    continue;
                }
                fl[s].ref = r;
                fl[s].idx = idx;
                fl[s].data.size = 0;
                if ((fl[s].h = curl_easy_init()) == NULL) {
                    rc = kestrel__error_oom();
                    break;
                }
                snprintf(url, sizeof(url), "%s/api/v1/chunks/%s", c->url, r->digest);
                curl_easy_setopt(fl[s].h, CURLOPT_URL, url);
                stall_guard(fl[s].h, c);
                if (c->auth_header) {
                    struct curl_slist *h = curl_slist_append(NULL, c->auth_header);
                    curl_easy_setopt(fl[s].h, CURLOPT_HTTPHEADER, h);
                    curl_easy_setopt(fl[s].h, CURLOPT_PRIVATE, h);
                }
                curl_easy_setopt(fl[s].h, CURLOPT_WRITEFUNCTION, collect);
                curl_easy_setopt(fl[s].h, CURLOPT_WRITEDATA, &fl[s].data);
                curl_easy_setopt(fl[s].h, CURLOPT_BUFFERSIZE, 512L * 1024);
                curl_easy_setopt(fl[s].h, CURLOPT_NOSIGNAL, 1L);
                curl_multi_add_handle(multi, fl[s].h);
            }
            active += fl[s].h != NULL;
        }
        if (active == 0 || rc < 0)
            break;
        curl_multi_perform(multi, &running);
        {
            CURLMsg *msg;
            int left;
            while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
                int s;
                struct curl_slist *h = NULL;
                if (msg->msg != CURLMSG_DONE)
                    continue;
                for (s = 0; s < STREAMS && fl[s].h != msg->easy_handle; s++)
                    ;
                if (s == STREAMS)
                    continue;
                curl_easy_getinfo(fl[s].h, CURLINFO_PRIVATE, (char **)&h);
                if ((rc = finish_transfer(multi, fl[s].h, msg->data.result, &fl[s].data, "chunk download")) == 0) {
                    if (!kestrel__chunk_verified(fl[s].ref->digest, &fl[s].data, fl[s].ref->size)) {
                        report_damaged(c, fl[s].ref->digest);
                        rc = kestrel__error_set(KESTREL_EPROTO, "chunk %.12s arrived damaged or truncated (%zu of %" PRId64
                                                                " bytes)", fl[s].ref->digest, fl[s].data.size, fl[s].ref->size);
                    }
                    else if ((rc = kestrel__layout_place(lay, fl[s].idx, fl[s].data.ptr, fl[s].data.size)) == 0) {
                        downloaded++;
                        pr->p.bytes_done += fl[s].ref->size;
                        pr->p.chunks_done++;
                    }
                }
                curl_easy_cleanup(fl[s].h);
                curl_slist_free_all(h);
                fl[s].h = NULL;
                if (rc < 0)
                    break;
            }
        }
        if (rc == 0)
            rc = kestrel__progress_report(pr, 0);
        if (rc < 0)
            break;
        if (running)
            curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
    for (int s = 0; s < STREAMS; s++)
        if (fl[s].h) {
            struct curl_slist *h = NULL;
            curl_easy_getinfo(fl[s].h, CURLINFO_PRIVATE, (char **)&h);
            curl_multi_remove_handle(multi, fl[s].h);
            curl_easy_cleanup(fl[s].h);
            curl_slist_free_all(h);
        }
    for (int s = 0; s < STREAMS; s++)
        kestrel_buf_dispose(&fl[s].data);
    if (rc < 0)
        goto done;
    /* the whole file, hashed beside the download as it filled in */
    rc = kestrel__layout_finish(lay, sha);
    lay = NULL;
    if (rc < 0)
        goto done;
    if (mf->n_files) {   /* a directory: its files' concatenation, split and verified file by file */
        kestrel__tree_file *f = kestrel__tree_of_pb(mf);
        rc = f ? kestrel__tree_install(fd, f, mf->n_files, mf->size, mf->n_chunks, mf->sha256, dest)
               : kestrel__error_oom();
        free(f);
        if (rc < 0)
            goto done;
        close(fd);
        fd = -1;
        keep_pack(&cache, tmp, mf, 1, downloaded);   /* the blob itself becomes the pack */
        tmp[0] = '\0';
        rc = kestrel__progress_report(pr, 1);
        goto done;
    }
    if (strcmp(sha, mf->sha256)) {
        rc = kestrel__error_set(KESTREL_EPROTO, "%s: the assembled file does not match its digest", ref);
        goto done;
    }
    rc = kestrel__install_file(fd, tmp, dest);
    fd = -1;
    if (rc < 0)
        goto done;
    tmp[0] = '\0';
    keep_pack(&cache, dest, mf, 0, downloaded);   /* a hard link: no byte is written twice */
    rc = kestrel__progress_report(pr, 1);
done:
    if (fd >= 0)
        close(fd);
    if (rc < 0 && tmp[0])
        unlink(tmp);   /* never leave half a file behind */
    if (multi)
        curl_multi_cleanup(multi);
    kestrel__cache_close(&cache);
    kestrel_buf_dispose(&b);
    kestrel__layout_free(lay);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

/* ---- the rest of the registry API -------------------------------------------------------------- */

int kestrel__repo_http_versions(kestrel_client *c, const char *name, ProtobufCMessage **out)
{
    char path[600];
    kestrel__request req = { "GET", path, NULL, &kestrel__v1__manifest_list__descriptor, 1, 0 };
    snprintf(path, sizeof(path), "/api/v1/models/%s/versions", name);
    return kestrel__http_call(out, c, &req);
}

int kestrel__repo_http_list(kestrel_client *c, kestrel_buf *out)
{
    kestrel__request req = { "GET", "/api/v1/models", NULL, &kestrel__v1__model_list__descriptor, 1, 0 };
    ProtobufCMessage *m;
    int rc = kestrel__http_call(&m, c, &req);
    if (rc < 0)
        return rc;
    rc = kestrel__buf_puts(out, "");
    for (size_t i = 0; rc == 0 && i < ((Kestrel__V1__ModelList *)m)->n_names; i++)
        rc = kestrel__buf_printf(out, "%s\n", ((Kestrel__V1__ModelList *)m)->names[i]);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int kestrel__repo_http_alias(kestrel_client *c, const char *name, const char *alias, int64_t version, int del)
{
    char path[700];
    Kestrel__V1__AliasUpdate u = KESTREL__V1__ALIAS_UPDATE__INIT;
    kestrel__request req = { del ? "DELETE" : "PUT", path, del ? NULL : &u.base, NULL, 1, 0 };
    u.version = version;
    snprintf(path, sizeof(path), "/api/v1/models/%s/aliases/%s", name, alias);
    return kestrel__http_call(NULL, c, &req);
}

int kestrel__repo_http_delete(kestrel_client *c, const char *name, int64_t version)
{
    char path[700];
    kestrel__request req = { "DELETE", path, NULL, NULL, 1, 0 };
    snprintf(path, sizeof(path), "/api/v1/models/%s/versions/%" PRId64, name, version);
    return kestrel__http_call(NULL, c, &req);
}
