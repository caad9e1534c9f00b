/* lib/store_gc.c - reclaiming chunks no version needs, safely beside concurrent pushes.
 *
 * Mark: every chunk named by a committed manifest. Sweep: a chunk that is not marked is removed
 * only if it is older than the grace period. A push relies on a chunk either because it wrote it
 * (its mtime is fresh) or because the store told it the chunk was there (kestrel__store_has_chunk
 * refreshes the mtime), so nothing a running push depends on is ever old enough to go; and a
 * commit checks that every chunk exists, so even a push slower than the grace period fails
 * cleanly instead of committing a version with a hole. Temp files left by a killed writer go
 * after the same grace period. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "store.h"

typedef struct {
    char (*hex)[KESTREL__HEX_LEN + 1];
    size_t n, cap;
    int rc;
} mark_set;

/* nftw has no payload pointer: one collection at a time per process is enforced by this lock. */
static mark_set *g_marks;
static kestrel__store_gc_stats *g_stats;
static time_t g_cutoff;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static int add_mark(mark_set *m, const char *hex)
{
    int rc;
    if (strlen(hex) != KESTREL__HEX_LEN)
        return 0;
    if ((rc = kestrel__array_grow(&m->hex, &m->cap, m->n + 1, sizeof(*m->hex))) < 0)
        return rc;
    memcpy(m->hex[m->n++], hex, KESTREL__HEX_LEN + 1);
    return 0;
}

static int mark_manifest(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    const char *base = path + ftw->base, *dot = strrchr(base, '.');
    FILE *f;
    char *text;
    cJSON *doc, *chunk;
    (void)st;
    if (type != FTW_F || dot == NULL || strcmp(dot, ".json") || ftw->base < 10 ||
        strncmp(path + ftw->base - 10, "/versions/", 10))
        return 0;
    if ((f = fopen(path, "rb")) == NULL)
        return 0;   /* deleted meanwhile */
    text = malloc((size_t)st->st_size + 1);
    if (text == NULL || fread(text, 1, (size_t)st->st_size, f) != (size_t)st->st_size) {
        free(text);
        fclose(f);
        g_marks->rc = kestrel__error_set(KESTREL_EIO, "cannot read %s", path);
        return 1;
    }
    fclose(f);
    text[st->st_size] = '\0';
    doc = cJSON_Parse(text);
    free(text);
    if (doc == NULL) {   /* a manifest we cannot read: collect nothing rather than lose its chunks */
        g_marks->rc = kestrel__error_set(KESTREL_EIO, "damaged manifest %s: collection stopped", path);
        return 1;
    }
    cJSON_ArrayForEach(chunk, cJSON_GetObjectItem(doc, "chunks"))
        if (cJSON_IsString(cJSON_GetArrayItem(chunk, 0)) &&
            (g_marks->rc = add_mark(g_marks, cJSON_GetArrayItem(chunk, 0)->valuestring)) < 0)
            break;
    cJSON_Delete(doc);
    return g_marks->rc < 0;
}

static int hex_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

static int sweep_chunk(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    char hex[KESTREL__HEX_LEN + 8];
    const char *base = path + ftw->base;
    int temp = strstr(base, ".tmp.") != NULL;
    if (type != FTW_F || ftw->level != 2 || st->st_mtime > g_cutoff)
        return 0;
    if (!temp) {
        if (strlen(base) != KESTREL__HEX_LEN - 2 || ftw->base < 3)
            return 0;   /* not ours */
        snprintf(hex, sizeof(hex), "%.2s%s", path + ftw->base - 3, base);
        if (bsearch(hex, g_marks->hex, g_marks->n, sizeof(*g_marks->hex), hex_cmp))
            return 0;
    }
    if (unlink(path) == 0) {
        g_stats->chunks_removed += !temp;
        g_stats->temps_removed += temp;
        g_stats->bytes_freed += st->st_size;
    }
    return 0;
}

int kestrel__store_gc(kestrel__store *s, int64_t grace_s, kestrel__store_gc_stats *stats)
{
    char path[PATH_MAX];
    mark_set marks = { NULL, 0, 0, 0 };
    kestrel__store_gc_stats local = { 0, 0, 0, 0 };
    int rc = 0;
    pthread_mutex_lock(&g_lock);
    g_marks = &marks;
    g_stats = &local;
    /* the cutoff is taken before marking: a chunk written after it is never swept this round */
    g_cutoff = time(NULL) - (time_t)grace_s;
    snprintf(path, sizeof(path), "%s/models", kestrel__store_root(s));
    if (nftw(path, mark_manifest, 32, FTW_PHYS) < 0 && errno != ENOENT)
        rc = kestrel__error_set(KESTREL_EIO, "cannot walk %s: %s", path, strerror(errno));
    if (rc == 0 && (rc = marks.rc) == 0) {
        local.chunks_live = (int64_t)marks.n;
        if (marks.n > 1)
            qsort(marks.hex, marks.n, sizeof(*marks.hex), hex_cmp);
        snprintf(path, sizeof(path), "%s/chunks", kestrel__store_root(s));
        if (nftw(path, sweep_chunk, 32, FTW_PHYS) < 0 && errno != ENOENT)
            rc = kestrel__error_set(KESTREL_EIO, "cannot walk %s: %s", path, strerror(errno));
    }
    g_marks = NULL;
    g_stats = NULL;
    pthread_mutex_unlock(&g_lock);
    free(marks.hex);
    if (stats)
        *stats = local;
    return rc;
}
