/* server/exec_local.c - local executor: work dir, optional git checkout, posix_spawn of argv
 * (no shell) in its own process group, stdout/stderr captured line by line into the catalog. */
#include <errno.h>
#include <fcntl.h>
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
#include "exec_util.h"
#include "stage.h"
#include "store.h"

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

typedef struct {
    int fd;
    int stream;
    const Kestrel__V1__JobSpec *spec;   /* its secret values are masked in the lines */
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
        size_t l = i - start;
        s->buf[i] = '\0';
        kd_exec_mask(s->spec, s->buf + start, &l);   /* on the raw bytes: sanitizing could split a secret */
        kd_exec_sanitize(s->buf + start, l);
        lines[n++] = (kd_log_line){ now, s->stream, s->buf + start, l };
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
            kd_exec_mask(s->spec, copy, &len);
            kd_exec_sanitize(copy, len);
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

/* The work dir comes from the repository (code and/or datasets), staged by kestreld. */
static int staged(const Kestrel__V1__JobSpec *spec)
{
    return spec->code[0] || spec->n_data;
}

static void *runner(void *arg)
{
    local_job *lj = arg;
    kd_engine *e = lj->e;
    const Kestrel__V1__JobSpec *spec = lj->job->spec;
    int64_t id = lj->job->id;
    char dir[PATH_MAX], work[PATH_MAX], ckpt[PATH_MAX], cwd[PATH_MAX], why[1024] = "", prog[PATH_MAX + 8];
    stream_buf *out = calloc(1, sizeof(*out)), *err = calloc(1, sizeof(*err));
    char **env = NULL;
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, status;
    pid_t pid;
    struct stat st;
    kd_ident ident;
    kd_exec_as as = { NULL, NULL };
    const char *inside[2] = { ckpt, work };

    snprintf(dir, sizeof(dir), "%s/jobs/%lld", e->cfg->data_dir, (long long)id);
    snprintf(work, sizeof(work), "%s/work", dir);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint", dir);
    if (out == NULL || err == NULL) {
        snprintf(why, sizeof(why), "out of memory");
        goto not_started;
    }
    if (kd_ident_resolve(lj->job->owner, &ident) < 0) {
        snprintf(why, sizeof(why), "%s", kestrel_error_last()->message);
        goto not_started;
    }
    as.id = &ident;
    as.home = dir;
    if (kd_ident_rm_tree(&ident, dir, work) < 0) {   /* a rerun starts from a clean work dir */
        snprintf(why, sizeof(why), "%s", kestrel_error_last()->message);
        goto not_started;
    }
    if (kestrel__mkdirs(ckpt, 0700) < 0 || (!spec->git_url[0] && !staged(spec) && kestrel__mkdirs(work, 0700) < 0)) {
        snprintf(why, sizeof(why), "cannot create %s: %s", dir, strerror(errno));
        goto not_started;
    }
    /* the job's dir is its identity's alone; nobody else can list or read it */
    if (chmod(dir, 0700) < 0 || kd_ident_adopt(&ident, dir, inside, spec->git_url[0] || staged(spec) ? 1 : 2) < 0) {
        snprintf(why, sizeof(why), "%s", kestrel_error_last()->message);
        goto not_started;
    }
    if (spec->git_url[0] && kd_exec_checkout(e, spec, id, work, why, sizeof(why), &as) < 0)
        goto not_started;
    if (staged(spec)) {
        kd_exec_log(e, id, "staging %s%s%zu dataset(s)", spec->code[0] ? spec->code : "", spec->code[0] ? " and " : "",
                    spec->n_data);
        if (kd_stage_work(e, &ident, spec, work, why, sizeof(why)) < 0)
            goto not_started;
    }
    snprintf(cwd, sizeof(cwd), "%s%s%s", work, spec->workdir[0] ? "/" : "", spec->workdir);
    if (stat(cwd, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, sizeof(why), "working directory '%s' does not exist in the job", spec->workdir);
        goto not_started;
    }
    if (kd_engine_term_requested(e, lj->run)) {
        kd_engine_finished(e, lj->run, KD_END_NOT_STARTED, 0, "stopped before start");
        goto done;
    }
    if ((env = kd_exec_job_env(e, lj->job, lj->token, ckpt, lj->devices, 1, &as)) == NULL || pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
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
        if (kd_exec_use_env(e, lj->job, &argv[0], prog, sizeof(prog)) < 0) {
            snprintf(why, sizeof(why), "%s", kestrel_error_last()->message);
            free(argv);
            close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
            po[0] = pe[0] = -1;
            goto not_started;
        }
        pid = kd_exec_spawn(argv, env, cwd, po, pe, &ident);
        free(argv);
    }
    if (pid < 0) {
        snprintf(why, sizeof(why), "cannot execute '%s': %s", spec->argv[0], strerror((int)-pid));
        close(po[0]);
        close(pe[0]);
        kd_exec_log(e, id, "%s", why);
        goto not_started;
    }
    kd_catalog_job_set_process(e->cat, id, pid, kd_proc_start_time(pid));
    kd_engine_set_pgid(e, lj->run, pid);
    out->fd = po[0];
    out->stream = KESTREL_LOG_STDOUT;
    err->fd = pe[0];
    err->stream = KESTREL_LOG_STDERR;
    out->spec = err->spec = spec;
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
    kd_exec_env_free(env);
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
