/* server/repo_fsck.c - damaged chunks: found by a full check (admin fsck) or reported by a pull
 * that received one, re-hashed here, and quarantined when the stored bytes are wrong, so that
 * the next push of the same data stores them again and every version using them heals. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "api.h"
#include "repo.h"
#include "store.h"

static int add_str(char ***arr, size_t *n, size_t *cap, const char *s)
{
    if (kestrel__array_grow((char **)arr, cap, *n + 1, sizeof(char *)) < 0 || ((*arr)[*n] = strdup(s)) == NULL)
        return kestrel__error_oom();
    (*n)++;
    return 0;
}

/* name@version of every version that names a chunk the store lacks. */
static int damaged_versions(kestrel__store *s, Kestrel__V1__FsckResult *res)
{
    kestrel_buf names = KESTREL_BUF_INIT;
    size_t cap = 0;
    int rc = kestrel__store_list(s, &names);
    for (char *save = NULL, *n = rc == 0 && names.ptr ? strtok_r(names.ptr, "\n", &save) : NULL; n;
         n = strtok_r(NULL, "\n", &save)) {
        int64_t *vs = NULL;
        size_t nv = 0;
        if (kestrel__store_versions(s, n, &vs, &nv) < 0)
            continue;
        for (size_t i = 0; i < nv; i++) {
            Kestrel__V1__Manifest *m = NULL;
            struct timespec read_at;
            int missing = 0;
            if (kestrel__store_json_ctime(s, n, vs[i], &read_at) < 0 || kestrel__store_manifest_json(s, n, vs[i], &m) < 0)
                continue;
            if (kestrel__store_pb_write(s, n, m, &read_at) < 0)   /* N.pb made anew from the truth (a hand-edited N.json) */
                kestrel_error_clear();
            for (size_t k = 0; k < m->n_chunks && !missing; k++)
                missing = !kestrel__store_has_chunk(s, m->chunks[k]->digest);
            kestrel__manifest_free(m);
            if (missing) {
                char ref[400];
                snprintf(ref, sizeof(ref), "%s@%lld", n, (long long)vs[i]);
                if ((rc = add_str(&res->damaged_versions, &res->n_damaged_versions, &cap, ref)) < 0)
                    break;
            }
        }
        free(vs);
    }
    kestrel_buf_dispose(&names);
    return rc;
}

static void result_free(Kestrel__V1__FsckResult *res)
{
    for (size_t i = 0; i < res->n_quarantined; i++)
        free(res->quarantined[i]);
    for (size_t i = 0; i < res->n_damaged_versions; i++)
        free(res->damaged_versions[i]);
    free(res->quarantined);
    free(res->damaged_versions);
}

/* POST /api/v1/admin/fsck (admin) */
enum MHD_Result kd_route_fsck(kd_req *r)
{
    Kestrel__V1__FsckResult res = KESTREL__V1__FSCK_RESULT__INIT;
    char dir[4200];
    size_t cap = 0;
    int64_t t0 = kestrel__now_ms();
    enum MHD_Result reply;
    DIR *top;
    struct dirent *a;
    int rc = 0;
    if (strcmp(r->method, "POST"))
        return kd_reply_error(r, 405, "method_not_allowed", "use POST on /api/v1/admin/fsck");
    if (!r->who.is_admin)
        return kd_reply_error(r, 403, "permission_denied", "only an admin can check the repository");
    snprintf(dir, sizeof(dir), "%s/chunks", kd_store_root(r->e));
    if ((top = opendir(dir)) == NULL)
        return kd_reply_failure(r, kestrel__error_set(KESTREL_EIO, "cannot read %s", dir));
    while (rc >= 0 && (a = readdir(top)) != NULL) {
        char sub[4300];
        DIR *d;
        struct dirent *b;
        if (strlen(a->d_name) != 2)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, a->d_name);
        if ((d = opendir(sub)) == NULL)
            continue;
        while (rc >= 0 && (b = readdir(d)) != NULL) {
            char hex[KESTREL__HEX_LEN + 8];
            int bad;
            snprintf(hex, sizeof(hex), "%s%s", a->d_name, b->d_name);
            if (!kestrel__is_sha256_hex(hex))
                continue;   /* ".", "..", temp files of writers */
            res.chunks_checked++;
            if ((bad = kestrel__store_check_chunk(r->e->store, hex)) < 0)
                rc = bad;
            else if (bad) {
                res.chunks_damaged++;
                rc = add_str(&res.quarantined, &res.n_quarantined, &cap, hex);
                fprintf(stderr, "kestreld: fsck: chunk %.12s is damaged: quarantined\n", hex);
            }
        }
        closedir(d);
    }
    closedir(top);
    if (rc >= 0)
        rc = damaged_versions(r->e->store, &res);
    res.duration_ms = kestrel__now_ms() - t0;
    reply = rc < 0 ? kd_reply_failure(r, rc) : kd_reply_msg(r, 200, &res.base);
    result_free(&res);
    return reply;
}

/* POST /api/v1/chunks/{sha256}/verify: any user; it can only move aside bytes that are wrong. */
enum MHD_Result kd_route_chunk_verify(kd_req *r, const char *hex)
{
    Kestrel__V1__FsckResult res = KESTREL__V1__FSCK_RESULT__INIT;
    char *q[1];
    int bad;
    if (!kestrel__is_sha256_hex(hex))
        return kd_reply_error(r, 400, "invalid_argument", "a chunk is named by 64 lowercase hex digits");
    if ((bad = kestrel__store_check_chunk(r->e->store, hex)) < 0)
        return kd_reply_failure(r, bad);
    res.chunks_checked = 1;
    if (bad) {
        fprintf(stderr, "kestreld: chunk %.12s reported damaged and is: quarantined\n", hex);
        q[0] = (char *)hex;
        res.quarantined = q;
        res.n_quarantined = 1;
        res.chunks_damaged = 1;
    }
    return kd_reply_msg(r, 200, &res.base);
}
