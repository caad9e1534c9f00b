/* server/exec_local.c - local executor: work dir, optional git checkout, posix_spawn of argv
 * (no shell) in its own process group, stdout/stderr captured line by line into the catalog. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "exec_local.h"

extern char **environ;

#define LINE_MAX_BYTES 65536

typedef struct {
    kd_engine *e;
    kd_run *run;
    Kestrel__V1__Job *job;
    char token[80];
    char *devices;
} local_job;

int64_t kd_proc_start_time(pid_t pid)
{
    char path[64], buf[1024], *p;
    FILE *f;
    size_t n;
    long long start = -1;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* skip "pid (comm)": comm may contain spaces and parentheses */
    if ((p = strrchr(buf, ')')) == NULL)
        return -1;
    /* after ')' come fields 3.. ; starttime is field 22 */
    p++;
    for (int field = 3; field <= 22 && p; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            break;
        p++;
        if (field == 21)
            start = strtoll(p, NULL, 10);
    }
    return start;
}

static void sys_log(kd_engine *e, int64_t id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sys_log(kd_engine *e, int64_t id, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    kd_log_line l;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    l.time_ms = kestrel__now_ms();
    l.stream = KESTREL_LOG_SYSTEM;
    l.text = text;
    l.len = strlen(text);
    kd_engine_log(e, id, &l, 1);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(tmp, 0755) < 0 && errno != EEXIST) ? -1 : 0;
}

/* Make bytes safe for a protobuf string: invalid UTF-8 bytes become '?'. */
static void sanitize(char *s, size_t len)
{
    if (kestrel__utf8_valid(s, len))
        return;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80)
            s[i] = '?';
}

typedef struct {
    int fd;
    int stream;
    size_t len;
    char buf[LINE_MAX_BYTES];
} stream_buf;

/* Read what is available on s; append complete lines (and, at EOF or when full, the rest). */
static int pump(kd_engine *e, int64_t id, stream_buf *s)
{
    kd_log_line lines[256];
    size_t n = 0, start = 0;
    ssize_t r = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    int eof = r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN);
    int64_t now = kestrel__now_ms();
    if (r > 0)
        s->len += (size_t)r;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] != '\n')
            continue;
        s->buf[i] = '\0';
        sanitize(s->buf + start, i - start);
        lines[n++] = (kd_log_line){ now, s->stream, s->buf + start, i - start };
        start = i + 1;
        if (n == KESTREL__ARRAY_SIZE(lines)) {
            kd_engine_log(e, id, lines, n);
            n = 0;
        }
    }
    if ((eof || (start == 0 && s->len == sizeof(s->buf))) && start < s->len) {
        /* a final line without newline, or an over-long line: emit it as is */
        size_t len = s->len - start;
        char *copy = malloc(len + 1);
        if (copy) {
            memcpy(copy, s->buf + start, len);
            copy[len] = '\0';
            sanitize(copy, len);
            if (n)
                kd_engine_log(e, id, lines, n);
            n = 0;
            lines[0] = (kd_log_line){ now, s->stream, copy, len };
            kd_engine_log(e, id, lines, 1);
            free(copy);
        }
        start = s->len;
    }
    if (n)
        kd_engine_log(e, id, lines, n);
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    if (eof) {
        close(s->fd);
        s->fd = -1;
    }
    return 0;
}

/* Spawn argv with stdout/stderr to pipes (or one pipe when merge); returns pid or -errno. */
static pid_t spawn(char *const argv[], char *const envp[], const char *cwd, int out_fd[2], int err_fd[2])
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    pid_t pid;
    int rc;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd ? err_fd[1] : out_fd[1], 2);
    if (cwd)
        posix_spawn_file_actions_addchdir_np(&fa, cwd);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);   /* no descriptor of the daemon leaks into a job */
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(out_fd[1]);
    if (err_fd)
        close(err_fd[1]);
    return rc ? -rc : pid;
}

/* Run a helper (git) to completion, collecting its output (stdout and stderr) into out.
 * Returns the exit status, or -1 when it could not run or died. */
static int run_helper(char *const argv[], const char *cwd, kestrel_buf *out)
{
    static char *const extra[] = { "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "LC_ALL=C", NULL };
    char *env[512], chunk[4096];
    size_t k = 0;
    int p[2], status = -1;
    ssize_t r;
    pid_t pid;
    for (char **v = environ; *v && k < KESTREL__ARRAY_SIZE(env) - KESTREL__ARRAY_SIZE(extra); v++)
        env[k++] = *v;
    for (size_t i = 0; extra[i]; i++)
        env[k++] = extra[i];
    env[k] = NULL;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    if ((pid = spawn(argv, env, cwd, p, NULL)) < 0) {
        kestrel__buf_printf(out, "cannot run %s: %s\n", argv[0], strerror((int)-pid));
        close(p[0]);
        return -1;
    }
    while ((r = read(p[0], chunk, sizeof(chunk))) > 0 || (r < 0 && errno == EINTR))
        if (r > 0)
            kestrel__buf_put(out, chunk, (size_t)r);
    close(p[0]);
    if (waitpid(pid, &status, 0) < 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Log a helper's output as SYSTEM lines; leave its last non-empty line in last. */
static void log_output(kd_engine *e, int64_t id, kestrel_buf *out, char *last, size_t lastlen)
{
    char *line = out->ptr, *nl;
    if (last)
        last[0] = '\0';
    while (line && *line) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (*line) {
            sanitize(line, strlen(line));
            sys_log(e, id, "%s", line);
            if (last)
                snprintf(last, lastlen, "%s", line);
        }
        line = nl ? nl + 1 : NULL;
    }
}

/* Clone the job's git source into work; records the resolved commit. */
static int checkout(kd_engine *e, const Kestrel__V1__JobSpec *spec, int64_t id, const char *work, char *why, size_t n)
{
    kestrel_buf out = KESTREL_BUF_INIT;
    char last[512];
    char *clone[] = { "git", "clone", "--quiet", "--no-checkout", "--", spec->git_url, (char *)work, NULL };
    char *co[] = { "git", "checkout", "--quiet", "--detach", spec->git_ref[0] ? spec->git_ref : "HEAD", "--", NULL };
    char *rev[] = { "git", "rev-parse", "--verify", "HEAD^{commit}", NULL };
    int rc;

    sys_log(e, id, "cloning %s%s%s", spec->git_url, spec->git_ref[0] ? " at " : "", spec->git_ref);
    rc = run_helper(clone, NULL, &out);
    log_output(e, id, &out, last, sizeof(last));
    if (rc != 0) {
        snprintf(why, n, "git clone of %s failed: %s", spec->git_url, last[0] ? last : "no output");
        goto fail;
    }
    out.size = 0;
    rc = run_helper(co, work, &out);
    log_output(e, id, &out, last, sizeof(last));
    if (rc != 0) {
        snprintf(why, n, "git checkout of %s failed: %s", spec->git_ref, last[0] ? last : "no output");
        goto fail;
    }
    out.size = 0;
    if (out.ptr)
        out.ptr[0] = '\0';
    rc = run_helper(rev, work, &out);
    if (rc != 0 || out.size < 40) {
        snprintf(why, n, "cannot resolve the checked-out commit");
        goto fail;
    }
    out.ptr[40] = '\0';
    kd_catalog_job_set_commit(e->cat, id, out.ptr);
    sys_log(e, id, "checked out commit %s", out.ptr);
    kestrel_buf_dispose(&out);
    return 0;
fail:
    kestrel_buf_dispose(&out);
    return -1;
}

static int env_overridden(const char *entry, const Kestrel__V1__JobSpec *spec)
{
    size_t klen = strcspn(entry, "=");
    if (!strncmp(entry, "KESTREL_", 8) || (klen == 20 && !strncmp(entry, "CUDA_VISIBLE_DEVICES", 20)) ||
        (klen == 17 && !strncmp(entry, "CUDA_DEVICE_ORDER", 17)))
        return 1;
    for (size_t i = 0; i < spec->n_env; i++)
        if (strlen(spec->env[i]->key) == klen && !strncmp(entry, spec->env[i]->key, klen))
            return 1;
    return 0;
}

/* The job's environment: the daemon's, minus what Kestrel sets, plus the spec's, plus the contract. */
static char **build_env(const local_job *lj, const char *ckpt)
{
    const Kestrel__V1__Job *job = lj->job;
    const Kestrel__V1__JobSpec *spec = job->spec;
    size_t n = 0, k = 0;
    char **env;
    for (char **v = environ; *v; v++)
        n++;
    if ((env = calloc(n + spec->n_env + 10, sizeof(char *))) == NULL)
        return NULL;
    for (char **v = environ; *v; v++)
        if (!env_overridden(*v, spec))
            env[k++] = strdup(*v);
    for (size_t i = 0; i < spec->n_env; i++)
        if (asprintf(&env[k++], "%s=%s", spec->env[i]->key, spec->env[i]->value) < 0)
            env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_URL=%s", lj->e->url) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_TOKEN=%s", lj->token) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_JOB_ID=%lld", (long long)job->id) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_JOB_NAME=%s", spec->name) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_CHECKPOINT_DIR=%s", ckpt) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_RESTART_COUNT=%d", job->restart_count) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "CUDA_VISIBLE_DEVICES=%s", lj->devices) < 0) env[k - 1] = NULL;
    env[k++] = strdup("CUDA_DEVICE_ORDER=PCI_BUS_ID");
    for (size_t i = 0; i < k; i++) {
        if (env[i] == NULL) {
            for (size_t j = 0; j < k; j++)
                free(env[j]);
            free(env);
            return NULL;
        }
    }
    return env;
}

static void free_env(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

/* Capture both streams until the process exits and the pipes close; returns the wait status. */
static int capture(kd_engine *e, int64_t id, pid_t pid, stream_buf *out, stream_buf *err)
{
    int status = 0, exited = 0;
    while (out->fd >= 0 || err->fd >= 0 || !exited) {
        struct pollfd p[2];
        nfds_t np = 0;
        if (out->fd >= 0) p[np++] = (struct pollfd){ out->fd, POLLIN, 0 };
        if (err->fd >= 0) p[np++] = (struct pollfd){ err->fd, POLLIN, 0 };
        if (np == 0) {
            if (waitpid(pid, &status, 0) == pid || errno != EINTR)
                exited = 1;
            continue;
        }
        if (poll(p, np, exited ? 50 : 200) > 0) {
            for (nfds_t i = 0; i < np; i++) {
                if (!p[i].revents)
                    continue;
                pump(e, id, p[i].fd == out->fd ? out : err);
            }
        }
        if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
            exited = 1;
            /* stragglers holding our pipes open would keep the job alive forever */
            killpg(pid, SIGKILL);
        }
    }
    return status;
}

static void *runner(void *arg)
{
    local_job *lj = arg;
    kd_engine *e = lj->e;
    const Kestrel__V1__JobSpec *spec = lj->job->spec;
    int64_t id = lj->job->id;
    char dir[PATH_MAX], work[PATH_MAX], ckpt[PATH_MAX], cwd[PATH_MAX], why[1024] = "";
    stream_buf *out = calloc(1, sizeof(*out)), *err = calloc(1, sizeof(*err));
    char **env = NULL;
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, status;
    pid_t pid;
    struct stat st;

    snprintf(dir, sizeof(dir), "%s/jobs/%lld", e->cfg->data_dir, (long long)id);
    snprintf(work, sizeof(work), "%s/work", dir);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint", dir);
    if (out == NULL || err == NULL) {
        snprintf(why, sizeof(why), "out of memory");
        goto not_started;
    }
    nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS);   /* a rerun starts from a clean work dir */
    if (mkdir_p(ckpt) < 0 || (!spec->git_url[0] && mkdir_p(work) < 0)) {
        snprintf(why, sizeof(why), "cannot create %s: %s", dir, strerror(errno));
        goto not_started;
    }
    if (spec->git_url[0] && checkout(e, spec, id, work, why, sizeof(why)) < 0)
        goto not_started;
    snprintf(cwd, sizeof(cwd), "%s%s%s", work, spec->workdir[0] ? "/" : "", spec->workdir);
    if (stat(cwd, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, sizeof(why), "working directory '%s' does not exist in the job", spec->workdir);
        goto not_started;
    }
    if (kd_engine_term_requested(e, lj->run)) {
        kd_engine_finished(e, lj->run, KD_END_NOT_STARTED, 0, "stopped before start");
        goto done;
    }
    if ((env = build_env(lj, ckpt)) == NULL || pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        snprintf(why, sizeof(why), "cannot prepare the process: %s", strerror(errno));
        goto not_started;
    }
    {
        /* protobuf-c arrays carry a count, exec wants a NULL terminator */
        char **argv = calloc(spec->n_argv + 1, sizeof(char *));
        if (argv == NULL) {
            close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
            snprintf(why, sizeof(why), "out of memory");
            po[0] = pe[0] = -1;
            goto not_started;
        }
        memcpy(argv, spec->argv, spec->n_argv * sizeof(char *));
        pid = spawn(argv, env, cwd, po, pe);
        free(argv);
    }
    if (pid < 0) {
        snprintf(why, sizeof(why), "cannot execute '%s': %s", spec->argv[0], strerror((int)-pid));
        close(po[0]);
        close(pe[0]);
        sys_log(e, id, "%s", why);
        goto not_started;
    }
    kd_catalog_job_set_process(e->cat, id, pid, kd_proc_start_time(pid));
    kd_engine_set_pgid(e, lj->run, pid);
    out->fd = po[0];
    out->stream = KESTREL_LOG_STDOUT;
    err->fd = pe[0];
    err->stream = KESTREL_LOG_STDERR;
    status = capture(e, id, pid, out, err);
    if (WIFSIGNALED(status))
        kd_engine_finished(e, lj->run, KD_END_SIGNALED, WTERMSIG(status), NULL);
    else
        kd_engine_finished(e, lj->run, KD_END_EXITED, WEXITSTATUS(status), NULL);
    goto done;
not_started:
    if (po[0] >= 0 && pe[0] < 0) {
        close(po[0]);
        close(po[1]);
    }
    kd_engine_finished(e, lj->run, KD_END_NOT_STARTED, 0, why);
done:
    free_env(env);
    free(out);
    free(err);
    protobuf_c_message_free_unpacked(&lj->job->base, NULL);
    free(lj->devices);
    free(lj);
    return NULL;
}

static int local_start(kd_engine *e, kd_run *run, Kestrel__V1__Job *job, const char *token, const char *devices)
{
    local_job *lj = calloc(1, sizeof(*lj));
    pthread_attr_t at;
    pthread_t t;
    int rc;
    if (lj == NULL || (lj->devices = strdup(devices)) == NULL) {
        free(lj);
        protobuf_c_message_free_unpacked(&job->base, NULL);
        return kestrel__error_oom();
    }
    lj->e = e;
    lj->run = run;
    lj->job = job;
    snprintf(lj->token, sizeof(lj->token), "%s", token);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &at, runner, lj);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        protobuf_c_message_free_unpacked(&job->base, NULL);
        free(lj->devices);
        free(lj);
        return kestrel__error_set(KESTREL_ERROR, "cannot start a runner thread: %s", strerror(rc));
    }
    return 0;
}

/* Called with the engine lock held. */
static void local_signal(kd_engine *e, kd_run *run, int sig)
{
    (void)e;
    if (run->pgid > 0)
        killpg(run->pgid, sig);
}

const kd_executor kd_exec_local = { "local", local_start, local_signal };
