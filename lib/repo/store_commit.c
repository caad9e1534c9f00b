/* lib/repo/store_commit.c - what changes a store: a version committed or deleted, an alias set or
 * removed, and kestreld's claim of the store at its start (the repair of "latest", the rewrite of an
 * old store's manifests). Above the rest of the store, which it uses (store.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "repo.h"
#include "store.h"

#define FORMAT "2\n"   /* ROOT/format once every manifest is in the current form */

static int alias_write(kestrel__store *s, const char *name, const char *alias, int64_t version)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], tmp[PATH_MAX + 96], text[32];
    int rc;
    snprintf(dir, sizeof(dir), "%s/models/%s/aliases", kestrel__store_root(s), name);
    if (kestrel__mkdirs(dir, 0755) < 0)
        return kestrel__io_error("cannot create", dir);
    snprintf(path, sizeof(path), "%s/%s", dir, alias);
    snprintf(text, sizeof(text), "%lld\n", (long long)version);
    if ((rc = kestrel__write_temp(path, text, strlen(text), tmp, sizeof(tmp), 1)) < 0)
        return rc;
    if (rename(tmp, path) < 0) {
        rc = kestrel__io_error("cannot set alias", path);
        unlink(tmp);
    }
    return rc;
}

int kestrel__store_claim(kestrel__store *s)
{
    kestrel_buf names = KESTREL_BUF_INIT;
    int rc;
    kestrel__store_own(s);
    /* a writer killed between a commit and the move of "latest": point it at the newest version */
    if (kestrel__store_list(s, &names) == 0 && names.ptr)
        for (char *save = NULL, *n = strtok_r(names.ptr, "\n", &save); n; n = strtok_r(NULL, "\n", &save)) {
            int64_t *vs = NULL, cur = 0;
            size_t k = 0;
            if (kestrel__store_versions(s, n, &vs, &k) == 0 && k &&
                (kestrel__store_alias_get(s, n, "latest", &cur) < 0 || cur != vs[k - 1]))
                alias_write(s, n, "latest", vs[k - 1]);
            free(vs);
        }
    kestrel_buf_dispose(&names);
    if ((rc = kestrel__store_migrate(s)) < 0)   /* once: manifests of format 1 in the new form */
        return rc;
    return kestrel__store_sync(s);
}

int kestrel__store_commit(kestrel__store *s, const char *name, Kestrel__V1__Manifest *m, int64_t *version_out)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], tmp[PATH_MAX + 64];
    char **aliases = m->aliases, *alias = m->alias;
    size_t naliases = m->n_aliases;
    kestrel__temp_fill json = { .msg = &m->base, .json = 1 };
    int64_t next;
    int rc;
    snprintf(dir, sizeof(dir), "%s/models/%s/versions", kestrel__store_root(s), name);
    if (kestrel__mkdirs(dir, 0755) < 0)
        return kestrel__io_error("cannot create", dir);
    if ((rc = kestrel__store_sync(s)) < 0)   /* every chunk durable before the manifest names it */
        return rc;
    next = kestrel__store_top_version(s, name) + 1;   /* a deleted number is never given out again */
    m->aliases = NULL;   /* what points at a version is the aliases folder's, not the manifest's */
    m->n_aliases = 0;
    m->alias = (char *)protobuf_c_empty_string;
    m->file_count = m->chunk_count = 0;   /* listings' counts: a manifest's lists say them */
    for (;; next++) {
        m->version = next;
        snprintf(path, sizeof(path), "%s/%lld.json", dir, (long long)next);
        /* written as it is made: a 50,000-file manifest's text, 13 MB, is never held */
        if ((rc = kestrel__write_temp_fill(path, &json, tmp, sizeof(tmp), 1)) < 0)
            break;
        /* link() fails when the name exists: two writers never share a version number */
        if (link(tmp, path) == 0) {
            char tomb[PATH_MAX + 16];
            unlink(tmp);
            snprintf(tomb, sizeof(tomb), "%s/%lld.deleted", dir, (long long)next);
            if (access(tomb, F_OK) != 0)
                break;
            unlink(path);   /* the number was taken and deleted meanwhile: take the next */
            continue;
        }
        rc = errno;
        unlink(tmp);
        if (rc != EEXIST) {
            errno = rc;
            rc = kestrel__io_error("cannot commit", path);
            break;
        }
        rc = 0;
    }
    if (rc == 0 && kestrel__store_pb_write(s, name, m, NULL) < 0)   /* what N.json says, for reads; best effort */
        kestrel_error_clear();
    m->aliases = aliases;
    m->n_aliases = naliases;
    m->alias = alias;
    if (rc < 0)
        return rc;
    {   /* the new directory entry is durable too */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    if (version_out)
        *version_out = next;
    m->version = next;
    kestrel__store_listing_write(s, name, m);   /* best effort: a listing without it reads the manifest */
    kestrel_error_clear();
    return alias_write(s, name, "latest", next);
}
int kestrel__store_alias_set(kestrel__store *s, const char *name, const char *alias, int64_t version)
{
    char path[PATH_MAX];
    int64_t now = 0;
    int rc;
    if (!kestrel__alias_valid(alias) || !strcmp(alias, "latest"))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s': " KESTREL__ALIAS_RULE ", not 'latest' (it "
                                  "follows pushes)", alias ? alias : "");
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.json", kestrel__store_root(s), name, (long long)version);
    if (access(path, F_OK) != 0)
        return kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name);
    if ((rc = alias_write(s, name, alias, version)) < 0)
        return rc;
    if (access(path, F_OK) != 0) {   /* deleted meanwhile, its aliases collected before this one was
                                      * written (found by a hostile test): the alias goes too */
        if (kestrel__store_alias_get(s, name, alias, &now) == 0 && now == version)   /* unless set again since */
            kestrel__store_alias_delete(s, name, alias);
        return kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name);
    }
    return 0;
}
int kestrel__store_alias_forward(kestrel__store *s, const char *name, const char *alias, int64_t version)
{
    char dir[PATH_MAX];
    int64_t now = 0;
    int fd, rc;
    snprintf(dir, sizeof(dir), "%s/models/%s/versions", kestrel__store_root(s), name);
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return kestrel__io_error("cannot open", dir);
    while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
        ;
    if (kestrel__store_alias_get(s, name, alias, &now) == 0 && now > version)
        rc = 0;   /* a push that made a newer version set it meanwhile: it stays */
    else {
        kestrel_error_clear();
        rc = kestrel__store_alias_set(s, name, alias, version);
    }
    close(fd);   /* and the lock with it */
    return rc;
}
int kestrel__store_alias_delete(kestrel__store *s, const char *name, const char *alias)
{
    char path[PATH_MAX];
    if (!kestrel__alias_valid(alias) || !strcmp(alias, "latest"))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s': " KESTREL__ALIAS_RULE, alias ? alias : "");
    snprintf(path, sizeof(path), "%s/models/%s/aliases/%s", kestrel__store_root(s), name, alias);
    if (unlink(path) < 0)
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "%s has no alias %s", name, alias)
                               : kestrel__io_error("cannot delete", path);
    return 0;
}
int kestrel__store_delete(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX], dir[PATH_MAX];
    kestrel__alias_map aliases;
    int64_t *versions = NULL;
    size_t n = 0;
    int rc = 0, fd;
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.json", kestrel__store_root(s), name, (long long)version);
    if (access(path, F_OK) != 0)
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name)
                               : kestrel__io_error("cannot delete", path);
    snprintf(dir, sizeof(dir), "%s/models/%s/versions/%lld.deleted", kestrel__store_root(s), name, (long long)version);
    /* a tombstone keeps the number from ever being given out again; it is empty: the version's
     * file names and metadata go with it (it was a link to the manifest, found by a hostile test) */
    if ((fd = open(dir, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) >= 0)
        close(fd);
    if ((fd < 0 && errno != EEXIST) || unlink(path) < 0)
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name)
                               : kestrel__io_error("cannot delete", path);
    /* its aliases, listed once it is gone: one set meanwhile either saw it gone (and took its alias
     * back, kestrel__store_alias_set) or was written before this listing */
    if (kestrel__store_alias_map(s, name, &aliases) < 0)
        kestrel_error_clear();   /* the version is gone: the rest is best effort */
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.listing", kestrel__store_root(s), name, (long long)version);
    unlink(path);   /* what listings showed of it (a kill before this: the collection removes it) */
    kestrel__store_pb_remove(s, name, version);   /* and its protobuf form, likewise */
    for (size_t i = 0; i < aliases.n; i++)   /* its aliases go with it */
        if (aliases.version[i] == version) {
            snprintf(dir, sizeof(dir), "%s/models/%s/aliases/%s", kestrel__store_root(s), name, aliases.alias[i]);
            unlink(dir);
        }
    kestrel__alias_map_free(&aliases);
    /* "latest" goes back to the newest version left */
    if (kestrel__store_versions(s, name, &versions, &n) == 0 && n)
        rc = alias_write(s, name, "latest", versions[n - 1]);
    kestrel_error_clear();
    free(versions);
    return rc;
}

/* Rewrite name@version in the current form when it is in the old one. */
static int migrate_one(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX], buf[65536];
    Kestrel__V1__Manifest *m = NULL;
    ProtobufCMessage *cur = NULL;
    kestrel_buf text = KESTREL_BUF_INIT;
    size_t r;
    FILE *f;
    int rc = 0;
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.json", kestrel__store_root(s), name, (long long)version);
    if ((f = fopen(path, "rb")) == NULL)
        return 0;   /* deleted meanwhile */
    while (rc == 0 && (r = fread(buf, 1, sizeof(buf), f)) > 0)
        rc = kestrel__buf_put(&text, buf, r);
    fclose(f);
    if (rc == 0 && kestrel__wire_from_json(&cur, &kestrel__v1__manifest__descriptor, text.ptr ? text.ptr : "", text.size) == 0) {
        protobuf_c_message_free_unpacked(cur, NULL);   /* already in the current form */
    } else if (rc == 0 && text.ptr && (rc = kestrel__store_legacy_manifest(text.ptr, &m)) == 0) {
        m->version = version;
        text.size = 0;
        if ((rc = kestrel__wire_to_json(&text, &m->base, 0)) == 0)
            rc = kestrel__write_file_atomic(path, text.ptr, text.size, 0644);
        if (rc == 0)
            kestrel__store_pb_remove(s, name, version);   /* none of this form's should exist; never a stale one */
        kestrel__manifest_free(m);
    }
    kestrel_buf_dispose(&text);
    if (rc < 0)
        fprintf(stderr, "kestrel: cannot migrate %s@%lld: %s\n", name, (long long)version, kestrel_error_last()->message);
    return rc < 0 ? 1 : 0;   /* it stays as it is (readers say so, fsck lists it); the next start tries again */
}

int kestrel__store_migrate(kestrel__store *s)
{
    char path[PATH_MAX];
    kestrel_buf names = KESTREL_BUF_INIT;
    int rc, left = 0;
    snprintf(path, sizeof(path), "%s/format", kestrel__store_root(s));
    if (access(path, F_OK) == 0)
        return 0;
    rc = kestrel__store_list(s, &names);
    for (char *save = NULL, *n = rc == 0 && names.ptr ? strtok_r(names.ptr, "\n", &save) : NULL; rc == 0 && n;
         n = strtok_r(NULL, "\n", &save)) {
        int64_t *vs = NULL;
        size_t k = 0;
        if (kestrel__store_versions(s, n, &vs, &k) < 0) {
            kestrel_error_clear();
            continue;
        }
        for (size_t i = 0; i < k; i++)
            left += migrate_one(s, n, vs[i]);
        free(vs);
    }
    kestrel_buf_dispose(&names);
    if (rc < 0 || left)
        return 0;   /* best effort: the store reads both forms */
    return kestrel__write_file_atomic(path, FORMAT, strlen(FORMAT), 0644);
}
