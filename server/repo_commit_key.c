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
 * A commit whose key another commit is still making (a proxy that timed out and sent it again) is
 * answered 503 "unavailable", which the client sends again a while: it then finds the version made.
 * An alias is set again only where it is missing or points at an older version (never moved back).
 *
 * Who may: whoever may commit to the model (route.c); a job's token may name a new alias, never move
 * one, here as in a first commit. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "api.h"
#include "catalog.h"
#include "repo.h"
#include "store.h"

/* A key: 32 lowercase hex digits as a push picks them, up to 64 (the stored form, in a manifest read
 * back and sent again as it came: a key of its own, which matches nothing earlier). */
#define KEY_MIN 32
#define KEY_MAX 64

/* The keys (stored form) of the commits being made now. A commit runs deferred or on an HTTP
 * thread (api.h), so no more than MAKING run at once and a key always finds room; were it ever full,
 * a commit would be answered 503 "unavailable" (sent again shortly), not made with its key unheld
 * (two commits of one key at once could then both be made). */
#define MAKING (KD_DEFER_MAX + KD_HTTP_THREADS_MAX)
static pthread_mutex_t making_mu = PTHREAD_MUTEX_INITIALIZER;
static char making[MAKING][KESTREL__HEX_LEN + 1];

/* 1: hex held for this commit; 0: no room; -1: another commit is making it. */
static int hold(const char *hex)
{
    int rc = 0, free_slot = -1;
    pthread_mutex_lock(&making_mu);
    for (int i = 0; i < MAKING && rc == 0; i++) {
        if (!strcmp(making[i], hex))
            rc = -1;
        else if (!making[i][0] && free_slot < 0)
            free_slot = i;
    }
    if (rc == 0 && free_slot >= 0) {
        memcpy(making[free_slot], hex, sizeof(making[free_slot]));
        rc = 1;
    }
    pthread_mutex_unlock(&making_mu);
    return rc;
}

void kd_commit_key_release(const char *hex)
{
    pthread_mutex_lock(&making_mu);
    for (int i = 0; i < MAKING; i++)
        if (!strcmp(making[i], hex))
            making[i][0] = '\0';
    pthread_mutex_unlock(&making_mu);
}

static int is_key(const char *s)
{
    size_t n = strspn(s, "0123456789abcdef");
    return n >= KEY_MIN && n <= KEY_MAX && s[n] == '\0';
}

/* 1: a match (*made), 0: none (in->commit_key now the stored form, held by this commit: *held),
 * 2: another commit is making it, 3: no room to hold it, < 0: refused (msg). */
static int find(kd_req *r, const char *name, Kestrel__V1__Manifest *in, int64_t *made, int *held, char *msg, size_t n)
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
    if ((rc = hold(hex)) <= 0)
        return rc < 0 ? 2 : 3;
    if (!kestrel__store_find_commit(r->e->store, name, hex, &l)) {
        *held = 1;
        return 0;
    }
    kd_commit_key_release(hex);
    /* the same push: its size, and its digest where it gave one (a key used again for other bytes is
     * a client's fault; that commit is made as it came) */
    v = l->version;
    rc = l->size == in->size && (!in->sha256[0] || !strcmp(l->sha256, in->sha256));
    kestrel__manifest_free(l);
    if (!rc)
        return 0;
    /* the alias as the first would have set it, unless it was moved on since (never back) */
    if (in->alias[0] && (kestrel__store_alias_get(r->e->store, name, in->alias, &had) < 0 || had < v)) {
        kestrel_error_clear();
        if (r->who.job_id && had) {
            snprintf(msg, n, "a job token cannot move the existing alias %s@%s", name, in->alias);
            return KESTREL_EAUTH;
        }
        if ((rc = kestrel__store_alias_forward(r->e->store, name, in->alias, v)) < 0)
            return rc;
    }
    if (r->who.job_id && kd_catalog_lineage_add(r->e->cat, r->who.job_id, name, v) < 0)   /* where the first */
        kestrel_error_clear();                                                            /* died before it */
    *made = v;
    return 1;
}

int kd_commit_again(kd_req *r, const char *name, Kestrel__V1__Manifest *in, int *held, enum MHD_Result *reply)
{
    Kestrel__V1__Manifest *l = NULL;
    char msg[300];
    int64_t made = 0;
    int rc;
    *held = 0;
    if (!in->commit_key[0] || (rc = find(r, name, in, &made, held, msg, sizeof(msg))) == 0)
        return 0;
    if (rc == 2)   /* "unavailable": a client sends it again shortly, then finds the version made */
        *reply = kd_reply_error(r, 503, "unavailable", "another request with this commit's key is still making its "
                                "version: send it again shortly");
    else if (rc == 3)
        *reply = kd_reply_error(r, 503, "unavailable", "too many commits are being made at once: send it again shortly");
    else if (rc == KESTREL_EINVALID)
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
