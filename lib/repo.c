/* lib/repo.c - push and pull of model versions: content-defined chunks, stored once, verified on
 * the way out. file:// repositories are opened in-process (lib/store.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "chunk.h"
#include "filehash.h"
#include "client.h"
#include "options.h"
#include "store.h"
#include "repo_priv.h"
#include "tree.h"
#include "push_cache.h"

#define READ_BUF (8u * 1024 * 1024)

static const size_t topts_sizes[] = { 0, offsetof(kestrel_transfer_options, alias) + sizeof(const char *) };

int kestrel_transfer_options_init(kestrel_transfer_options *o, unsigned int version)
{
    if (o == NULL || version == 0 || version >= KESTREL__ARRAY_SIZE(topts_sizes))
        return kestrel__error_set(KESTREL_EMISUSE, "invalid kestrel_transfer_options version %u", version);
    memset(o, 0, sizeof(*o));
    o->version = version;
    return 0;
}

static int load_topts(kestrel_transfer_options *dst, const kestrel_transfer_options *src)
{
    memset(dst, 0, sizeof(*dst));
    if (src) {
        if (src->version == 0 || src->version >= KESTREL__ARRAY_SIZE(topts_sizes))
            return kestrel__error_set(KESTREL_EMISUSE, "invalid kestrel_transfer_options version %u", src->version);
        memcpy(dst, src, topts_sizes[src->version]);
    }
    dst->version = KESTREL_TRANSFER_OPTIONS_VERSION;
    return 0;
}

/* The repository behind a client (file:// only in this release). */
static int open_store(kestrel__store **out, kestrel_client *c)
{
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    return kestrel__store_open(out, c->store_root);
}

int kestrel__progress_report(kestrel__progress *pr, int final)
{
    int64_t now;
    int r;
    if (pr->cb == NULL)
        return 0;
    now = kestrel__now_ms();
    if (!final && now - pr->last_ms < 100 && pr->last_ms)
        return 0;
    pr->last_ms = now;
    r = pr->cb(&pr->p, pr->payload);
    if (r == KESTREL_EUSER)
        return KESTREL_EUSER;
    return r ? kestrel__error_set(KESTREL_ECANCELLED, "the progress callback cancelled the transfer") : 0;
}

/* Top the read buffer up to READ_BUF bytes (fewer at the end of the file: *eof). */
static int fill(int fd, uint8_t *buf, size_t *have, int *eof, const char *path)
{
    while (!*eof && *have < READ_BUF) {
        ssize_t r = read(fd, buf + *have, READ_BUF - *have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(errno));
        *eof |= r == 0;
        *have += (size_t)r;
    }
    return 0;
}

/* Open path for reading; it must be a regular file. Returns the fd or a negative error. */
int kestrel__open_regular(const char *path, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return kestrel__error_set(KESTREL_EINVALID, "%s is not a regular file", path);
    }
    return fd;
}

void kestrel__drop_temp(int *fd, char *tmp)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    if (tmp[0])
        unlink(tmp);
    tmp[0] = '\0';
}

/* Sync and close the complete temp file fd, then rename it to dest. fd is closed either way. */
int kestrel__install_file(int fd, const char *tmp, const char *dest)
{
    if (fsync(fd) < 0 || close(fd) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot sync %s: %s", tmp, strerror(errno));
    if (rename(tmp, dest) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot rename to %s: %s", dest, strerror(errno));
    return 0;
}

int kestrel__chunk_file(const char *path, kestrel__chunk_ref **out, size_t *n, int64_t *size, char sha[65],
                        kestrel__progress *pr, kestrel__chunk_sink sink, void *sink_ctx)
{
    kestrel__chunk_ref *v = NULL;
    size_t cap = 0, have = 0;
    uint8_t *buf = malloc(READ_BUF);
    kestrel__filehash *whole = NULL;
    int64_t offset = 0, started_ns = 0;
    int fd = -1, eof = 0, rc = 0;
    struct stat st;
    *out = NULL;
    *n = 0;
    if (buf == NULL) {
        rc = kestrel__error_oom();
        goto done;
    }
    if ((fd = kestrel__open_regular(path, &st)) < 0) {
        rc = fd;
        goto done;
    }
    *size = (int64_t)st.st_size;
    pr->p.bytes_total = pr->tree_total ? pr->tree_total : *size;
    if (sink == NULL && kestrel__pushcache_lookup(path, &st, &v, n, sha)) {
        /* unchanged since an earlier push read it: its chunks and digest hold (HTTP: the server
         * still checks every chunk it receives) */
        pr->p.bytes_done = pr->base_bytes + *size;
        pr->p.chunks_done = pr->base_chunks + (int64_t)*n;
        rc = kestrel__progress_report(pr, 0);
        goto done;
    }
    {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        started_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - 1000000000;   /* timestamps are coarse */
    }
    if ((rc = kestrel__filehash_start(&whole, path)) < 0)
        goto done;
    for (;;) {
        size_t off = 0, first = *n;
        int64_t buf_at = offset;   /* the file offset of buf[0] */
        if ((rc = fill(fd, buf, &have, &eof, path)) < 0)
            goto done;
        while (off < have && (eof || have - off >= KESTREL__CHUNK_MAX)) {
            size_t cut = kestrel__chunk_next(buf + off, have - off, eof);
            if ((rc = kestrel__array_grow(&v, &cap, *n + 1, sizeof(*v))) < 0)
                goto done;
            v[*n].offset = offset;
            v[*n].len = (uint32_t)cut;
            v[*n].missing = 0;
            (*n)++;
            off += cut;
            offset += (int64_t)cut;
        }
        kestrel__hash_chunks(buf, buf_at, v + first, *n - first);   /* on two threads */
        if (sink && (rc = sink(sink_ctx, buf, buf_at, v + first, *n - first)) < 0)
            goto done;
        pr->p.bytes_done = pr->base_bytes + offset;
        pr->p.chunks_done = pr->base_chunks + (int64_t)*n;
        if ((rc = kestrel__progress_report(pr, 0)) < 0)
            goto done;
        memmove(buf, buf + off, have - off);
        have -= off;
        if (eof && have == 0)
            break;
    }
    rc = kestrel__filehash_finish(whole, offset, sha);
    whole = NULL;
    if (rc == 0 && sink == NULL)
        kestrel__pushcache_store(path, &st, started_ns, v, *n, sha);
done:
    if (whole)
        kestrel__filehash_finish(whole, -1, sha);
    if (fd >= 0)
        close(fd);
    free(buf);
    if (rc < 0) {
        free(v);
        *n = 0;
    } else {
        *out = v;
    }
    return rc;
}

/* The file:// push: each read buffer's chunks go into the store (those it lacks) while the
 * buffer is still in memory, so the file is read once. */
struct store_sink {
    kestrel__store *s;
    kestrel__progress *pr;
};

static int store_missing(void *ctx, const uint8_t *buf, int64_t buf_at, kestrel__chunk_ref *refs, size_t count)
{
    struct store_sink *k = ctx;
    int rc;
    for (size_t i = 0; i < count; i++) {
        if (kestrel__store_has_chunk(k->s, refs[i].hex))
            continue;
        if ((rc = kestrel__store_put_chunk(k->s, refs[i].hex, buf + (refs[i].offset - buf_at), refs[i].len)) < 0)
            return rc;
        k->pr->p.bytes_new += refs[i].len;
        k->pr->p.chunks_new++;
    }
    return 0;
}

int kestrel_model_push(int64_t *version_out, kestrel_client *c, const char *name, const char *path,
                       const kestrel_transfer_options *in)
{
    return kestrel__model_push(version_out, c, name, path, in, NULL, 0);
}

int kestrel__model_push(int64_t *version_out, kestrel_client *c, const char *name, const char *path,
                        const kestrel_transfer_options *in, char *const *select, size_t nselect)
{
    kestrel_transfer_options o;
    kestrel__store *s = NULL;
    kestrel__progress pr;
    kestrel__chunk_ref *refs = NULL;
    size_t n = 0;
    int64_t size = 0, version = 0;
    int rc;
    cJSON *manifest = NULL, *chunks = NULL, *meta = NULL;
    struct store_sink sink;
    char hex[KESTREL__HEX_LEN + 1];
    kestrel__tree_file *files = NULL;
    size_t nfiles = 0;
    struct stat st;

    if ((rc = load_topts(&o, in)) < 0)
        return rc;
    if (name == NULL || !kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s': lowercase [a-z0-9._-] segments joined by '/'",
                                  name ? name : "");
    if (o.alias && (!kestrel__alias_valid(o.alias) || !strcmp(o.alias, "latest")))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s'", o.alias);
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    memset(&pr, 0, sizeof(pr));
    pr.p.version = 1;
    pr.p.phase = KESTREL_PHASE_PUSH;
    pr.cb = o.progress;
    pr.payload = o.progress_payload;
    pr.select = select;
    pr.nselect = nselect;
    if (o.metadata_json && ((meta = cJSON_Parse(o.metadata_json)) == NULL || !cJSON_IsObject(meta))) {
        cJSON_Delete(meta);
        return kestrel__error_set(KESTREL_EINVALID, "metadata must be a JSON object");
    }
    if (path == NULL || stat(path, &st) < 0) {
        cJSON_Delete(meta);
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path ? path : "(null)",
                                  path ? strerror(errno) : "no path");
    }
    if (c->store_root == NULL) {
        cJSON_Delete(meta);
        return kestrel__repo_http_push(version_out, c, name, path, &o, &pr);
    }
    if ((rc = open_store(&s, c)) < 0)
        goto done;
    sink.s = s;
    sink.pr = &pr;
    if (S_ISDIR(st.st_mode)) {
        if ((rc = kestrel__tree_select(path, pr.select, pr.nselect, &files, &nfiles)) < 0 ||
            (rc = kestrel__chunk_tree(path, files, nfiles, &refs, &n, &pr, store_missing, &sink, NULL, NULL)) < 0)
            goto done;
        size = pr.tree_total;
        kestrel__tree_digest(files, nfiles, hex);
    } else if ((rc = kestrel__chunk_file(path, &refs, &n, &size, hex, &pr, store_missing, &sink)) < 0) {
        goto done;
    }
    if ((manifest = cJSON_CreateObject()) == NULL || (chunks = cJSON_AddArrayToObject(manifest, "chunks")) == NULL ||
        (S_ISDIR(st.st_mode) && !cJSON_AddItemToObject(manifest, "files", kestrel__tree_to_json(files, nfiles)))) {
        rc = kestrel__error_oom();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        cJSON *entry = cJSON_CreateArray();
        if (entry == NULL || !cJSON_AddItemToArray(chunks, entry)) {
            cJSON_Delete(entry);
            rc = kestrel__error_oom();
            goto done;
        }
        cJSON_AddItemToArray(entry, cJSON_CreateString(refs[i].hex));
        cJSON_AddItemToArray(entry, cJSON_CreateNumber((double)refs[i].len));
    }
    cJSON_AddStringToObject(manifest, "name", name);
    cJSON_AddNumberToObject(manifest, "size", (double)size);
    cJSON_AddStringToObject(manifest, "sha256", hex);
    cJSON_AddNumberToObject(manifest, "created_ms", (double)kestrel__now_ms());
    if (meta) {
        cJSON_AddItemToObject(manifest, "metadata", meta);
        meta = NULL;
    }
    if ((rc = kestrel__store_commit(s, name, manifest, &version)) < 0)
        goto done;
    if (o.alias && (rc = kestrel__store_alias_set(s, name, o.alias, version)) < 0)
        goto done;
    if (version_out)
        *version_out = version;
    rc = kestrel__progress_report(&pr, 1);
done:
    free(refs);
    kestrel__tree_free(files, nfiles);
    cJSON_Delete(meta);
    cJSON_Delete(manifest);
    kestrel__store_close(s);
    return rc;
}

int kestrel_model_pull(kestrel_client *c, const char *ref, const char *dest, const kestrel_transfer_options *in)
{
    kestrel_transfer_options o;
    kestrel__store *s = NULL;
    cJSON *m = NULL, *chunk;
    kestrel_buf data = KESTREL_BUF_INIT;
    kestrel__progress pr;
    char tmp[4096] = "", hex[KESTREL__HEX_LEN + 1];
    const char *want;
    EVP_MD_CTX *whole = NULL;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    int fd = -1, rc;
    kestrel__tree_file *files = NULL;
    size_t nfiles = 0;

    if ((rc = load_topts(&o, in)) < 0)
        return rc;
    if (ref == NULL || dest == NULL)
        return kestrel__error_set(KESTREL_EINVALID, "ref and dest are required");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    memset(&pr, 0, sizeof(pr));
    pr.p.version = 1;
    pr.p.phase = KESTREL_PHASE_PULL;
    pr.cb = o.progress;
    pr.payload = o.progress_payload;
    if (c->store_root == NULL)
        return kestrel__repo_http_pull(c, ref, dest, &pr);
    if ((rc = open_store(&s, c)) < 0)
        return rc;
    if ((rc = kestrel__store_resolve(s, ref, &m)) < 0)
        goto done;
    pr.p.bytes_total = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "size"));
    snprintf(tmp, sizeof(tmp), "%s.kestrel-tmp.XXXXXX", dest);
    if ((fd = mkstemp(tmp)) < 0) {
        rc = kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goto done;
    }
    if ((whole = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(whole, EVP_sha256(), NULL) != 1) {
        rc = kestrel__error_oom();
        goto done;
    }
    cJSON_ArrayForEach(chunk, cJSON_GetObjectItem(m, "chunks")) {
        const char *h = cJSON_GetStringValue(cJSON_GetArrayItem(chunk, 0));
        size_t len = (size_t)cJSON_GetNumberValue(cJSON_GetArrayItem(chunk, 1));
        const char *p;
        size_t left;
        if (h == NULL || strlen(h) != KESTREL__HEX_LEN) {
            rc = kestrel__error_set(KESTREL_EIO, "the manifest of %s is damaged", ref);
            goto done;
        }
        if ((rc = kestrel__store_get_chunk(s, h, len, &data)) < 0)   /* verified against its name */
            goto done;
        EVP_DigestUpdate(whole, data.ptr, data.size);
        for (p = data.ptr, left = data.size; left > 0;) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = kestrel__error_set(KESTREL_EIO, "cannot write %s: %s", tmp, strerror(errno));
                goto done;
            }
            p += w;
            left -= (size_t)w;
        }
        pr.p.bytes_done += (int64_t)data.size;
        pr.p.chunks_done++;
        if ((rc = kestrel__progress_report(&pr, 0)) < 0)
            goto done;
    }
    EVP_DigestFinal_ex(whole, md, &mdn);
    for (unsigned int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    want = cJSON_GetStringValue(cJSON_GetObjectItem(m, "sha256"));
    if (cJSON_GetObjectItem(m, "files")) {   /* a directory: the concatenation of its files, then split */
        rc = kestrel__tree_from_json(cJSON_GetObjectItem(m, "files"), &files, &nfiles);
        if (rc == 0 && pr.p.bytes_done != pr.p.bytes_total)
            rc = kestrel__error_set(KESTREL_EIO, "%s: the pulled data does not add up to its size", ref);
        if (rc == 0)
            rc = kestrel__tree_install(fd, files, nfiles, pr.p.bytes_total,
                                       (size_t)cJSON_GetArraySize(cJSON_GetObjectItem(m, "chunks")), want, dest);
        if (rc < 0)
            goto done;
        kestrel__drop_temp(&fd, tmp);
        rc = kestrel__progress_report(&pr, 1);
        goto done;
    }
    if (want == NULL || strcmp(hex, want) || pr.p.bytes_done != pr.p.bytes_total) {
        rc = kestrel__error_set(KESTREL_EIO, "%s: the assembled file does not match its digest", ref);
        goto done;
    }
    rc = kestrel__install_file(fd, tmp, dest);
    fd = -1;
    if (rc < 0)
        goto done;
    tmp[0] = '\0';
    rc = kestrel__progress_report(&pr, 1);
done:
    if (fd >= 0)
        close(fd);
    if (rc < 0 && tmp[0] && strstr(tmp, ".kestrel-tmp."))
        unlink(tmp);   /* never leave half a file behind */
    EVP_MD_CTX_free(whole);
    kestrel__tree_free(files, nfiles);
    kestrel_buf_dispose(&data);
    cJSON_Delete(m);
    kestrel__store_close(s);
    return rc;
}

struct kestrel_model_versions {
    uint32_t magic;
    kestrel_model_version *v;
    char **strings;
    size_t n, nstrings;
};

#define MAGIC_VERSIONS 0x6b566572u

void kestrel_model_versions_free(kestrel_model_versions *l)
{
    if (l == NULL || l->magic != MAGIC_VERSIONS)
        return;
    l->magic = KESTREL__MAGIC_DEAD;
    for (size_t i = 0; i < l->nstrings; i++)
        free(l->strings[i]);
    free(l->strings);
    free(l->v);
    free(l);
}

static const char *keep(kestrel_model_versions *l, char *s)
{
    if (s)
        l->strings[l->nstrings++] = s;
    return s ? s : "";
}

static int versions_http(kestrel_model_versions **out, kestrel_client *c, const char *name)
{
    ProtobufCMessage *m;
    const Kestrel__V1__ManifestList *ml;
    kestrel_model_versions *l;
    int rc = kestrel__repo_http_versions(c, name, &m);
    if (rc < 0)
        return rc;
    ml = (const Kestrel__V1__ManifestList *)m;
    if ((l = calloc(1, sizeof(*l))) == NULL || (l->v = calloc(ml->n_versions + 1, sizeof(*l->v))) == NULL ||
        (l->strings = calloc(3 * ml->n_versions + 1, sizeof(char *))) == NULL) {
        if (l)
            free(l->v);
        free(l);
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_oom();
    }
    l->magic = MAGIC_VERSIONS;
    for (size_t i = 0; i < ml->n_versions; i++) {
        const Kestrel__V1__Manifest *v = ml->versions[i];
        kestrel_buf aliases = KESTREL_BUF_INIT;
        kestrel_model_version *o = &l->v[l->n++];
        o->version_struct = 1;
        o->version = v->version;
        o->size = v->size;
        o->created_ms = v->created_ms;
        o->chunks = (int64_t)v->n_chunks;
        o->sha256 = keep(l, kestrel__strdup(v->sha256));
        kestrel__buf_puts(&aliases, "");
        for (size_t k = 0; k < v->n_aliases; k++)
            kestrel__buf_printf(&aliases, "%s%s", k ? "," : "", v->aliases[k]);
        o->aliases = keep(l, aliases.ptr);
        o->metadata_json = keep(l, kestrel__strdup(v->metadata_json[0] ? v->metadata_json : "{}"));
    }
    protobuf_c_message_free_unpacked(m, NULL);
    *out = l;
    return 0;
}

int kestrel_model_versions_get(kestrel_model_versions **out, kestrel_client *c, const char *name)
{
    kestrel__store *s = NULL;
    kestrel_model_versions *l = NULL;
    int64_t *vs = NULL;
    size_t n = 0;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    if (name == NULL || !kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s'", name ? name : "");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (c->store_root == NULL)
        return versions_http(out, c, name);
    if ((rc = open_store(&s, c)) < 0)
        return rc;
    if ((rc = kestrel__store_versions(s, name, &vs, &n)) < 0)
        goto done;
    if ((l = calloc(1, sizeof(*l))) == NULL || (l->v = calloc(n + 1, sizeof(*l->v))) == NULL ||
        (l->strings = calloc(3 * n + 1, sizeof(char *))) == NULL) {
        rc = kestrel__error_oom();
        goto done;
    }
    l->magic = MAGIC_VERSIONS;
    for (size_t i = 0; i < n; i++) {
        cJSON *m;
        kestrel_buf aliases = KESTREL_BUF_INIT;
        kestrel_model_version *v = &l->v[l->n];
        if (kestrel__store_manifest(s, name, vs[i], &m) < 0)
            continue;   /* deleted meanwhile */
        v->version_struct = 1;
        v->version = vs[i];
        v->size = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "size"));
        v->created_ms = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "created_ms"));
        v->chunks = cJSON_GetArraySize(cJSON_GetObjectItem(m, "chunks"));
        v->sha256 = keep(l, kestrel__strdup(cJSON_GetStringValue(cJSON_GetObjectItem(m, "sha256"))));
        kestrel__store_aliases_of(s, name, vs[i], &aliases);
        v->aliases = keep(l, aliases.ptr ? aliases.ptr : kestrel__strdup(""));
        v->metadata_json = keep(l, cJSON_GetObjectItem(m, "metadata") ? cJSON_PrintUnformatted(cJSON_GetObjectItem(m, "metadata"))
                                                                       : kestrel__strdup("{}"));
        cJSON_Delete(m);
        l->n++;
    }
    *out = l;
    l = NULL;
done:
    kestrel_model_versions_free(l);
    free(vs);
    kestrel__store_close(s);
    return rc;
}

size_t kestrel_model_versions_count(const kestrel_model_versions *l)
{
    return (l && l->magic == MAGIC_VERSIONS) ? l->n : 0;
}

const kestrel_model_version *kestrel_model_versions_at(const kestrel_model_versions *l, size_t i)
{
    return (l && l->magic == MAGIC_VERSIONS && i < l->n) ? &l->v[i] : NULL;
}

int kestrel_model_list(kestrel_buf *out, kestrel_client *c)
{
    kestrel__store *s;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (c->store_root == NULL)
        return kestrel__repo_http_list(c, out);
    if ((rc = open_store(&s, c)) < 0)
        return rc;
    rc = kestrel__store_list(s, out);
    kestrel__store_close(s);
    return rc;
}

/* Check the name; for file:// open the store (*s), for HTTP leave *s NULL. */
static int with_model(kestrel_client *c, const char *name, kestrel__store **s)
{
    *s = NULL;
    if (name == NULL || !kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s'", name ? name : "");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    return c->store_root ? open_store(s, c) : 0;
}

int kestrel_model_alias_set(kestrel_client *c, const char *name, const char *alias, int64_t version)
{
    kestrel__store *s;
    int rc = with_model(c, name, &s);
    if (rc == 0 && s == NULL)
        return (alias && kestrel__alias_valid(alias) && strcmp(alias, "latest"))
                   ? kestrel__repo_http_alias(c, name, alias, version, 0)
                   : kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s' (and 'latest' follows pushes)", alias ? alias : "");
    if (rc == 0) {
        rc = kestrel__store_alias_set(s, name, alias, version);
        kestrel__store_close(s);
    }
    return rc;
}

int kestrel_model_alias_delete(kestrel_client *c, const char *name, const char *alias)
{
    kestrel__store *s;
    int rc = with_model(c, name, &s);
    if (rc == 0 && s == NULL)
        return (alias && kestrel__alias_valid(alias)) ? kestrel__repo_http_alias(c, name, alias, 0, 1)
                                                      : kestrel__error_set(KESTREL_EINVALID, "bad alias");
    if (rc == 0) {
        rc = kestrel__store_alias_delete(s, name, alias);
        kestrel__store_close(s);
    }
    return rc;
}

int kestrel_model_delete(kestrel_client *c, const char *name, int64_t version)
{
    kestrel__store *s;
    int rc = with_model(c, name, &s);
    if (rc == 0 && s == NULL)
        return kestrel__repo_http_delete(c, name, version);
    if (rc == 0) {
        rc = kestrel__store_delete(s, name, version);
        kestrel__store_close(s);
    }
    return rc;
}
