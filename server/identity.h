/* server/identity.h - the Unix identity a Kestrel user's jobs run under.
 *
 * Policy (kestreld --help and the README say the same):
 *  - kestreld runs as root: every job of Kestrel user U runs as
 *      1. the Unix account named U, when it exists and is a regular account (uid >= 1000,
 *         not nobody), as Slurm would run it; otherwise
 *      2. the account "kestrel-U" that kestreld creates once (useradd --system, its own group,
 *         no home, no login shell); a name Unix does not accept becomes "kestrel-x" + the first
 *         12 hex digits of SHA-256(U).
 *    with its primary group, no supplementary groups, HOME set to the job's own directory.
 *    Root (uid 0) is never chosen.
 *  - kestreld runs as another user: jobs run as that user (single-tenant: kestreld warns). */
#ifndef KD_IDENTITY_H
#define KD_IDENTITY_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    int isolated;           /* 1: switch to uid/gid before exec (kestreld is root) */
    uid_t uid;
    gid_t gid;
    char name[64];          /* the Unix account */
} kd_ident;

/* 1 when kestreld can give jobs their own identities (it runs as root). */
int kd_ident_available(void);
/* The identity for Kestrel user `user` (created when missing; cached, thread-safe).
 * KESTREL_EAUTH when none may be used, with the reason. */
int kd_ident_resolve(const char *user, kd_ident *out);
/* Give path (and, with recursive, all below it, links not followed) to the identity. No-op when
 * not isolated. */
int kd_ident_chown(const kd_ident *id, const char *path, int recursive);
/* Remove path (inside dir) as the identity (rm -rf): root never walks a tree a job controls; as
 * root only while dir is still root's (a data dir of an earlier kestreld). Missing: nothing to do. */
int kd_ident_rm_tree(const kd_ident *id, const char *dir, const char *path);
/* Remove everything inside dir (its HOME, a job's dir), as the identity; dir itself stays. */
int kd_ident_empty(const kd_ident *id, const char *dir);
/* Give dir and the paths inside it (each made already) to the identity: recursively only while dir
 * is still root's (a data dir of an earlier kestreld), else just those entries. */
int kd_ident_adopt(const kd_ident *id, const char *dir, const char *const *inside, size_t n);
/* umask 077; DATA and DATA/jobs 0711 with identities (0700 without), the catalog, its WAL and the
 * admin token 0600, the repository 0700; warns when kestreld is single-tenant (not root). */
int kd_ident_secure_data_dir(const char *data_dir);

#endif
