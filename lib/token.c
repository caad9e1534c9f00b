/* lib/token.c - tokens (create, list, revoke), users' teams, and the admin's backup. */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "options.h"

struct kestrel_token_list {
    uint32_t magic;
    Kestrel__V1__TokenList *pb;
    kestrel_token_info *items;
};

int kestrel_token_create(kestrel_buf *token_out, int64_t *id_out, kestrel_client *c, const kestrel_token_options *o)
{
    Kestrel__V1__TokenRequest req = KESTREL__V1__TOKEN_REQUEST__INIT;
    kestrel__request r = { "POST", "/api/v1/tokens", &req.base, &kestrel__v1__token_response__descriptor, 0, 0 };
    kestrel_token_options opts;
    ProtobufCMessage *m;
    int rc;
    if (token_out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "token_out is NULL");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__token_opts_load(&opts, o)) < 0)
        return rc;
    if (opts.expires_s < 0)
        return kestrel__error_set(KESTREL_EINVALID, "expires_s must be >= 0 (0: never)");
    req.user = (char *)(opts.user ? opts.user : "");
    req.team = (char *)(opts.team ? opts.team : "");
    req.scope = (char *)(opts.scope ? opts.scope : "");
    req.name = (char *)(opts.name ? opts.name : "");
    req.expires_s = opts.expires_s;
    if (c->store_root)
        return kestrel__error_set(KESTREL_EINVALID, "tokens need a kestreld (http:// or https:// URL)");
    if ((rc = kestrel__http_call(&m, c, &r)) < 0)
        return rc;
    rc = kestrel__buf_puts(token_out, ((Kestrel__V1__TokenResponse *)m)->token);
    if (id_out)
        *id_out = ((Kestrel__V1__TokenResponse *)m)->id;
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int kestrel_token_list_get(kestrel_token_list **out, kestrel_client *c, const char *user)
{
    kestrel_buf path = KESTREL_BUF_INIT;
    kestrel__request r = { "GET", NULL, NULL, &kestrel__v1__token_list__descriptor, 1, 0 };
    kestrel_token_list *l;
    ProtobufCMessage *m;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__buf_puts(&path, "/api/v1/tokens")) < 0 ||
        (user && *user && (rc = kestrel__query_add(&path, "user", user)) < 0)) {
        kestrel_buf_dispose(&path);
        return rc;
    }
    r.path = path.ptr;
    rc = kestrel__http_call(&m, c, &r);
    kestrel_buf_dispose(&path);
    if (rc < 0)
        return rc;
    if ((l = calloc(1, sizeof(*l))) == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_oom();
    }
    l->magic = KESTREL__MAGIC_TOKENS;
    l->pb = (Kestrel__V1__TokenList *)m;
    if ((l->items = calloc(l->pb->n_tokens + 1, sizeof(*l->items))) == NULL) {
        kestrel_token_list_free(l);
        return kestrel__error_oom();
    }
    for (size_t i = 0; i < l->pb->n_tokens; i++) {
        const Kestrel__V1__TokenInfo *t = l->pb->tokens[i];
        l->items[i] = (kestrel_token_info){ t->id, t->user, t->scope, t->name, t->created_ms, t->expires_ms,
                                            t->revoked_ms, t->hint };
    }
    *out = l;
    return 0;
}

size_t kestrel_token_list_count(const kestrel_token_list *l)
{
    return l && l->magic == KESTREL__MAGIC_TOKENS ? l->pb->n_tokens : 0;
}

const kestrel_token_info *kestrel_token_list_at(const kestrel_token_list *l, size_t i)
{
    return i < kestrel_token_list_count(l) ? &l->items[i] : NULL;
}

void kestrel_token_list_free(kestrel_token_list *l)
{
    if (l == NULL || l->magic != KESTREL__MAGIC_TOKENS)
        return;
    l->magic = KESTREL__MAGIC_DEAD;
    free(l->items);
    protobuf_c_message_free_unpacked(&l->pb->base, NULL);
    free(l);
}

int kestrel_token_revoke(kestrel_client *c, int64_t id)
{
    char path[64];
    kestrel__request r = { "DELETE", path, NULL, NULL, 1, 0 };
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (id <= 0)
        return kestrel__error_set(KESTREL_EINVALID, "token id must be positive");
    snprintf(path, sizeof(path), "/api/v1/tokens/%" PRId64, id);
    return kestrel__http_call(NULL, c, &r);
}

int kestrel_user_set_team(kestrel_client *c, const char *user, const char *team)
{
    Kestrel__V1__User u = KESTREL__V1__USER__INIT;
    kestrel_buf path = KESTREL_BUF_INIT;
    kestrel__request r = { "PUT", NULL, &u.base, NULL, 1, 0 };
    char *esc;
    int rc;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (user == NULL || !*user)
        return kestrel__error_set(KESTREL_EINVALID, "user is empty");
    u.name = (char *)user;
    u.team = (char *)(team ? team : "");
    if ((esc = curl_easy_escape(NULL, user, 0)) == NULL)
        return kestrel__error_oom();
    rc = kestrel__buf_printf(&path, "/api/v1/users/%s", esc);
    curl_free(esc);
    r.path = path.ptr;
    if (rc == 0)
        rc = kestrel__http_call(NULL, c, &r);
    kestrel_buf_dispose(&path);
    return rc;
}

int kestrel_admin_backup(kestrel_client *c, const char *dir, int64_t *files_out, int64_t *bytes_out)
{
    Kestrel__V1__BackupRequest req = KESTREL__V1__BACKUP_REQUEST__INIT;
    kestrel__request r = { "POST", "/api/v1/admin/backup", &req.base, &kestrel__v1__backup_result__descriptor, 0,
                           3600000 };
    ProtobufCMessage *m;
    int rc;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (dir == NULL || dir[0] != '/')
        return kestrel__error_set(KESTREL_EINVALID, "the backup dir must be an absolute path on the server's host");
    req.dir = (char *)dir;
    if ((rc = kestrel__http_call(&m, c, &r)) < 0)
        return rc;
    if (files_out)
        *files_out = ((Kestrel__V1__BackupResult *)m)->files_linked + ((Kestrel__V1__BackupResult *)m)->files_copied;
    if (bytes_out)
        *bytes_out = ((Kestrel__V1__BackupResult *)m)->bytes;
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

int kestrel_admin_fsck(kestrel_buf *damaged_out, int64_t *checked_out, int64_t *bad_out, kestrel_client *c)
{
    kestrel__request r = { "POST", "/api/v1/admin/fsck", NULL, &kestrel__v1__fsck_result__descriptor, 0, 3600000 };
    Kestrel__V1__FsckResult *res;
    ProtobufCMessage *m;
    int rc;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__http_call(&m, c, &r)) < 0)
        return rc;
    res = (Kestrel__V1__FsckResult *)m;
    for (size_t i = 0; damaged_out && rc == 0 && i < res->n_damaged_versions; i++)
        rc = kestrel__buf_printf(damaged_out, "%s\n", res->damaged_versions[i]);
    if (checked_out)
        *checked_out = res->chunks_checked;
    if (bad_out)
        *bad_out = res->chunks_damaged;
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}
