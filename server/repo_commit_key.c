/* server/repo_commit_key.c - a commit sent again is answered the version it made.
 *
 * Each commit (POST /api/v1/models/NAME/versions) makes a version, so a client may send one again
 * only where it knows the first never arrived. It cannot always know: kestreld may die after it
 * linked the version and before its answer left (the client's curl then finds the connection gone,
 * reconnects, is refused, and the push sends its commit again once kestreld is back: two versions
 * of one push, found by a hostile test), and a proxy in front of kestreld may answer 503 for a commit
 * it forwarded. So a push names its commit with a key it picks at random (Manifest.commit_key, 32
 * lowercase hex digits) and kestreld keeps, in the version itself (linked with it, so never one
 * without the other), SHA-256 of "USER_ID:KEY". A commit by the same user with the same key, of the
 * same size and digest, that finds its key among the model's KESTREL__COMMIT_KEYS_SEEN newest
 * versions makes nothing: it is answered that version, and its alias is set as the first would have.
 * Another user's commit never matches (the user is in the digest), nor does a key read in a listing.
 *
 * Who may: whoever may commit to the model (route.c); a job's token may name a new alias, never move
 * one, here as in a first commit. */
#include <stdio.h>
#include <string.h>
#include "api.h"
#include "repo.h"
#include "store.h"

/* A key: 32 lowercase hex digits as a push picks them, up to 64 (the stored form, in a manifest read
 * back and sent again as it came: a key of its own, which matches nothing earlier). */
#define KEY_MIN 32
#define KEY_MAX 64

static int is_key(const char *s)
{
    size_t n = strspn(s, "0123456789abcdef");
    return n >= KEY_MIN && n <= KEY_MAX && s[n] == '\0';
}

/* 1: a match (*made), 0: none (in->commit_key now the stored form), < 0: refused (msg). */
static int find(kd_req *r, const char *name, Kestrel__V1__Manifest *in, int64_t *made, char *msg, size_t n)
{
    char text[32 + KEY_MAX], hex[KESTREL__HEX_LEN + 1];
    Kestrel__V1__Manifest *l = NULL;
    int64_t v = 0, had = 0;
    int rc;
    if (!is_key(in->commit_key)) {
        snprintf(msg, n, "field 'commit_key': %d to %d lowercase hex digits, or none", KEY_MIN, KEY_MAX);
        return KESTREL_EINVALID;
    }
    snprintf(text, sizeof(text), "%lld:%s", (long long)r->who.user_id, in->commit_key);
    kestrel__sha256_hex(text, strlen(text), hex);
    if ((rc = kestrel__wire_set_string(&in->commit_key, hex)) < 0)
        return rc;
    if (!kestrel__store_find_commit(r->e->store, name, hex, &v) ||
        kestrel__store_listing(r->e->store, name, v, &l) < 0) {
        kestrel_error_clear();
        return 0;
    }
    /* the same push: its size, and its digest where it gave one (a key used again for other bytes is
     * a client's fault; that commit is made as it came) */
    rc = l->size == in->size && (!in->sha256[0] || !strcmp(l->sha256, in->sha256));
    kestrel__manifest_free(l);
    if (!rc)
        return 0;
    if (in->alias[0] && (kestrel__store_alias_get(r->e->store, name, in->alias, &had) < 0 || had != v)) {
        kestrel_error_clear();
        if (r->who.job_id && had) {
            snprintf(msg, n, "a job token cannot move the existing alias %s@%s", name, in->alias);
            return KESTREL_EAUTH;
        }
        if ((rc = kestrel__store_alias_set(r->e->store, name, in->alias, v)) < 0)
            return rc;
    }
    *made = v;
    return 1;
}

int kd_commit_again(kd_req *r, const char *name, Kestrel__V1__Manifest *in, enum MHD_Result *reply)
{
    Kestrel__V1__Manifest *l = NULL;
    char msg[300];
    int64_t made = 0;
    int rc;
    if (!in->commit_key[0] || (rc = find(r, name, in, &made, msg, sizeof(msg))) == 0)
        return 0;
    if (rc == KESTREL_EINVALID)
        *reply = kd_reply_error(r, 400, "invalid_argument", msg);
    else if (rc == KESTREL_EAUTH)
        *reply = kd_reply_error(r, 403, "permission_denied", msg);
    else if (rc < 0 || (rc = kestrel__store_listing(r->e->store, name, made, &l)) < 0)
        *reply = kd_reply_failure(r, rc);
    else {   /* as the first commit answered: the version as a listing shows it */
        *reply = kd_reply_msg(r, 201, &l->base);
        kestrel__manifest_free(l);
    }
    return 1;
}
