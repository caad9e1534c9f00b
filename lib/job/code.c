/* lib/job/code.c - kestrel_code_push: a directory's code, as git would keep it, as a repository version.
 * git itself reads the ignore rules (ls-files against an empty index of our own, so the user's own
 * repository, if any, is never touched); the push is kestrel_model_push of those files only. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "client.h"
#include "file_open.h"
#include "http.h"
#include "options.h"
#include "repo.h"
#include "store.h"

extern char **environ;

#define GIT_OUT_MAX (64u << 20)   /* bytes of file names git may list */

/* Run argv (PATH lookup), its stdout into out (at most GIT_OUT_MAX), stderr dropped. The exit status,
 * or -1 when it could not run. */
static int run_capture(char *const argv[], kestrel_buf *out)
{
    posix_spawn_file_actions_t fa;
    int p[2], status = -1;
    pid_t pid;
    char buf[65536];
    ssize_t got;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        close(p[0]);
        close(p[1]);
        return -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    while ((got = read(p[0], buf, sizeof(buf))) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 || out->size + (size_t)got > GIT_OUT_MAX || kestrel__buf_put(out, buf, (size_t)got) < 0)
            break;
    }
    close(p[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return got == 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The files of dir git would keep (relative paths, NUL-separated in *names; *paths points into it). */
static int list_files(const char *dir, kestrel_buf *names, char ***paths, size_t *n)
{
    const char *tmp = getenv("TMPDIR");
    char gitdir[PATH_MAX], gd_flag[PATH_MAX + 16], wt_flag[PATH_MAX + 16], ex_flag[PATH_MAX + 32], ignore[PATH_MAX];
    char top[PATH_MAX], abs_gitdir[PATH_MAX];
    kestrel_buf junk = KESTREL_BUF_INIT;
    struct stat st;
    size_t count = 0;
    int rc, have_ignore;
    snprintf(gitdir, sizeof(gitdir), "%s/kestrel-code-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(gitdir) == NULL)
        return kestrel__error_set(KESTREL_EIO, "cannot make a temporary directory in %s: %s", tmp ? tmp : "/tmp",
                                  strerror(errno));
    {
        char *init[] = { "git", "init", "-q", "--bare", gitdir, NULL };
        rc = run_capture(init, &junk);
        kestrel_buf_dispose(&junk);
    }
    if (rc != 0) {
        kestrel__rm_tree(gitdir);
        return kestrel__error_set(KESTREL_EUNSUPPORTED, "cannot run git (it reads .gitignore for a code upload): "
                                  "install git");
    }
    /* git runs in dir (-C), every path absolute: run from below dir, ls-files listed that subtree alone,
     * its paths relative to there, which were then read under dir (a hostile test: --code .. from
     * proj/sub pushed sub's files as proj's) */
    if (realpath(dir, top) == NULL || realpath(gitdir, abs_gitdir) == NULL) {
        rc = errno;
        kestrel__rm_tree(gitdir);
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", dir, strerror(rc));
    }
    snprintf(ignore, sizeof(ignore), "%s/.kestrelignore", top);
    have_ignore = stat(ignore, &st) == 0;
    snprintf(gd_flag, sizeof(gd_flag), "--git-dir=%s", abs_gitdir);
    snprintf(wt_flag, sizeof(wt_flag), "--work-tree=%s", top);
    snprintf(ex_flag, sizeof(ex_flag), "--exclude-from=%s", ignore);
    {
        char *ls[] = { "git", "-C", top, gd_flag, wt_flag, "-c", "core.quotePath=false", "ls-files", "-z", "--others",
                       "--exclude-standard", have_ignore ? ex_flag : NULL, NULL };
        rc = run_capture(ls, names);
    }
    kestrel__rm_tree(gitdir);
    if (rc != 0)
        return kestrel__error_set(KESTREL_EIO, "git ls-files could not list %s (exit %d)", dir, rc);
    if (kestrel__buf_put(names, "", 1) < 0)
        return kestrel__error_oom();
    for (size_t i = 0; i + 1 < names->size; i++)
        count += names->ptr[i] == '\0';
    if ((*paths = calloc(count + 1, sizeof(char *))) == NULL)
        return kestrel__error_oom();
    *n = 0;
    for (char *p = names->ptr; p < names->ptr + names->size - 1; p += strlen(p) + 1) {
        size_t len = strlen(p);
        if (len && p[len - 1] != '/')   /* "sub/": a repository of its own inside dir, left out */
            (*paths)[(*n)++] = p;
    }
    return 0;
}

typedef struct {
    const char *path;
    int64_t size;
} sized;

static int bigger_first(const void *a, const void *b)
{
    int64_t x = ((const sized *)a)->size, y = ((const sized *)b)->size;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void human(char *out, size_t n, int64_t b)
{
    if (b >= (1 << 30))
        snprintf(out, n, "%.1f GiB", (double)b / (1 << 30));
    else if (b >= (1 << 20))
        snprintf(out, n, "%.1f MiB", (double)b / (1 << 20));
    else
        snprintf(out, n, "%lld bytes", (long long)b);
}

/* Refuse a snapshot over max bytes, naming its three biggest files. */
static int check_size(const char *dir, char **paths, size_t n, int64_t max)
{
    sized *s = calloc(n ? n : 1, sizeof(*s));
    int64_t total = 0;
    char a[32], b[32], list[1024] = "";
    size_t used = 0;
    if (s == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX * 2];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, paths[i]);
        s[i].path = paths[i];
        s[i].size = lstat(path, &st) == 0 ? (int64_t)st.st_size : 0;
        total += s[i].size;
    }
    if (total <= max) {
        free(s);
        return 0;
    }
    qsort(s, n, sizeof(*s), bigger_first);
    for (size_t i = 0; i < n && i < 3; i++) {
        human(a, sizeof(a), s[i].size);
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s (%s)", i ? ", " : "", s[i].path, a);
        if (used >= sizeof(list))
            break;
    }
    human(a, sizeof(a), total);
    human(b, sizeof(b), max);
    free(s);
    return kestrel__error_set(KESTREL_ETOOLARGE, "%s holds %s to upload, over the limit of %s; the biggest: %s. "
                              "List what the job does not need in %s/.kestrelignore (or .gitignore)", dir, a, b, list,
                              dir);
}

/* "USER/code/DIRNAME" (or "code/DIRNAME" for a file:// repository): DIRNAME lowercased, other bytes '-'. */
static int default_name(kestrel_client *c, const char *dir, char *out, size_t n)
{
    char real[PATH_MAX], base[128];
    const char *slash;
    size_t k = 0;
    if (realpath(dir, real) == NULL)
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", dir, strerror(errno));
    slash = strrchr(real, '/');
    for (const char *p = slash && slash[1] ? slash + 1 : "code"; *p && k + 1 < sizeof(base) && k < 64; p++) {
        char ch = (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a') : *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ((ch == '.' || ch == '_' || ch == '-') && k);
        base[k++] = ok ? ch : '-';
    }
    base[k] = '\0';
    if (k == 0 || base[0] == '-')
        snprintf(base, sizeof(base), "code");
    if (c->store_root) {
        snprintf(out, n, "code/%s", base);
    } else {
        kestrel__request req = { "GET", "/api/v1/whoami", NULL, &kestrel__v1__user__descriptor, 1, 0 };
        ProtobufCMessage *m = NULL;
        int rc = kestrel__http_call(&m, c, &req);
        if (rc < 0)
            return rc;
        snprintf(out, n, "%s/code/%s", ((Kestrel__V1__User *)m)->name, base);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (!kestrel__repo_name_valid(out))
        return kestrel__error_set(KESTREL_EINVALID, "'%s' cannot name a code version (lowercase [a-z0-9._-] "
                                  "segments): give a name", out);
    return 0;
}

/* The digest a directory version of these files gets (manifest.c's tree digest: each file's mode,
 * size, SHA-256 and path, in the push's order), read here; *total their bytes. "" on any failure. */
static void tree_digest(const char *dir, char **paths, size_t n, char hex[65], int64_t *total)
{
    kestrel__listing list;
    EVP_MD_CTX *tree = EVP_MD_CTX_new(), *file = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE], *buf = malloc(1 << 20);
    unsigned int mdn = 0;
    char root[PATH_MAX];
    int ok = tree && file && buf && realpath(dir, root) && EVP_DigestInit_ex(tree, EVP_sha256(), NULL) == 1;
    memset(&list, 0, sizeof(list));
    hex[0] = '\0';
    *total = 0;
    ok = ok && kestrel__tree_list(root, paths, n, &list) == 0;
    for (size_t i = 0; ok && i < list.n; i++) {
        Kestrel__V1__TreeFile f = KESTREL__V1__TREE_FILE__INIT;
        char path[PATH_MAX], sha[65];
        struct stat st;
        ssize_t got = 0;
        int fd;
        f.path = (char *)kestrel__listed_path(&list, i);
        f.size = list.f[i].size;
        f.mode = list.f[i].mode;
        snprintf(path, sizeof(path), "%s/%s", root, f.path);
        if ((fd = kestrel__file_open(path, 1, &st)) < 0 || !S_ISREG(st.st_mode) ||
            EVP_DigestInit_ex(file, EVP_sha256(), NULL) != 1) {
            ok = 0;
        } else {
            while ((got = read(fd, buf, 1 << 20)) > 0 && EVP_DigestUpdate(file, buf, (size_t)got) == 1)
                ;
            ok = got == 0 && EVP_DigestFinal_ex(file, md, &mdn) == 1;
        }
        if (fd >= 0)
            close(fd);
        if (!ok)
            break;
        kestrel__hex(md, 32, sha);
        f.sha256 = sha;
        kestrel__manifest_tree_digest_file(tree, &f);
        *total += f.size;
    }
    if (ok && EVP_DigestFinal_ex(tree, md, &mdn) == 1)
        kestrel__hex(md, 32, hex);
    kestrel__listing_free(&list);
    EVP_MD_CTX_free(tree);
    EVP_MD_CTX_free(file);
    free(buf);
}

/* The newest version of name when it holds exactly these files (its digest is the repository's, of
 * what was pushed): a job submitted again with unchanged code reuses it. A submit refused after its
 * code went (a bad flag, --max-queued) made a version each time (a hostile test). 0: none. */
static int64_t same_as_latest(kestrel_client *c, const char *name, const char *dir, char **paths, size_t n,
                              int64_t *total)
{
    kestrel_model_versions *vs = NULL;
    const kestrel_model_version *v;
    char ref[320], hex[65];
    int64_t found = 0;
    snprintf(ref, sizeof(ref), "%s@latest", name);
    if (kestrel_model_version_get(&vs, c, ref) < 0) {
        kestrel_error_clear();   /* none yet, or it cannot tell: the push says what is wrong */
        return 0;
    }
    if ((v = kestrel_model_versions_at(vs, 0)) != NULL && v->sha256[0]) {
        tree_digest(dir, paths, n, hex, total);
        if (hex[0] && !strcmp(hex, v->sha256) && v->size == *total)
            found = v->version;
    }
    kestrel_model_versions_free(vs);
    return found;
}

int kestrel_code_push(kestrel_buf *ref_out, kestrel_client *c, const char *dir, const kestrel_code_options *in)
{
    kestrel_code_options o;
    kestrel_transfer_options t = KESTREL_TRANSFER_OPTIONS_INIT;
    kestrel_buf names = KESTREL_BUF_INIT;
    char **paths = NULL, name[300];
    size_t n = 0;
    int64_t version = 0;
    struct stat st;
    int rc;
    if (ref_out == NULL || dir == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "ref_out or dir is NULL");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__code_opts_load(&o, in)) < 0)
        return rc;
    if (o.max_bytes < 0)
        return kestrel__error_set(KESTREL_EINVALID, "max_bytes must not be negative");
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return kestrel__error_set(KESTREL_EINVALID, "%s is not a directory", dir);
    if (o.name)
        snprintf(name, sizeof(name), "%s", o.name);
    else if ((rc = default_name(c, dir, name, sizeof(name))) < 0)
        return rc;
    if ((rc = list_files(dir, &names, &paths, &n)) < 0)
        goto out;
    if (n == 0) {
        rc = kestrel__error_set(KESTREL_EINVALID, "%s: no files to upload (all ignored, or none)", dir);
        goto out;
    }
    if ((rc = check_size(dir, paths, n, o.max_bytes ? o.max_bytes : KESTREL_CODE_MAX_BYTES_DEFAULT)) < 0)
        goto out;
    t.progress = o.progress;
    t.progress_payload = o.progress_payload;
    {
        int64_t total = 0;
        if ((version = same_as_latest(c, name, dir, paths, n, &total)) > 0 && o.progress) {
            kestrel_progress p = { 1, KESTREL_PHASE_PUSH, total, total, 0, 0, 0 };
            (void)o.progress(&p, o.progress_payload);
        }
    }
    if (version == 0 && (rc = kestrel__model_push(&version, c, name, dir, &t, paths, n)) < 0)
        goto out;
    kestrel_buf_dispose(ref_out);
    rc = kestrel__buf_printf(ref_out, "%s@%lld", name, (long long)version);
out:
    free(paths);
    kestrel_buf_dispose(&names);
    return rc;
}
