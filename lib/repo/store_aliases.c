/* lib/repo/store_aliases.c - what points at a model's versions: its aliases folder read (store.h). */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int kestrel__store_aliases_from(const kestrel__alias_map *map, Kestrel__V1__Manifest *m)
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
        rc = kestrel__store_aliases_from(&map, m);
    kestrel__alias_map_free(&map);
    return rc;
}

int kestrel__store_decorate_counts(Kestrel__V1__Manifest *m)
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
    int rc = kestrel__store_decorate_counts(m);
    return rc < 0 ? rc : kestrel__store_aliases(s, m);
}
