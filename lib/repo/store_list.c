/* lib/repo/store_list.c - what the store lists: the model names (a folder holding a committed
 * version is a model) and a version as listings show it (store.h). */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "repo.h"
#include "store.h"

static void listing_path(kestrel__store *s, const char *name, int64_t version, char *out, size_t n)
{
    snprintf(out, n, "%s/models/%s/versions/%lld.listing", kestrel__store_root(s), name, (long long)version);
}

void kestrel__store_listing_of(const Kestrel__V1__Manifest *m, Kestrel__V1__Manifest *shown)
{
    *shown = *m;
    shown->chunks = NULL, shown->n_chunks = 0, shown->files = NULL, shown->n_files = 0;
    shown->aliases = NULL, shown->n_aliases = 0, shown->alias = (char *)protobuf_c_empty_string;
    shown->chunk_count = (int64_t)m->n_chunks;
    shown->file_count = (int64_t)m->n_files;
    if (!shown->metadata_json[0])
        shown->metadata_json = (char *)"{}";
}

int kestrel__store_listing_write(kestrel__store *s, const char *name, const Kestrel__V1__Manifest *m)
{
    char path[PATH_MAX];
    Kestrel__V1__Manifest shown;
    kestrel_buf text = KESTREL_BUF_INIT;
    int rc;
    kestrel__store_listing_of(m, &shown);
    listing_path(s, name, m->version, path, sizeof(path));
    if ((rc = kestrel__wire_to_json(&text, &shown.base, 0)) == 0)
        rc = kestrel__write_file_atomic(path, text.ptr, text.size, 0);
    kestrel_buf_dispose(&text);
    return rc;
}

/* versions/N.listing, when there is one that reads as N's; NULL else (an earlier build's version). */
static Kestrel__V1__Manifest *listing_read(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX];
    Kestrel__V1__Manifest *m;
    listing_path(s, name, version, path, sizeof(path));
    if ((m = kestrel__store_sidecar_read(path, KESTREL__CT_JSON)) != NULL &&
        (m->version != version || m->n_chunks || m->n_files)) {   /* not one this store wrote */
        kestrel__manifest_free(m);
        m = NULL;
    }
    return m;
}

int kestrel__store_listing(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out)
{
    return kestrel__store_listing_mapped(s, name, version, NULL, out);
}

int kestrel__store_listing_mapped(kestrel__store *s, const char *name, int64_t version, const kestrel__alias_map *map,
                                  Kestrel__V1__Manifest **out)
{
    Kestrel__V1__Manifest *m = listing_read(s, name, version);
    int rc;
    if (m == NULL) {   /* committed by an earlier build: read whole once, the listing written for next time */
        if ((rc = kestrel__store_manifest(s, name, version, &m)) < 0)
            return rc;
        if (kestrel__store_listing_write(s, name, m) < 0)
            kestrel_error_clear();   /* a store this process may only read */
        m->chunk_count = (int64_t)m->n_chunks;
        for (size_t i = 0; i < m->n_chunks; i++)
            protobuf_c_message_free_unpacked(&m->chunks[i]->base, NULL);
        m->n_chunks = 0;
        m->file_count = (int64_t)m->n_files;
        for (size_t i = 0; i < m->n_files; i++)
            protobuf_c_message_free_unpacked(&m->files[i]->base, NULL);
        m->n_files = 0;
    }
    if ((strcmp(m->name, name) && (rc = kestrel__wire_set_string(&m->name, name)) < 0) ||   /* its folder's */
        (m->commit_key[0] && (rc = kestrel__wire_set_string(&m->commit_key, "")) < 0) ||   /* a commit's own */
        (rc = map ? kestrel__store_decorate_counts(m) : kestrel__store_decorate(s, m)) < 0 ||
        (map && (rc = kestrel__store_aliases_from(map, m)) < 0)) {
        kestrel__manifest_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int kestrel__store_find_commit(kestrel__store *s, const char *name, const char *key, Kestrel__V1__Manifest **out)
{
    int64_t top = kestrel__store_top_version(s, name);
    for (int64_t v = top; v > 0 && v > top - KESTREL__COMMIT_KEYS_SEEN; v--) {
        Kestrel__V1__Manifest *m;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.json", kestrel__store_root(s), name, (long long)v);
        if (access(path, F_OK) != 0)   /* deleted (a delete killed before it removed N.listing) */
            continue;
        m = listing_read(s, name, v);
        if (m == NULL && kestrel__store_listing(s, name, v, &m) == 0) {   /* linked by a commit killed before */
            kestrel__manifest_free(m);                                    /* its listing: written now, with */
            m = listing_read(s, name, v);                                 /* its key (listings show none) */
        }
        if (m == NULL) {   /* deleted */
            kestrel_error_clear();
            continue;
        }
        if (!strcmp(m->commit_key, key)) {
            *out = m;
            return 1;
        }
        kestrel__manifest_free(m);
    }
    return 0;
}

static int list_dir(const char *root, const char *prefix, kestrel_buf *out)
{
    char path[PATH_MAX];
    DIR *d;
    struct dirent *e;
    int rc = 0;
    snprintf(path, sizeof(path), "%s/%s", root, prefix);
    if ((d = opendir(path)) == NULL)
        return 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char sub[PATH_MAX];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s%s%s", prefix, *prefix ? "/" : "", e->d_name);
        if (*prefix && !strcmp(e->d_name, "versions")) {   /* at the top: a model's first segment */
            snprintf(path, sizeof(path), "%s/%s", root, sub);
            if (kestrel__store_has_version(path))
                rc = kestrel__buf_printf(out, "%s\n", prefix);   /* a model: prefix holds its name */
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", root, sub);
        if ((!*prefix || strcmp(e->d_name, "aliases")) && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            rc = list_dir(root, sub, out);
    }
    closedir(d);
    return rc;
}

static int cmp_lines(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int kestrel__store_list(kestrel__store *s, kestrel_buf *out)
{
    char root[PATH_MAX];
    kestrel_buf raw = KESTREL_BUF_INIT;
    char **lines = NULL;
    size_t n = 0, cap = 0;
    int rc;
    snprintf(root, sizeof(root), "%s/models", kestrel__store_root(s));
    rc = list_dir(root, "", &raw);
    for (char *save = NULL, *line = raw.ptr ? strtok_r(raw.ptr, "\n", &save) : NULL; rc == 0 && line;
         line = strtok_r(NULL, "\n", &save))
        if ((rc = kestrel__array_grow(&lines, &cap, n + 1, sizeof(*lines))) == 0)
            lines[n++] = line;
    if (n > 1)
        qsort(lines, n, sizeof(*lines), cmp_lines);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = kestrel__buf_printf(out, "%s\n", lines[i]);
    if (rc == 0 && n == 0)
        rc = kestrel__buf_puts(out, "");
    free(lines);
    kestrel_buf_dispose(&raw);
    return rc;
}
