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

static void aliases_drop(Kestrel__V1__Manifest *m)
{
    for (size_t i = 0; i < m->n_aliases; i++)   /* a manifest never stores them: whatever one holds goes */
        free(m->aliases[i]);
    free(m->aliases);
    m->aliases = NULL;
    m->n_aliases = 0;
}

/* m's aliases from map, in the aliases folder's order. */
static int aliases_from(const kestrel__alias_map *map, Kestrel__V1__Manifest *m)
{
    size_t k = 0;
    aliases_drop(m);
    for (size_t i = 0; i < map->n; i++)
        k += map->version[i] == m->version;
    if (k == 0)
        return 0;
    if ((m->aliases = calloc(k, sizeof(char *))) == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < map->n; i++)
        if (map->version[i] == m->version) {
            if ((m->aliases[m->n_aliases] = kestrel__strdup(map->alias[i])) == NULL)
                return kestrel__error_oom();
            m->n_aliases++;
        }
    return 0;
}

void kestrel__alias_map_free(kestrel__alias_map *map)
{
    for (size_t i = 0; i < map->n; i++)
        free(map->alias[i]);
    free(map->alias);
    free(map->version);
    memset(map, 0, sizeof(*map));
}

/* Each entry of name's aliases folder that is an alias (not a temp), handed to each; its count. */
static size_t alias_walk(kestrel__store *s, const char *name, int (*each)(void *, const char *), void *ctx)
{
    char dir[PATH_MAX];
    DIR *d;
    struct dirent *e;
    size_t n = 0;
    snprintf(dir, sizeof(dir), "%s/models/%s/aliases", kestrel__store_root(s), name);
    if ((d = opendir(dir)) == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && !strstr(e->d_name, ".tmp.") && (each == NULL || each(ctx, e->d_name) == 0))
            n++;
    closedir(d);
    return n;
}

size_t kestrel__store_alias_count(kestrel__store *s, const char *name)
{
    return alias_walk(s, name, NULL, NULL);
}

typedef struct {
    kestrel__store *s;
    const char *name;
    kestrel__alias_map *map;
    size_t cap;
    int rc;
} map_fill;

static int map_one(void *ctx, const char *alias)
{
    map_fill *f = ctx;
    int64_t v;
    if (f->rc < 0 || kestrel__store_alias_get(f->s, f->name, alias, &v) < 0)
        return -1;   /* gone meanwhile, or unreadable: left out */
    if (f->map->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        char **a = realloc(f->map->alias, cap * sizeof(*a));
        int64_t *vs = a ? realloc(f->map->version, cap * sizeof(*vs)) : NULL;
        if (a)
            f->map->alias = a;
        if (vs)
            f->map->version = vs;
        if (a == NULL || vs == NULL)
            return f->rc = kestrel__error_oom();
        f->cap = cap;
    }
    if ((f->map->alias[f->map->n] = kestrel__strdup(alias)) == NULL)
        return f->rc = kestrel__error_oom();
    f->map->version[f->map->n++] = v;
    return 0;
}

int kestrel__store_alias_map(kestrel__store *s, const char *name, kestrel__alias_map *out)
{
    map_fill f = { s, name, out, 0, 0 };
    memset(out, 0, sizeof(*out));
    alias_walk(s, name, map_one, &f);
    kestrel_error_clear();
    if (f.rc < 0)
        kestrel__alias_map_free(out);
    return f.rc;
}

int kestrel__store_aliases(kestrel__store *s, Kestrel__V1__Manifest *m)
{
    kestrel__alias_map map;   /* every alias is read to find m's: the same reads as for all of them */
    int rc = kestrel__store_alias_map(s, m->name, &map);
    if (rc == 0)
        rc = aliases_from(&map, m);
    kestrel__alias_map_free(&map);
    return rc;
}

/* kestrel__store_decorate but its aliases (the caller's). */
static int decorate_counts(Kestrel__V1__Manifest *m)
{
    if (m->n_files || m->n_chunks) {   /* a whole manifest: its lists count; a listing keeps its counts */
        m->file_count = (int64_t)m->n_files;
        m->chunk_count = (int64_t)m->n_chunks;
    }
    if (!m->metadata_json[0]) {
        if (m->metadata_json != protobuf_c_empty_string)
            free(m->metadata_json);
        if ((m->metadata_json = kestrel__strdup("{}")) == NULL) {
            m->metadata_json = (char *)protobuf_c_empty_string;
            return kestrel__error_oom();
        }
    }
    return 0;
}

int kestrel__store_decorate(kestrel__store *s, Kestrel__V1__Manifest *m)
{
    int rc = decorate_counts(m);
    return rc < 0 ? rc : kestrel__store_aliases(s, m);
}

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
        (rc = map ? decorate_counts(m) : kestrel__store_decorate(s, m)) < 0 || (map && (rc = aliases_from(map, m)) < 0)) {
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

/* A model exists once a version of it committed: a kill during its first commit leaves only a
 * versions folder (and a temp file), which is no model. */
static int has_version(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name), k = strspn(e->d_name, "0123456789");
        found = k > 0 && n == k + 5 && !strcmp(e->d_name + k, ".json");
    }
    if (d)
        closedir(d);
    return found;
}

int kestrel__store_model_exists(kestrel__store *s, const char *name)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/models/%s/versions", kestrel__store_root(s), name);
    return has_version(dir);
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
            if (has_version(path))
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
