/* server/envs.c - the Python environments jobs run in: one venv per distinct spec, built once by a
 * builder thread while the jobs wait QUEUED (see envs.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "env_builder.h"
#include "envs.h"
#include "exec_util.h"
#include "identity.h"
#include "store.h"

#define MAX_ENVS 256        /* built or building, in memory */
#define MAX_WAITERS 64      /* jobs whose logs get a build's lines */

typedef struct {
    char key[65];           /* sha256 hex of the resolved spec */
    char name[80];          /* declared name, "" for a job's requirements */
    char *requirements;
    int state;              /* KD_ENV_WAIT (building or queued to be), KD_ENV_FAILED */
    int started;
    char last[240];         /* pip's last line */
    char error[1024];
    int64_t since_ms;
    int64_t waiters[MAX_WAITERS];
    size_t nwaiters;
    int more_waiters;       /* a job asked past MAX_WAITERS: someone may wait whom the list does not name */
    int abandoned;          /* stopped mid-build: no queued job needed it any more (the builder's alone) */
} env_entry;

struct kd_envs {
    kd_engine *e;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int stop;
    env_entry *v[MAX_ENVS];
    size_t n;
    char bindings[PATH_MAX];   /* put on every venv's path ("" none): --env-python-path, or found */
    int bindings_known;        /* looked for (at the first build: a daemon that builds none never asks) */
    pid_t build_pid;           /* the build step running now (0: none): stopped when kestreld stops */
    char builder_name[48];     /* "env-builder-" + 8 hex of the data dir: this kestreld's builder alone */
};

static const char *label(const env_entry *x) { return x->name[0] ? x->name : "from the job's requirements"; }

/* The requirements text and name of what spec asks for; NULL when nothing (or an unknown name). */
static const char *wanted(const kd_envs *s, const Kestrel__V1__JobSpec *spec, const char **name)
{
    *name = "";
    if (spec->requirements[0])
        return spec->requirements;
    for (size_t i = 0; spec->environment[0] && i < s->e->cfg->nenvs; i++)
        if (!strcmp(s->e->cfg->envs[i].name, spec->environment)) {
            *name = s->e->cfg->envs[i].name;
            return s->e->cfg->envs[i].requirements;
        }
    return NULL;
}

int kd_envs_unknown(const kd_envs *s, const Kestrel__V1__JobSpec *spec)
{
    const char *name;
    return spec->environment[0] && wanted(s, spec, &name) == NULL;
}

/* The spec a venv is keyed by: what pip gets, and the interpreter that makes it. */
static void key_of(const kd_envs *s, const char *reqs, char key[65])
{
    char *text = NULL;
    if (asprintf(&text, "kestrel-env-1\npython=%s\n%s\n+cffi\n", s->e->cfg->env_python, reqs) < 0) {
        key[0] = '\0';
        return;
    }
    kestrel__sha256_hex(text, strlen(text), key);
    free(text);
}

static void envs_path(const kd_envs *s, char *out, size_t n, const char *what)
{
    snprintf(out, n, "%s/envs%s%s", s->e->cfg->data_dir, what[0] ? "/" : "", what);
}

static int ready(const kd_envs *s, const char *key, char dir[PATH_MAX])
{
    char freeze[PATH_MAX + 32];
    struct stat st;
    envs_path(s, dir, PATH_MAX, key);
    snprintf(freeze, sizeof(freeze), "%s/kestrel-freeze.txt", dir);
    return stat(freeze, &st) == 0;
}

static env_entry *find(kd_envs *s, const char *key)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i]->key, key))
            return s->v[i];
    return NULL;
}

int kd_envs_check(kd_envs *s, int64_t job_id, const Kestrel__V1__JobSpec *spec, char *why, size_t n,
                  char dir[PATH_MAX], char digest[80])
{
    const char *name, *reqs = wanted(s, spec, &name);
    char key[65];
    env_entry *x;
    int rc;
    if (!spec->requirements[0] && !spec->environment[0])
        return KD_ENV_NONE;
    if (reqs == NULL) {
        snprintf(why, n, "no environment '%s' (kestrel envs lists them)", spec->environment);
        return KD_ENV_FAILED;
    }
    key_of(s, reqs, key);
    snprintf(digest, 80, "sha256:%s", key);
    if (ready(s, key, dir))
        return KD_ENV_READY;
    pthread_mutex_lock(&s->mu);
    if ((x = find(s, key)) != NULL && x->state == KD_ENV_FAILED && kestrel__now_ms() - x->since_ms > 60000) {
        x->state = KD_ENV_WAIT;   /* a failure a minute old may have been passing (the network): again */
        x->started = 0;
        x->nwaiters = 0;
        x->more_waiters = 0;
        x->since_ms = kestrel__now_ms();
        snprintf(x->last, sizeof(x->last), "queued for the builder again");
        pthread_cond_signal(&s->cv);
    }
    if (x == NULL && s->n == MAX_ENVS)   /* full: failed entries (their jobs told) make room */
        for (size_t i = 0; i < s->n; i++)
            if (s->v[i]->state == KD_ENV_FAILED && kestrel__now_ms() - s->v[i]->since_ms > 60000) {
                free(s->v[i]->requirements);
                free(s->v[i]);
                s->v[i--] = s->v[--s->n];
            }
    if (x == NULL) {
        if (s->n == MAX_ENVS || (x = calloc(1, sizeof(*x))) == NULL || (x->requirements = strdup(reqs)) == NULL) {
            free(x);
            pthread_mutex_unlock(&s->mu);
            snprintf(why, n, "waiting: too many environments being built");
            return KD_ENV_WAIT;
        }
        snprintf(x->key, sizeof(x->key), "%s", key);
        snprintf(x->name, sizeof(x->name), "%s", name);
        x->state = KD_ENV_WAIT;
        x->since_ms = kestrel__now_ms();
        snprintf(x->last, sizeof(x->last), "queued for the builder");
        s->v[s->n++] = x;
        pthread_cond_signal(&s->cv);
    }
    if (x->state == KD_ENV_WAIT) {
        size_t k = 0;
        while (k < x->nwaiters && x->waiters[k] != job_id)
            k++;
        if (k == x->nwaiters && x->nwaiters < MAX_WAITERS)
            x->waiters[x->nwaiters++] = job_id;
        else if (k == x->nwaiters)
            x->more_waiters = 1;
        snprintf(why, n, "preparing environment %s (pip: %s; %lld s)", label(x), x->last,
                 (long long)((kestrel__now_ms() - x->since_ms) / 1000));
        rc = KD_ENV_WAIT;
    } else {
        snprintf(why, n, "environment %s failed to build: %s", label(x), x->error);
        rc = KD_ENV_FAILED;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* One line of a build's output: into every waiting job's log, and kept as the last line. */
static void line(kd_envs *s, env_entry *x, const char *text)
{
    int64_t ids[MAX_WAITERS];
    size_t n;
    pthread_mutex_lock(&s->mu);
    snprintf(x->last, sizeof(x->last), "%s", text);
    n = x->nwaiters;
    memcpy(ids, x->waiters, n * sizeof(ids[0]));
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++)
        kd_exec_log(s->e, ids[i], "env: %s", text);
}

static int anyone_waits(kd_envs *s, env_entry *x);

/* How often a build step looks whether a queued job still needs its environment. */
#define WAITERS_CHECK_MS 2000

/* Run argv (absolute path) as id in cwd, its output line by line into the build's lines (or, with
 * collect, into it); the exit status, or -1. The last lines stay in tail. The step ends when argv's
 * process does: what it started and left holding the output open is killed then (as root; else no
 * longer read), so that a package's code cannot hold the build, or kestreld's builder, open; and
 * when no queued job needs the environment any more (x->abandoned: every later step returns -1). */
static int run(kd_envs *s, env_entry *x, char *const argv[], const char *cwd, const kd_ident *id, char *tail,
               size_t tn, kestrel_buf *collect)
{
    extern char **environ;
    char *env[512], buf[8192];
    size_t k = 0, have = 0;
    int p[2], status = -1, timed_out = 0, reaped = 0;
    int64_t deadline_ms = kestrel__now_ms() + (int64_t)s->e->cfg->env_build_timeout_s * 1000;
    int64_t check_ms = kestrel__now_ms() + WAITERS_CHECK_MS;
    ssize_t r;
    pid_t pid;
    if (x->abandoned)
        return -1;
    static const char *const keep[] = { "PATH", "LANG", "LC_*", "TZ", "PIP_*", NULL };
    /* only what configures pip (index, find-links, proxy, certificates): nothing else of kestreld's */
    for (char **v = environ; *v && k < 500; v++)
        if (kd_exec_env_listed(keep, *v) || kd_exec_network_env(*v))
            env[k++] = *v;
    env[k] = NULL;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    if ((pid = kd_exec_spawn(argv, env, cwd, p, NULL, id, -1, NULL)) < 0) {
        close(p[0]);
        snprintf(tail, tn, "cannot run %s: %s", argv[0], strerror((int)-pid));
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    s->build_pid = pid;
    if (s->stop)
        kill(pid, SIGKILL);
    pthread_mutex_unlock(&s->mu);
    tail[0] = '\0';
    for (;;) {
        struct pollfd pf = { p[0], POLLIN, 0 };
        char *start = buf, *nl;
        int64_t left = deadline_ms - kestrel__now_ms();
        /* every job that asked for it cancelled: stopped, so that one user's builds cannot hold the
         * builder for other users' jobs by submitting and cancelling (a hostile test: 225 s of a
         * cancelled job's setup.py held another user's build) */
        if (!reaped && kestrel__now_ms() >= check_ms) {
            check_ms = kestrel__now_ms() + WAITERS_CHECK_MS;
            if (!anyone_waits(s, x)) {
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                snprintf(tail, tn, "no queued job needs this environment any more: its build was stopped");
                x->abandoned = timed_out = 1;
                break;
            }
        }
        if (left <= 0 || poll(&pf, 1, (int)(left > 1000 ? 1000 : left)) < 0) {
            if (left > 0 && errno == EINTR)
                continue;
            if (left <= 0) {   /* a build that hangs (a setup.py that never ends) is cut off */
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                snprintf(tail, tn, "the build step ran past --env-build-timeout (%d s) and was stopped",
                         s->e->cfg->env_build_timeout_s);
                timed_out = 1;
            }
            break;
        }
        if (pf.revents == 0) {   /* a second of silence: has the step ended, its output held by another? */
            if (reaped)
                break;   /* killed and still held (kestreld not root): what it writes is not read */
            if (waitpid(pid, &status, WNOHANG) == pid) {
                reaped = 1;
                kd_env_kill_builder(id);
            }
            continue;
        }
        if ((r = read(p[0], buf + have, sizeof(buf) - 1 - have)) == 0)
            break;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        have += (size_t)r;
        buf[have] = '\0';
        while ((nl = memchr(start, '\n', have - (size_t)(start - buf))) != NULL) {
            *nl = '\0';
            kd_exec_sanitize(start, strlen(start));
            if (*start && collect)
                kestrel__buf_printf(collect, "%s\n", start);
            else if (*start) {
                line(s, x, start);
                snprintf(tail, tn, "%s", start);
            }
            start = nl + 1;
        }
        have -= (size_t)(start - buf);
        memmove(buf, start, have);
        if (have == sizeof(buf) - 1)
            have = 0;   /* a line longer than the buffer: dropped */
    }
    close(p[0]);
    if (!reaped && waitpid(pid, &status, 0) < 0)
        status = -1;
    pthread_mutex_lock(&s->mu);
    s->build_pid = 0;
    pthread_mutex_unlock(&s->mu);
    kd_env_kill_builder(id);   /* nothing a build started may outlive its step */
    return !timed_out && status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* At start: build dirs no DATA/envs/KEY link names (a build a killed kestreld left, an eviction cut
 * short) are removed, and the pip cache earlier kestrelds shared between builds (DATA/envs/.pip-cache:
 * any build's code could write it, so nothing in it is trusted now that each build has its own). */
static void sweep_builds(kd_envs *s)
{
    char envs[PATH_MAX], base[PATH_MAX + 4], shared[PATH_MAX + 16];
    DIR *d;
    struct dirent *de;
    kd_ident builder = { 0 };
    int have_builder = 0;
    struct stat st;
    envs_path(s, envs, sizeof(envs), "");
    snprintf(shared, sizeof(shared), "%s/.pip-cache", envs);
    if (lstat(shared, &st) == 0) {
        if (kd_ident_available() && kd_ident_resolve(s->builder_name, &builder) == 0) {
            have_builder = 1;
            kd_env_kill_builder(&builder);
        }
        kd_env_drop(&builder, shared);
    }
    snprintf(base, sizeof(base), "%s/.b", envs);
    if ((d = opendir(base)) == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        char linkp[PATH_MAX + 80], target[PATH_MAX], dir[PATH_MAX + 300];
        ssize_t n;
        if (de->d_name[0] == '.' || strlen(de->d_name) < 17)
            continue;
        snprintf(linkp, sizeof(linkp), "%s/%.16s", envs, de->d_name);
        {   /* the link's name is the full key: find one that starts with these 16 digits and points here */
            DIR *e = opendir(envs);
            struct dirent *le;
            int linked = 0;
            while (e && (le = readdir(e)) != NULL) {
                if (strlen(le->d_name) != 64 || strncmp(le->d_name, de->d_name, 16))
                    continue;
                snprintf(linkp, sizeof(linkp), "%s/%s", envs, le->d_name);
                if ((n = readlink(linkp, target, sizeof(target) - 1)) > 0) {
                    target[n] = '\0';
                    linked |= !strcmp(target + (strncmp(target, ".b/", 3) ? 0 : 3), de->d_name);
                }
            }
            if (e)
                closedir(e);
            if (linked)
                continue;
        }
        if (!have_builder && kd_ident_available() && kd_ident_resolve(s->builder_name, &builder) == 0) {
            have_builder = 1;
            kd_env_kill_builder(&builder);   /* what a killed kestreld's build left running */
        }
        snprintf(dir, sizeof(dir), "%s/%s", base, de->d_name);
        kd_env_drop(&builder, dir);
    }
    closedir(d);
}

/* Past --env-cache-max built environments: remove the least recently used one no running job uses
 * (never keep, just built for the jobs waiting on it). */
static void evict(kd_envs *s, const char *keep)
{
    char dir[PATH_MAX];
    DIR *d;
    struct dirent *de;
    for (;;) {
        size_t count = 0;
        time_t oldest = 0;
        char victim[65] = "";
        envs_path(s, dir, sizeof(dir), "");
        if ((d = opendir(dir)) == NULL)
            return;
        while ((de = readdir(d)) != NULL) {
            char used[PATH_MAX + 80], digest[80];
            struct stat st;
            if (strlen(de->d_name) != 64 || strspn(de->d_name, "0123456789abcdef") != 64)
                continue;
            count++;
            if (!strcmp(de->d_name, keep))
                continue;
            snprintf(used, sizeof(used), "%s/%s.used", dir, de->d_name);
            snprintf(digest, sizeof(digest), "sha256:%s", de->d_name);
            if (stat(used, &st) < 0)
                st.st_mtime = 0;
            if (!kd_catalog_env_in_use(s->e->cat, digest) && (!victim[0] || st.st_mtime < oldest)) {
                oldest = st.st_mtime;
                snprintf(victim, sizeof(victim), "%s", de->d_name);
            }
        }
        closedir(d);
        if (count <= (size_t)s->e->cfg->env_cache_max || !victim[0])
            return;
        {
            char link_path[PATH_MAX + 80], real[PATH_MAX], used[PATH_MAX + 80];
            snprintf(link_path, sizeof(link_path), "%s/%s", dir, victim);
            snprintf(used, sizeof(used), "%s.used", link_path);
            if (realpath(link_path, real) == NULL)
                real[0] = '\0';
            unlink(link_path);
            unlink(used);
            if (real[0])
                kestrel__rm_tree(real);   /* root's since its build ended */
        }
    }
}

/* --env-python-path, else where the environments' interpreter itself finds `import kestrel` (the
 * bindings installed for it, or on kestreld's PYTHONPATH): what every venv gets on its path. */
static void find_bindings(kd_envs *s)
{
    const kd_config *cfg = s->e->cfg;
    char *argv[] = { (char *)cfg->env_python, "-c",
                     "import kestrel, os; print(os.path.dirname(os.path.dirname(os.path.abspath(kestrel.__file__))))",
                     NULL };
    kestrel_buf out = KESTREL_BUF_INIT;
    if (cfg->env_python_path) {
        snprintf(s->bindings, sizeof(s->bindings), "%s", cfg->env_python_path);
        return;
    }
    if (kd_exec_run(argv, NULL, &out, NULL) == 0 && out.ptr && out.ptr[0] == '/') {
        out.ptr[strcspn(out.ptr, "\n")] = '\0';
        snprintf(s->bindings, sizeof(s->bindings), "%s", out.ptr);
        fprintf(stderr, "kestreld: environments get the kestrel bindings from %s\n", s->bindings);
    } else {   /* said once here (at the first build), and in the log of every job of a build (build) */
        fprintf(stderr, "kestreld: warning: %s cannot import kestrel: jobs in environments cannot either "
                "(install the bindings for it, or --env-python-path DIR)\n", cfg->env_python);
    }
    kestrel_buf_dispose(&out);
}

/* Build x: venv, pip install -r (and cffi), freeze, the bindings on its path; then root's, linked in. */
static void build(kd_envs *s, env_entry *x)
{
    const kd_config *cfg = s->e->cfg;
    char base[PATH_MAX], real[PATH_MAX], reqs[PATH_MAX + 32], py[PATH_MAX + 32], cache[PATH_MAX], tail[512];
    char link_tmp[PATH_MAX + 16], final[PATH_MAX], rel[PATH_MAX], cache_env[PATH_MAX + 16], home[PATH_MAX + 8];
    char key[65];
    kd_ident builder = { 0 };
    kestrel_buf freeze = KESTREL_BUF_INIT;
    int rc = -1, resolved;
    if (!s->bindings_known) {
        find_bindings(s);
        s->bindings_known = 1;
    }
    envs_path(s, base, sizeof(base), ".b");
    snprintf(real, sizeof(real), "%s/%.16s-XXXXXX", base, x->key);
    resolved = !kd_ident_available() || kd_ident_resolve(s->builder_name, &builder) == 0;
    kd_env_kill_builder(resolved ? &builder : NULL);   /* nothing of an earlier build runs into this one */
    if (!resolved || kestrel__mkdirs(base, 0711) < 0 || chmod(base, 0711) < 0 || mkdtemp(real) == NULL ||
        chmod(real, 0700) < 0 || snprintf(cache, sizeof(cache), "%s/.pip-cache", real) < 0 || mkdir(cache, 0700) < 0) {
        snprintf(x->error, sizeof(x->error), "cannot make a build dir: %s", kestrel_error_last()->message[0]
                 ? kestrel_error_last()->message : strerror(errno));
        goto out;
    }
    snprintf(reqs, sizeof(reqs), "%s/kestrel-requirements.txt", real);
    /* the builder's alone until the seal: the text may hold an index's credentials, and pip's
     * command line, which every account may read, names the file (a hostile test read it) */
    if (kestrel__write_file_atomic(reqs, x->requirements, strlen(x->requirements), 0600) < 0 ||
        kd_ident_chown(&builder, real, 1) < 0) {
        snprintf(x->error, sizeof(x->error), "cannot prepare %s: %s", real, kestrel_error_last()->message);
        goto out;
    }
    snprintf(py, sizeof(py), "%s/bin/python", real);
    snprintf(cache_env, sizeof(cache_env), "PIP_CACHE_DIR=%s", cache);
    snprintf(home, sizeof(home), "HOME=%s", real);
    {
        char *venv[] = { (char *)cfg->env_python, "-m", "venv", "--without-pip", real, NULL };
        char *ensurepip[] = { "/usr/bin/env", home, "PIP_NO_INPUT=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", py, "-m",
                              "ensurepip", "--default-pip", NULL };
        char *pip[] = { "/usr/bin/env", home, cache_env, "PIP_NO_INPUT=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", py,
                        "-m", "pip", "install", "--progress-bar", "off", "-r", reqs, "cffi", NULL };
        /* ensurepip fails now and then under load and leaves a half-installed pip that a second
         * ensurepip takes as installed ("No module named pip._vendor..."): a retry starts from a
         * fresh venv */
        for (int attempt = 0; attempt < 3; attempt++) {
            if (attempt) {
                static const char *const parts[] = { "bin", "include", "lib", "lib64", "pyvenv.cfg" };
                char part[PATH_MAX + 16];
                if (x->abandoned)
                    break;
                line(s, x, "ensurepip failed: once more, in a fresh venv");
                for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++) {
                    snprintf(part, sizeof(part), "%s/%s", real, parts[k]);
                    kestrel__rm_tree(part);
                    unlink(part);
                }
            }
            line(s, x, "making the venv");
            if ((rc = run(s, x, venv, real, &builder, tail, sizeof(tail), NULL)) != 0) {
                snprintf(x->error, sizeof(x->error), "%s -m venv failed: %s", cfg->env_python, tail);
                goto out;
            }
            line(s, x, "installing pip into it");
            if ((rc = run(s, x, ensurepip, real, &builder, tail, sizeof(tail), NULL)) == 0)
                break;
        }
        if (rc != 0) {
            snprintf(x->error, sizeof(x->error), "ensurepip failed: %s", tail);
            goto out;
        }
        if ((rc = run(s, x, pip, real, &builder, tail, sizeof(tail), NULL)) != 0) {
            snprintf(x->error, sizeof(x->error), "pip install failed: %s", tail);
            rc = -1;
            goto out;
        }
        unlink(reqs);   /* the text may hold an index's credentials: not left for other builds or jobs */
        /* this build's own pip cache, gone with it: a cache shared between builds would let one
         * build's code (a setup.py) plant packages for the next one, another user's */
        if (builder.isolated)
            kd_ident_rm_tree(&builder, real, cache);
        else
            kestrel__rm_tree(cache);
    }
    {   /* it runs the venv's .pth files, the packages' code: a step like the others */
        char *argv[] = { "/usr/bin/env", home, "PIP_DISABLE_PIP_VERSION_CHECK=1", py, "-m", "pip", "freeze", "--all",
                         NULL };
        rc = run(s, x, argv, real, &builder, tail, sizeof(tail), &freeze);
    }
    if (rc != 0 || kd_env_seal(real) != 0) {
        snprintf(x->error, sizeof(x->error), "cannot seal the venv: %s", rc ? "pip freeze failed" : strerror(errno));
        rc = -1;
        goto out;
    }
    {   /* import kestrel: the bindings matching this kestreld, on the venv's path */
        char pth[PATH_MAX + 64], freeze_path[PATH_MAX + 32], site[PATH_MAX];
        if (!s->bindings[0])   /* the job's own words, where `import kestrel` would fail it */
            line(s, x, "no kestrel bindings for this venv: `import kestrel` fails in it (kestreld finds none "
                       "where --env-python imports from; see kestreld --env-python-path DIR)");
        if (s->bindings[0] && kd_env_site_packages(real, site, sizeof(site)) == 0) {
            snprintf(pth, sizeof(pth), "%s/kestrel-bindings.pth", site);
            if (kestrel__write_file_atomic(pth, s->bindings, strlen(s->bindings), 0644) == 0)
                chmod(pth, 0644);
        }
        snprintf(freeze_path, sizeof(freeze_path), "%s/kestrel-freeze.txt", real);
        if (kestrel__write_file_atomic(freeze_path, freeze.ptr ? freeze.ptr : "", freeze.size, 0644) < 0 ||
            chmod(freeze_path, 0644) < 0) {
            snprintf(x->error, sizeof(x->error), "cannot write %s", freeze_path);
            rc = -1;
            goto out;
        }
    }
    envs_path(s, final, sizeof(final), x->key);
    snprintf(link_tmp, sizeof(link_tmp), "%s.tmp", final);
    snprintf(rel, sizeof(rel), ".b/%s", strrchr(real, '/') + 1);
    unlink(link_tmp);
    if (symlink(rel, link_tmp) < 0 || rename(link_tmp, final) < 0) {
        snprintf(x->error, sizeof(x->error), "cannot put the venv in place: %s", strerror(errno));
        rc = -1;
        goto out;
    }
    line(s, x, "environment ready");
    rc = 0;
out:
    kestrel_buf_dispose(&freeze);
    if (rc != 0 && real[strlen(real) - 1] != 'X')
        kd_env_drop(&builder, real);
    snprintf(key, sizeof(key), "%s", x->key);
    if (x->abandoned) {
        snprintf(x->error, sizeof(x->error), "no queued job needs this environment any more: its build was stopped");
        fprintf(stderr, "kestreld: environment %.12s: %s\n", x->key, x->error);
    }
    pthread_mutex_lock(&s->mu);
    if (rc == 0 || x->abandoned) {   /* built: the entry goes, DATA/envs/KEY says it from now on; or
                                      * stopped for nobody: a job that asks later starts a build anew */
        for (size_t i = 0; i < s->n; i++)
            if (s->v[i] == x) {
                s->v[i] = s->v[--s->n];
                break;
            }
        free(x->requirements);
        free(x);
    } else {
        x->state = KD_ENV_FAILED;
        x->since_ms = kestrel__now_ms();
    }
    pthread_mutex_unlock(&s->mu);
    if (rc == 0)
        evict(s, key);
    kd_engine_kick(s->e);   /* its jobs may start, or fail */
}

/* 1 unless every job that asked for x is known to be queued no more: one past the list, or one whose
 * state the catalog cannot say now (busy), counts as waiting (a review: 64 cancelled jobs of one user
 * stopped the build a 65th, another user's, waited for). */
static int anyone_waits(kd_envs *s, env_entry *x)
{
    int64_t ids[MAX_WAITERS];
    size_t n;
    int more;
    pthread_mutex_lock(&s->mu);
    n = x->nwaiters;
    more = x->more_waiters;
    memcpy(ids, x->waiters, n * sizeof(ids[0]));
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n && !more; i++) {
        int state = 0, rc = kd_catalog_job_state(s->e->cat, ids[i], &state);
        if ((rc < 0 && rc != KESTREL_ENOTFOUND) || (rc == 0 && state == KESTREL_JOB_STATE_QUEUED))
            return 1;
    }
    return n == 0 || more;
}

static void forget(kd_envs *s, env_entry *x)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == x) {
            s->v[i] = s->v[--s->n];
            break;
        }
    pthread_mutex_unlock(&s->mu);
    free(x->requirements);
    free(x);
}

static void *builder_main(void *arg)
{
    kd_envs *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        env_entry *next = NULL;
        for (size_t i = 0; i < s->n && !next; i++)
            if (s->v[i]->state == KD_ENV_WAIT && !s->v[i]->started)
                next = s->v[i];
        if (next == NULL) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        next->started = 1;
        next->since_ms = kestrel__now_ms();
        pthread_mutex_unlock(&s->mu);
        if (anyone_waits(s, next))
            build(s, next);
        else
            forget(s, next);   /* every job that asked was cancelled meanwhile: not built for nobody */
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int kd_envs_new(kd_envs **out, kd_engine *e)
{
    kd_envs *s = calloc(1, sizeof(*s));
    char dir[PATH_MAX];
    if (s == NULL)
        return kestrel__error_oom();
    s->e = e;
    {
        char hex[65];
        kestrel__sha256_hex(e->cfg->data_dir, strlen(e->cfg->data_dir), hex);
        snprintf(s->builder_name, sizeof(s->builder_name), "env-builder-%.8s", hex);
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    envs_path(s, dir, sizeof(dir), "");
    if (kestrel__mkdirs(dir, 0711) < 0 || chmod(dir, 0711) < 0) {
        free(s);
        return kestrel__error_set(KESTREL_EIO, "cannot make %s: %s", dir, strerror(errno));
    }
    sweep_builds(s);
    if (pthread_create(&s->thread, NULL, builder_main, s) != 0) {
        free(s);
        return kestrel__error_set(KESTREL_EIO, "cannot start the environment builder");
    }
    *out = s;
    return 0;
}

void kd_envs_free(kd_envs *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    if (s->build_pid > 0) {   /* a build in progress is left (its dir goes at the next build of it) */
        kill(-s->build_pid, SIGKILL);
        kill(s->build_pid, SIGKILL);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i]->requirements);
        free(s->v[i]);
    }
    free(s);
}

void kd_envs_used(const char *dir)
{
    char used[PATH_MAX + 8];
    snprintf(used, sizeof(used), "%s.used", dir);
    close(open(used, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
}

char *kd_envs_packages(const char *dir)
{
    char path[PATH_MAX + 32];
    FILE *f;
    char *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof(path), "%s/kestrel-freeze.txt", dir);
    if ((f = fopen(path, "r")) != NULL) {
        if ((text = malloc(256 * 1024 + 1)) != NULL) {
            n = fread(text, 1, 256 * 1024, f);
            text[n] = '\0';
        }
        fclose(f);
    }
    return text ? text : strdup("");
}

static Kestrel__V1__Environment *entry_of(kd_envs *s, const char *name, const char *reqs)
{
    Kestrel__V1__Environment *v = calloc(1, sizeof(*v));
    char key[65], dir[PATH_MAX], digest[80];
    env_entry *x;
    if (v == NULL)
        return NULL;
    kestrel__v1__environment__init(v);
    key_of(s, reqs, key);
    snprintf(digest, sizeof(digest), "sha256:%s", key);
    v->name = strdup(name);
    v->digest = strdup(digest);
    v->requirements = strdup(reqs);
    if (ready(s, key, dir)) {
        v->state = strdup("ready");
        v->packages = kd_envs_packages(dir);
        v->error = strdup("");
    } else {
        pthread_mutex_lock(&s->mu);
        x = find(s, key);
        v->state = strdup(x == NULL ? "not built" : x->state == KD_ENV_WAIT ? "building" : "failed");
        v->error = strdup(x && x->state == KD_ENV_FAILED ? x->error : "");
        pthread_mutex_unlock(&s->mu);
        v->packages = strdup("");
    }
    return v;
}

Kestrel__V1__EnvironmentList *kd_envs_list(kd_envs *s, int show_requirements)
{
    Kestrel__V1__EnvironmentList *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    kestrel__v1__environment_list__init(l);
    if ((l->environments = calloc(s->e->cfg->nenvs + 1, sizeof(*l->environments))) == NULL) {
        free(l);
        return NULL;
    }
    for (size_t i = 0; i < s->e->cfg->nenvs; i++) {
        Kestrel__V1__Environment *v = entry_of(s, s->e->cfg->envs[i].name, s->e->cfg->envs[i].requirements);
        if (v && !show_requirements) {   /* an admin's file may name a private index with its password */
            free(v->requirements);
            v->requirements = strdup("");
        }
        if (v)
            l->environments[l->n_environments++] = v;
    }
    return l;
}
