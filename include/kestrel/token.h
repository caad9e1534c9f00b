/* kestrel/token.h - bearer tokens (create, list, revoke) and users' teams. */
#ifndef KESTREL_TOKEN_H
#define KESTREL_TOKEN_H

#include "common.h"
#include "buffer.h"
#include "client.h"

KESTREL_BEGIN_DECL

/**
 * What a new token is for. Initialise with KESTREL_TOKEN_OPTIONS_INIT; zero/NULL means default.
 *
 * Who may: any user creates read or write tokens for itself; an admin creates tokens for any
 * user (creating the user, in `team`, when it does not exist) and admin tokens for admins.
 */
typedef struct kestrel_token_options {
    unsigned int version;       /**< KESTREL_TOKEN_OPTIONS_VERSION */
    const char *user;           /**< whose token; NULL: the caller's */
    const char *team;           /**< the team of a user created now (an existing user's team is kept) */
    int64_t expires_s;          /**< lifetime in seconds; 0: never expires */
    const char *scope;          /**< "read" (GET only: inference, CI), "write" (NULL), "admin" */
    const char *name;           /**< what it is for, e.g. "ci" (shown by kestrel_token_list) */
} kestrel_token_options;

#define KESTREL_TOKEN_OPTIONS_VERSION 1
#define KESTREL_TOKEN_OPTIONS_INIT { KESTREL_TOKEN_OPTIONS_VERSION }

/** Initialise opts to the defaults of the given version. Returns 0 or KESTREL_EMISUSE. */
KESTREL_API int kestrel_token_options_init(kestrel_token_options *opts, unsigned int version);

/**
 * Create a token. token_out receives it (shown this once: the server keeps only its hash);
 * id_out (may be NULL) its id, for kestrel_token_revoke().
 */
KESTREL_API int kestrel_token_create(kestrel_buf *token_out, int64_t *id_out, kestrel_client *client,
                                     const kestrel_token_options *opts);

/**
 * A token as the server lists it (never the token itself). Read through the pointer only: it
 * belongs to its list, and later versions may append fields.
 */
typedef struct kestrel_token_info {
    int64_t id;
    const char *user;
    const char *scope;          /**< "read", "write", "admin" */
    const char *name;
    int64_t created_ms;
    int64_t expires_ms;         /**< 0: never */
    int64_t revoked_ms;         /**< 0: live */
    const char *hint;           /**< the token's last 4 characters */
} kestrel_token_info;

/** Tokens. Opaque. */
typedef struct kestrel_token_list kestrel_token_list;

/** Your tokens (an admin: everyone's, or user's when user is not NULL). *out is owned. */
KESTREL_API int kestrel_token_list_get(kestrel_token_list **out, kestrel_client *client, const char *user);
KESTREL_API size_t kestrel_token_list_count(const kestrel_token_list *list);
/** Token i (borrowed from list), or NULL. */
KESTREL_API const kestrel_token_info *kestrel_token_list_at(const kestrel_token_list *list, size_t i);
KESTREL_API void kestrel_token_list_free(kestrel_token_list *list);

/** Revoke token id (yours; an admin: anyone's): from now on it gets 401. KESTREL_ENOTFOUND when none. */
KESTREL_API int kestrel_token_revoke(kestrel_client *client, int64_t id);

/** Move user into team ("" : none). Admins only; the one way a user's team changes. */
KESTREL_API int kestrel_user_set_team(kestrel_client *client, const char *user, const char *team);

/**
 * Admins: a consistent online copy of the server's catalog and repository into dir, a new
 * absolute path on the server's host (hard links where possible). `kestreld --data-dir dir` starts
 * on it. files_out and bytes_out (may be NULL): the repository files and bytes it holds.
 */
KESTREL_API int kestrel_admin_backup(kestrel_client *client, const char *dir, int64_t *files_out, int64_t *bytes_out);

/**
 * Admins: re-hash every chunk the server stores; damaged ones are quarantined (the next push of
 * that data heals the versions using them). damaged_out (may be NULL) is filled with the
 * name@version of each version that lacks a chunk, one a line; the counts (may be NULL) too.
 */
KESTREL_API int kestrel_admin_fsck(kestrel_buf *damaged_out, int64_t *checked_out, int64_t *bad_out,
                                   kestrel_client *client);

KESTREL_END_DECL

#endif
