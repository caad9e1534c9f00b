/* lib/repo/front.c - the repository's public face (kestrel_model_*): check the arguments, open the
 * client's transport (the store for file://, kestreld for http(s)://), and hand the work to the one
 * push, the one pull or the transport itself. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "options.h"
#include "store.h"
#include "transfer.h"
#include "transport.h"

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

static void progress_init(kestrel__progress *pr, const kestrel_transfer_options *o, int phase)
{
    memset(pr, 0, sizeof(*pr));
    pr->p.version = 1;
    pr->p.phase = phase;
    pr->p.bytes_total = -1;   /* unknown until the push has listed its files, or the pull has the manifest */
    pr->cb = o->progress;
    pr->payload = o->progress_payload;
}

int kestrel__transport_open(kestrel__transport **out, kestrel_client *c)
{
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    return c->store_root ? kestrel__transport_local(out, c->store_root) : kestrel__transport_http(out, c);
}

void kestrel__transport_close(kestrel__transport *t)
{
    if (t)
        t->ops->close(t);
}

/* Check name (and the client); open the transport. */
static int with_model(kestrel__transport **t, kestrel_client *c, const char *name)
{
    *t = NULL;
    if (name == NULL || !kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s': " KESTREL__NAME_RULE,
                                  name ? name : "");
    return kestrel__transport_open(t, c);
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
    kestrel__transport *t = NULL;
    kestrel__progress pr;
    int64_t version = 0;
    int rc;
    if ((rc = load_topts(&o, in)) < 0)
        return rc;
    if (o.alias && (!kestrel__alias_valid(o.alias) || !strcmp(o.alias, "latest")))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s': " KESTREL__ALIAS_RULE ", not 'latest' (it "
                                  "follows pushes)", o.alias);
    if (o.metadata_json && strlen(o.metadata_json) > KESTREL__METADATA_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "metadata of %zu bytes: at most %d (every listing of the model "
                                  "carries it)", strlen(o.metadata_json), KESTREL__METADATA_MAX);
    if (o.metadata_json) {
        cJSON *meta = cJSON_Parse(o.metadata_json);
        int object = cJSON_IsObject(meta);
        cJSON_Delete(meta);
        if (!object)
            return kestrel__error_set(KESTREL_EINVALID, "metadata must be a JSON object");
    }
    if (path == NULL)
        return kestrel__error_set(KESTREL_EINVALID, "path is required");
    if ((rc = with_model(&t, c, name)) < 0)
        return rc;
    progress_init(&pr, &o, KESTREL_PHASE_PUSH);
    rc = kestrel__push(t, name, path, select, nselect, &o, &pr, &version);
    kestrel__transport_close(t);
    if (rc == 0 && version_out)
        *version_out = version;
    return rc;
}

int kestrel_model_pull(kestrel_client *c, const char *ref, const char *dest, const kestrel_transfer_options *in)
{
    kestrel_transfer_options o;
    kestrel__transport *t = NULL;
    kestrel__progress pr;
    char name[256];
    const char *at;
    int rc;
    if ((rc = load_topts(&o, in)) < 0)
        return rc;
    if (ref == NULL || dest == NULL || !dest[0])   /* "": no path (found by a hostile test: it failed at the rename) */
        return kestrel__error_set(KESTREL_EINVALID, "ref and dest are required (dest a path, not \"\")");
    /* ref is checked here, before anything is opened (name and at are not used: the transport's
     * resolve splits ref again) */
    if ((rc = kestrel__ref_split(ref, name, sizeof(name), &at)) < 0 || (rc = kestrel__transport_open(&t, c)) < 0)
        return rc;
    progress_init(&pr, &o, KESTREL_PHASE_PULL);
    rc = kestrel__pull(t, ref, dest, &pr);
    kestrel__transport_close(t);
    return rc;
}

/* ---- versions: the transport's ManifestList as the public list -------------------------------- */

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

static int versions_of(kestrel_model_versions **out, const Kestrel__V1__ManifestList *ml)
{
    kestrel_model_versions *l;
    if ((l = calloc(1, sizeof(*l))) == NULL || (l->v = calloc(ml->n_versions + 1, sizeof(*l->v))) == NULL ||
        (l->strings = calloc(3 * ml->n_versions + 1, sizeof(char *))) == NULL) {
        if (l)
            free(l->v);
        free(l);
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
        o->chunks = v->n_chunks ? (int64_t)v->n_chunks : v->chunk_count;   /* a listing: its count */
        o->sha256 = keep(l, kestrel__strdup(v->sha256));
        kestrel__buf_puts(&aliases, "");
        for (size_t k = 0; k < v->n_aliases; k++)
            kestrel__buf_printf(&aliases, "%s%s", k ? "," : "", v->aliases[k]);
        o->aliases = keep(l, aliases.ptr);
        o->metadata_json = keep(l, kestrel__strdup(v->metadata_json[0] ? v->metadata_json : "{}"));
    }
    *out = l;
    return 0;
}

int kestrel_model_versions_get(kestrel_model_versions **out, kestrel_client *c, const char *name)
{
    kestrel__transport *t;
    Kestrel__V1__ManifestList *ml = NULL;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    if ((rc = with_model(&t, c, name)) < 0)
        return rc;
    if ((rc = t->ops->versions(t, name, NULL, &ml)) == 0) {
        rc = versions_of(out, ml);
        protobuf_c_message_free_unpacked(&ml->base, NULL);
    }
    kestrel__transport_close(t);
    return rc;
}

/* The version of ml that sel (a number, "latest" or an alias) names, or NULL: the transport asked
 * for it alone, but a kestreld before ?version= answers every version. */
static const Kestrel__V1__Manifest *picked(const Kestrel__V1__ManifestList *ml, const char *sel)
{
    const Kestrel__V1__Manifest *pick = NULL;
    int number = *sel >= '0' && *sel <= '9', latest = !strcmp(sel, "latest");
    int64_t want = number ? strtoll(sel, NULL, 10) : 0;
    for (size_t i = 0; i < ml->n_versions; i++) {
        const Kestrel__V1__Manifest *v = ml->versions[i];
        if (number ? v->version == want : latest ? (pick == NULL || v->version > pick->version) : 0)
            pick = v;
        for (size_t k = 0; !number && !latest && k < v->n_aliases; k++)
            if (!strcmp(v->aliases[k], sel))
                pick = v;
    }
    return pick;
}

int kestrel_model_version_get(kestrel_model_versions **out, kestrel_client *c, const char *ref)
{
    kestrel__transport *t;
    Kestrel__V1__ManifestList *ml = NULL;
    Kestrel__V1__Manifest *one;
    char name[256];
    const char *sel;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    if ((rc = kestrel__ref_split(ref, name, sizeof(name), &sel)) < 0 || (rc = with_model(&t, c, name)) < 0)
        return rc;
    if ((rc = t->ops->versions(t, name, sel, &ml)) == 0) {
        Kestrel__V1__ManifestList just = KESTREL__V1__MANIFEST_LIST__INIT;
        if ((one = (Kestrel__V1__Manifest *)picked(ml, sel)) == NULL) {
            rc = kestrel__error_set(KESTREL_ENOTFOUND, "no version %s of %s", sel, name);
        } else {
            just.n_versions = 1;
            just.versions = &one;
            rc = versions_of(out, &just);
        }
        protobuf_c_message_free_unpacked(&ml->base, NULL);
    }
    kestrel__transport_close(t);
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

/* ---- names, aliases, deletion ------------------------------------------------------------------- */

int kestrel_model_list(kestrel_buf *out, kestrel_client *c)
{
    kestrel__transport *t;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    if ((rc = kestrel__transport_open(&t, c)) < 0)
        return rc;
    rc = t->ops->list(t, out);
    kestrel__transport_close(t);
    return rc;
}

int kestrel_model_alias_set(kestrel_client *c, const char *name, const char *alias, int64_t version)
{
    kestrel__transport *t;
    int rc;
    if (!kestrel__alias_valid(alias) || !strcmp(alias, "latest"))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s': " KESTREL__ALIAS_RULE ", not 'latest' (it "
                                  "follows pushes)", alias ? alias : "");
    if ((rc = with_model(&t, c, name)) < 0)
        return rc;
    rc = t->ops->alias_set(t, name, alias, version);
    kestrel__transport_close(t);
    return rc;
}

int kestrel_model_alias_delete(kestrel_client *c, const char *name, const char *alias)
{
    kestrel__transport *t;
    int rc;
    if (!kestrel__alias_valid(alias) || !strcmp(alias, "latest"))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s': " KESTREL__ALIAS_RULE, alias ? alias : "");
    if ((rc = with_model(&t, c, name)) < 0)
        return rc;
    rc = t->ops->alias_delete(t, name, alias);
    kestrel__transport_close(t);
    return rc;
}

int kestrel_model_delete(kestrel_client *c, const char *name, int64_t version)
{
    kestrel__transport *t;
    int rc = with_model(&t, c, name);
    if (rc < 0)
        return rc;
    rc = t->ops->remove(t, name, version);
    kestrel__transport_close(t);
    return rc;
}

int kestrel_repo_gc(kestrel_client *c, int64_t grace_s, kestrel_repo_gc_result *out)
{
    kestrel__transport *t;
    kestrel__store_gc_stats st = { 0, 0, 0, 0 };
    int rc;
    if (out && out->version < 1)   /* a newer caller gets the fields this library knows */
        return kestrel__error_set(KESTREL_EMISUSE, "kestrel_repo_gc: out->version %u (this library knows %u: use "
                                  "KESTREL_REPO_GC_RESULT_INIT)", out->version, KESTREL_REPO_GC_RESULT_VERSION);
    if ((rc = kestrel__transport_open(&t, c)) < 0)
        return rc;
    rc = t->ops->gc(t, grace_s, &st);
    kestrel__transport_close(t);
    if (rc == 0 && out) {
        out->chunks_live = st.chunks_live;
        out->chunks_removed = st.chunks_removed;
        out->temps_removed = st.temps_removed;
        out->bytes_freed = st.bytes_freed;
    }
    return rc;
}
