/* server/identity.c - per-user Unix identities for jobs (policy in identity.h). */
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "exec_util.h"
#include "identity.h"
#include "store.h"

#define UID_REGULAR_MIN 1000
#define NOBODY_UID 65534
#define CACHE 256

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { char user[128]; kd_ident id; } cache[CACHE];
static size_t ncache;

int kd_ident_available(void)
{
    return geteuid() == 0;
}

/* A name useradd takes: [a-z_][a-z0-9_-]*, at most 32 bytes with the prefix. */
static int unix_name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* "x" and 12 hex digits: the form of a hashed name, which no user's own name may take */
static int looks_hashed(const char *s)
{
    if (s[0] != 'x' || strlen(s) != 13)
        return 0;
    for (int i = 1; i < 13; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static void managed_name(const char *user, char *out, size_t n)
{
    if (unix_name_ok(user, 32 - 8) && !looks_hashed(user)) {
        snprintf(out, n, "kestrel-%s", user);
    } else {
        char hex[KESTREL__HEX_LEN + 1];
        kestrel__sha256_hex(user, strlen(user), hex);
        snprintf(out, n, "kestrel-x%.12s", hex);
    }
}

/* An account that may administer the machine (sudo, wheel, admin groups): never a job's. */
static int is_privileged(const struct passwd *pw)
{
    static const char *const groups[] = { "sudo", "wheel", "admin", "root" };
    gid_t list[256];
    int n = 256;
    if (getgrouplist(pw->pw_name, pw->pw_gid, list, &n) < 0)
        return 1;   /* too many groups to tell: assume the worst */
    for (int i = 0; i < n; i++) {
        struct group gr, *res = NULL;
        char buf[8192];
        if (getgrgid_r(list[i], &gr, buf, sizeof(buf), &res) != 0 || res == NULL)
            continue;
        for (size_t k = 0; k < sizeof(groups) / sizeof(groups[0]); k++)
            if (!strcmp(gr.gr_name, groups[k]))
                return 1;
    }
    return 0;
}

static int from_passwd(const char *name, kd_ident *out, int need_regular)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || res == NULL)
        return -1;
    if (pw.pw_uid == 0 || pw.pw_uid == NOBODY_UID || (need_regular && pw.pw_uid < UID_REGULAR_MIN))
        return -1;
    if (need_regular && is_privileged(&pw))
        return -1;
    out->isolated = 1;
    out->uid = pw.pw_uid;
    out->gid = pw.pw_gid;
    snprintf(out->name, sizeof(out->name), "%s", pw.pw_name);
    return 0;
}

static int create_account(const char *name, const char *user)
{
    char comment[200];
    kestrel_buf out = KESTREL_BUF_INIT;
    char *argv[] = { "useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                     "--shell", "/usr/sbin/nologin", "--comment", comment, (char *)name, NULL };
    int rc;
    /* the comment field is ':'-separated in /etc/passwd */
    snprintf(comment, sizeof(comment), "Kestrel jobs of %s", user);
    for (char *c = comment; *c; c++)
        if (*c == ':' || *c == ',' || *c == '\n')
            *c = '_';
    rc = kd_exec_run(argv, NULL, &out, NULL);
    if (rc != 0) {
        if (out.ptr)
            out.ptr[strcspn(out.ptr, "\n")] = '\0';
        rc = kestrel__error_set(KESTREL_EAUTH, "cannot create the Unix account %s for user %s: %s", name, user,
                                out.ptr ? out.ptr : "useradd did not run");
    }
    kestrel_buf_dispose(&out);
    return rc;
}

int kd_ident_resolve(const char *user, kd_ident *out)
{
    char name[64];
    int rc = 0;
    memset(out, 0, sizeof(*out));
    if (!kd_ident_available()) {
        out->uid = getuid();
        out->gid = getgid();
        return 0;
    }
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ncache; i++)
        if (!strcmp(cache[i].user, user)) {
            *out = cache[i].id;
            pthread_mutex_unlock(&mu);
            return 0;
        }
    managed_name(user, name, sizeof(name));
    if (from_passwd(user, out, 1) < 0 && from_passwd(name, out, 0) < 0) {
        struct passwd *taken;
        if ((taken = getpwnam(name)) != NULL)   /* exists but is root or nobody: never */
            rc = kestrel__error_set(KESTREL_EAUTH, "the Unix account %s may not run jobs (uid %u)", name,
                                    (unsigned)taken->pw_uid);
        else if ((rc = create_account(name, user)) < 0 && from_passwd(name, out, 0) == 0) {
            kestrel_error_clear();   /* made meanwhile by another kestreld on this host ("already exists") */
            rc = 0;
        } else if (rc == 0 && from_passwd(name, out, 0) < 0)
            rc = kestrel__error_set(KESTREL_EAUTH, "the Unix account %s was created but cannot be used", name);
        if (rc == 0)
            fprintf(stderr, "kestreld: jobs of user '%s' run as the new Unix account %s (uid %u)\n", user, out->name,
                    (unsigned)out->uid);
    }
    if (rc == 0 && ncache < CACHE && strlen(user) < sizeof(cache[0].user)) {
        snprintf(cache[ncache].user, sizeof(cache[ncache].user), "%s", user);
        cache[ncache++].id = *out;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static uid_t walk_uid;
static gid_t walk_gid;

static int chown_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st; (void)type; (void)ftw;
    return lchown(path, walk_uid, walk_gid) < 0 ? -1 : 0;
}

int kd_ident_chown(const kd_ident *id, const char *path, int recursive)
{
    static pthread_mutex_t walk = PTHREAD_MUTEX_INITIALIZER;   /* nftw has no user pointer */
    int rc;
    if (!id->isolated)
        return 0;
    if (!recursive) {
        /* a folder, through a descriptor: a link or a hard-linked file put in its place is refused */
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        rc = fd < 0 || fchown(fd, id->uid, id->gid) < 0 ? -1 : 0;
        if (rc < 0)
            rc = kestrel__error_set(KESTREL_EIO, "cannot give the folder %s to %s: %s", path, id->name,
                                    strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    pthread_mutex_lock(&walk);
    walk_uid = id->uid;
    walk_gid = id->gid;
    rc = nftw(path, chown_one, 32, FTW_PHYS | FTW_DEPTH);   /* contents before their folder */
    pthread_mutex_unlock(&walk);
    return rc < 0 ? kestrel__error_set(KESTREL_EIO, "cannot give %s to %s: %s", path, id->name, strerror(errno)) : 0;
}

int kd_ident_secure_data_dir(const char *data_dir)
{
    static const char *const secret[] = { "catalog.db", "catalog.db-wal", "catalog.db-shm", "admin.token" };
    char path[PATH_MAX];
    int isolated = kd_ident_available();
    umask(077);   /* everything kestreld writes is its own unless it says otherwise */
    /* with identities, jobs pass through DATA and DATA/jobs to their own dirs (0711: no listing) */
    if (chmod(data_dir, isolated ? 0711 : 0700) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot chmod %s: %s", data_dir, strerror(errno));
    snprintf(path, sizeof(path), "%s/jobs", data_dir);
    if ((mkdir(path, 0711) < 0 && errno != EEXIST) || chmod(path, isolated ? 0711 : 0700) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", path, strerror(errno));
    /* a data dir of an earlier kestreld: its job dirs were 0755, its catalog 0644 */
    {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            char sub[PATH_MAX + 300];
            struct stat st;
            if (de->d_name[0] == '.')
                continue;
            snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 077))
                chmod(sub, 0700);
        }
        if (d)
            closedir(d);
    }
    for (size_t i = 0; i < sizeof(secret) / sizeof(secret[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", data_dir, secret[i]);
        if (chmod(path, 0600) < 0 && errno != ENOENT)
            return kestrel__error_set(KESTREL_EIO, "cannot chmod %s: %s", path, strerror(errno));
    }
    snprintf(path, sizeof(path), "%s/repo", data_dir);
    if (chmod(path, 0700) < 0 && errno != ENOENT)
        return kestrel__error_set(KESTREL_EIO, "cannot chmod %s: %s", path, strerror(errno));
    for (char *slash = strrchr(strcpy(path, data_dir), '/'); isolated && slash; slash = strrchr(path, '/')) {
        struct stat st;
        *slash = '\0';
        if (stat(path[0] ? path : "/", &st) == 0 && !(st.st_mode & S_IXOTH)) {
            fprintf(stderr, "kestreld: warning: jobs run as unprivileged accounts and cannot pass through %s "
                            "(mode %03o) to their dirs in %s/jobs: every job would fail; chmod o+x %s or choose "
                            "another --data-dir\n", path[0] ? path : "/", (unsigned)(st.st_mode & 0777), data_dir,
                    path[0] ? path : "/");
            break;
        }
    }
    if (!isolated)
        fprintf(stderr, "kestreld: warning: not running as root, so every job runs as this daemon's own user "
                        "(uid %u) and can read its catalog and tokens: single-tenant. Run kestreld as root to give "
                        "each user's jobs their own Unix account.\n", (unsigned)getuid());
    return 0;
}

/* 1 when root may walk what is in dir: kestreld itself runs the jobs, or dir is still root's (an
 * earlier kestreld's, whose jobs ran as root, or a finished job's: the identity cannot have changed
 * anything in it). */
static int root_may_walk(const kd_ident *id, const char *dir)
{
    struct stat st;
    return !id->isolated || (lstat(dir, &st) == 0 && st.st_uid == 0);
}

int kd_ident_rm_tree(const kd_ident *id, const char *dir, const char *path)
{
    kestrel_buf out = KESTREL_BUF_INIT;
    char *argv[] = { "rm", "-rf", "--one-file-system", "--", (char *)path, NULL };
    kd_exec_as as = { id, "/" };
    struct stat st;
    int rc = 0;
    if (lstat(path, &st) < 0 && errno == ENOENT)
        return 0;
    if (root_may_walk(id, dir)) {
        kestrel__rm_tree(path);
        return 0;
    }
    /* as the identity, never as root: a process of the job's that outlived it may swap a folder for
     * a symlink while the tree is walked, and root would then remove what the link points to */
    if (kd_exec_run(argv, "/", &out, &as) != 0)
        rc = kestrel__error_set(KESTREL_EIO, "cannot remove %s as %s: %s", path, id->name,
                                out.ptr ? out.ptr : "rm did not run");
    kestrel_buf_dispose(&out);
    return rc;
}

int kd_ident_empty(const kd_ident *id, const char *dir)
{
    char *opened[] = { "chmod", "-R", "u+rwx", "--", (char *)dir, NULL };
    char *find[] = { "find", (char *)dir, "-xdev", "-mindepth", "1", "-delete", NULL };
    kestrel_buf out = KESTREL_BUF_INIT;
    kd_exec_as as = { id, "/" };
    struct stat st;
    int rc = 0;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    if (root_may_walk(id, dir)) {
        DIR *d = opendir(dir);
        struct dirent *de;
        char path[4200];
        while (d && (de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                kestrel__rm_tree(path);
            }
        if (d)
            closedir(d);
        return 0;
    }
    /* as the identity (never root); folders the job closed to itself opened first (chmod -R
     * follows no link), else a job could keep its files from this */
    kd_exec_run(opened, "/", &out, &as);
    kestrel_buf_dispose(&out);
    if (kd_exec_run(find, "/", &out, &as) != 0)
        rc = kestrel__error_set(KESTREL_EIO, "cannot empty %s as %s: %s", dir, id->name,
                                out.ptr ? out.ptr : "find did not run");
    kestrel_buf_dispose(&out);
    return rc;
}

int kd_ident_adopt(const kd_ident *id, const char *dir, const char *const *inside, size_t n)
{
    struct stat st;
    if (!id->isolated)
        return 0;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return kestrel__error_set(KESTREL_EIO, "%s is not a directory", dir);
    /* a dir still root's (made by an earlier kestreld, whose jobs ran as root): nothing in it can
     * have been changed by the identity, so a walk as root is safe; afterwards never again */
    for (size_t i = 0; i < n; i++)
        if (kd_ident_chown(id, inside[i], st.st_uid == 0) < 0)
            return KESTREL_EIO;
    return kd_ident_chown(id, dir, 0);
}
