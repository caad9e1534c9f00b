/* lib/repo/own_dir.c - the user's own folders and umask, and where the caches live and their bound
 * (kestrel__cache_dir, kestrel__cache_max; own_dir.h). The caches trust what they
 * find (a pull cache's pack is checked on every read, but a push's stat record names the chunks
 * that are not sent again), so they live only where no one else can write: found by a hostile
 * test, a cache under a /tmp/.cache another user had made let that user read every pulled file
 * and choose the bytes of the next push. */
#include <errno.h>
#include <limits.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "own_dir.h"

mode_t kestrel__umask(void)
{
    char line[128];
    unsigned int mask = 077;
    FILE *f = fopen("/proc/self/status", "re");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Umask: %o", &mask) == 1)
            break;
    if (f)
        fclose(f);
    return (mode_t)(mask & 0777);
}

/* This user's home: $HOME when set and absolute, else the password database's (0; -1 when neither,
 * or it does not fit in n). */
static int home_dir(char *out, size_t n)
{
    const char *home = getenv("HOME");
    struct passwd pw, *got = NULL;
    char buf[4096];
    if (home && home[0] == '/')
        return snprintf(out, n, "%s", home) < (int)n ? 0 : -1;
    if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &got) != 0 || got == NULL || !got->pw_dir ||
        got->pw_dir[0] != '/')
        return -1;
    return snprintf(out, n, "%s", got->pw_dir) < (int)n ? 0 : -1;
}

/* The user's private group (Debian's and Ubuntu's user private groups: named as the user, the user's
 * primary group, no other member), whose write bit a folder made under umask 002 has: only the user
 * writes through it (a review: a ~/.cache of 0775 turned both caches off). (gid_t)-1 when none. */
static gid_t private_group(void)
{
    struct passwd pw, *p = NULL;
    struct group gr, *g = NULL;
    char pbuf[4096], gbuf[4096];
    if (getpwuid_r(geteuid(), &pw, pbuf, sizeof(pbuf), &p) != 0 || p == NULL ||
        getgrgid_r(p->pw_gid, &gr, gbuf, sizeof(gbuf), &g) != 0 || g == NULL || strcmp(g->gr_name, p->pw_name) ||
        (g->gr_mem && g->gr_mem[0]))
        return (gid_t)-1;
    return g->gr_gid;
}

#define LINKS_MAX 40   /* links followed on the way to a folder, all told (the kernel's bound) */

/* Each entry of path (absolute) from the leaf up to /: a folder owned by this user or root and
 * writable by no one else unless sticky, a link owned by this user or root whose target passes
 * the same check (no one else can then swap any of them, nor anything a link leads through: a
 * review found a link's target's folders unchecked); with strict, the leaf a folder of this
 * user's that no one else may write. own: the user's private group, whose write bit is the user's
 * own ((gid_t)-1: none). *links: how many more may be followed, on this way and the ways they lead. */
static int chain_own(char *path, int strict, gid_t own, int *links)
{
    uid_t me = geteuid();
    struct stat st;
    for (;; strict = 0) {
        char *slash;
        mode_t others;
        if (lstat(path, &st) < 0 || (st.st_uid != me && st.st_uid != 0))
            return 0;
        others = st.st_mode & (st.st_uid == me && st.st_gid == own ? 002 : 022);   /* who else may write */
        if (strict ? !S_ISDIR(st.st_mode) || st.st_uid != me || others
                   : S_ISDIR(st.st_mode) ? others && !(st.st_mode & S_ISVTX) : !S_ISLNK(st.st_mode))
            return 0;
        if (S_ISLNK(st.st_mode)) {   /* where it leads, by the same rule */
            struct { char target[PATH_MAX], next[PATH_MAX]; } *b = (*links)-- > 0 ? malloc(sizeof(*b)) : NULL;
            ssize_t k = b ? readlink(path, b->target, PATH_MAX - 1) : -1;   /* PATH_MAX - 1: maybe cut */
            int n = 0, ok;
            if (k > 0 && k < PATH_MAX - 1) {
                b->target[k] = '\0';
                slash = strrchr(path, '/');
                n = b->target[0] == '/' ? snprintf(b->next, PATH_MAX, "%s", b->target)
                                        : snprintf(b->next, PATH_MAX, "%.*s/%s", (int)(slash - path), path, b->target);
                while (n > 1 && n < PATH_MAX && b->next[n - 1] == '/')
                    b->next[--n] = '\0';
            }
            ok = k > 0 && k < PATH_MAX - 1 && n > 0 && n < PATH_MAX && chain_own(b->next, 0, own, links);
            free(b);
            if (!ok)
                return 0;
        }
        if (!strcmp(path, "/"))
            return 1;
        if ((slash = strrchr(path, '/')) == NULL)
            return 0;
        slash[slash == path] = '\0';   /* "/a" -> "/" */
    }
}

int kestrel__dir_own(const char *dir)
{
    char given[PATH_MAX], real[PATH_MAX], cwd[PATH_MAX];
    gid_t own = private_group();   /* a password and a group lookup: once */
    size_t n;
    int links = LINKS_MAX;
    if (realpath(dir, real) == NULL || !chain_own(real, 1, own, &links))
        return 0;   /* where it is */
    if (dir[0] == '/')
        n = (size_t)snprintf(given, sizeof(given), "%s", dir);
    else if (getcwd(cwd, sizeof(cwd)) != NULL)
        n = (size_t)snprintf(given, sizeof(given), "%s/%s", cwd, dir);
    else
        return 0;
    if (n >= sizeof(given))
        return 0;
    while (n > 1 && given[n - 1] == '/')
        given[--n] = '\0';
    return chain_own(given, 0, own, &links);   /* the way to it, links and all */
}

#define CACHE_MAX_DEFAULT (10ll << 30)   /* KESTREL_CACHE_MAX unset, or not a size */

static int64_t parse_size(const char *s)
{
    char *end;
    double v = s ? strtod(s, &end) : -1;
    if (s == NULL || end == s || v < 0)
        return CACHE_MAX_DEFAULT;
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; end++; break;
    case 'm': case 'M': v *= 1048576.0; end++; break;
    case 'g': case 'G': v *= 1073741824.0; end++; break;
    case 't': case 'T': v *= 1099511627776.0; end++; break;
    default: break;
    }
    return *end || !(v < 9.2e18) ? CACHE_MAX_DEFAULT : (int64_t)v;   /* not NaN, nor past int64_t (a review) */
}

int64_t kestrel__cache_max(void)
{
    return parse_size(getenv("KESTREL_CACHE_MAX"));
}

int kestrel__cache_dir(char *out, size_t n, const char *env_suffix, const char *leaf)
{
    const char *env = getenv("KESTREL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
    char home[1024];
    out[0] = '\0';
    if (env && *env)
        snprintf(out, n, "%s%s", env, env_suffix);
    else if (!env && xdg && *xdg)
        snprintf(out, n, "%s/kestrel/%s", xdg, leaf);
    else if (!env && home_dir(home, sizeof(home)) == 0)   /* never /tmp: anyone may make a folder there */
        snprintf(out, n, "%s/.cache/kestrel/%s", home, leaf);
    return out[0] && kestrel__cache_max() != 0;
}
