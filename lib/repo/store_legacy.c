/* lib/repo/store_legacy.c - stores before format 2 kept each manifest in a JSON form of their own:
 *   {"chunks": [[HEX, LEN], ...], "files": [[PATH, SIZE, SHA256, MODE, CHUNKS], ...], "name", "size",
 *    "sha256", "created_ms", "metadata": {...}, "version"}
 * Read here (the one reader of that form); kestreld's claim rewrites them once as
 * Kestrel__V1__Manifest's JSON (store_commit.c), and ROOT/format then says 2. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "repo.h"
#include "store.h"

static char *dup_or_empty(const char *s)
{
    return kestrel__strdup(s ? s : "");
}

/* A whole number in [lo, hi], 0 when absent (JSON numbers are doubles: anything else clears *ok). */
static int64_t num(const cJSON *v, double lo, double hi, int *ok)
{
    double d = cJSON_GetNumberValue(v);
    if (v == NULL)
        return 0;
    if (!cJSON_IsNumber(v) || !(d >= lo && d <= hi) || d != (double)(int64_t)d) {
        *ok = 0;
        return 0;
    }
    return (int64_t)d;
}

int kestrel__store_legacy_manifest(const char *json, Kestrel__V1__Manifest **out)
{
    cJSON *doc = cJSON_Parse(json), *e;
    const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(doc, "chunks");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(doc, "files");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(doc, "metadata");
    Kestrel__V1__Manifest *m = kestrel__manifest_new();
    int ok = m && cJSON_IsObject(doc) && cJSON_IsArray(chunks);
    if (ok) {
        m->name = dup_or_empty(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(doc, "name")));
        m->sha256 = dup_or_empty(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(doc, "sha256")));
        m->metadata_json = cJSON_IsObject(meta) ? cJSON_PrintUnformatted(meta) : kestrel__strdup("");
        ok = m->name && m->sha256 && m->metadata_json;
        m->size = num(cJSON_GetObjectItemCaseSensitive(doc, "size"), 0, 9e15, &ok);
        m->created_ms = num(cJSON_GetObjectItemCaseSensitive(doc, "created_ms"), 0, 9e15, &ok);
        m->version = num(cJSON_GetObjectItemCaseSensitive(doc, "version"), 0, 9e15, &ok);
        if (!m->name) m->name = (char *)protobuf_c_empty_string;
        if (!m->sha256) m->sha256 = (char *)protobuf_c_empty_string;
        if (!m->metadata_json) m->metadata_json = (char *)protobuf_c_empty_string;
        m->chunks = calloc((size_t)cJSON_GetArraySize(chunks) + 1, sizeof(*m->chunks));
        ok = ok && m->chunks;
    }
    if (ok)
        cJSON_ArrayForEach(e, chunks) {
            Kestrel__V1__ChunkRef *c = malloc(sizeof(*c));
            const char *hex = cJSON_GetStringValue(cJSON_GetArrayItem(e, 0));
            if (c == NULL || hex == NULL) {
                free(c);
                ok = 0;
                break;
            }
            kestrel__v1__chunk_ref__init(c);
            m->chunks[m->n_chunks++] = c;
            if ((c->digest = kestrel__strdup(hex)) == NULL) {
                c->digest = (char *)protobuf_c_empty_string;
                ok = 0;
                break;
            }
            c->size = num(cJSON_GetArrayItem(e, 1), 1, 4 << 20, &ok);
        }
    if (ok && cJSON_IsArray(files)) {
        ok = (m->files = calloc((size_t)cJSON_GetArraySize(files) + 1, sizeof(*m->files))) != NULL;
        if (ok)
            cJSON_ArrayForEach(e, files) {
                Kestrel__V1__TreeFile *f = malloc(sizeof(*f));
                const char *path = cJSON_GetStringValue(cJSON_GetArrayItem(e, 0));
                const char *sha = cJSON_GetStringValue(cJSON_GetArrayItem(e, 2));
                if (f == NULL || path == NULL || sha == NULL) {
                    free(f);
                    ok = 0;
                    break;
                }
                kestrel__v1__tree_file__init(f);
                m->files[m->n_files++] = f;
                f->path = kestrel__strdup(path);
                f->sha256 = kestrel__strdup(sha);
                if (!f->path || !f->sha256) {
                    if (!f->path) f->path = (char *)protobuf_c_empty_string;
                    if (!f->sha256) f->sha256 = (char *)protobuf_c_empty_string;
                    ok = 0;
                    break;
                }
                f->size = num(cJSON_GetArrayItem(e, 1), 0, 9e15, &ok);
                f->mode = (uint32_t)num(cJSON_GetArrayItem(e, 3), 0, 0777, &ok);
                f->chunks = num(cJSON_GetArrayItem(e, 4), 0, 9e15, &ok);
            }
    }
    cJSON_Delete(doc);
    if (!ok) {
        kestrel__manifest_free(m);
        return kestrel__error_set(KESTREL_EIO, "a manifest is damaged");
    }
    m->file_count = (int64_t)m->n_files;
    *out = m;
    return 0;
}


