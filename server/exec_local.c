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
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "exec_local.h"
#include "exec_reap.h"
#include "exec_util.h"
#include "job_cgroup.h"
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

typedef struct {
    int fd;
    int stream;
    const Kestrel__V1__JobSpec *spec;   /* its secret values are masked in the lines */
    char prefix[16];                    /* a gang's rank: "[rank 1] " before each line ("" none) */
    size_t len;
    char buf[LINE_MAX_BYTES];
} stream_buf;

/* Log lines[0..n), each after s's prefix when it has one. */
static void log_lines(kd_engine *e, int64_t id, const stream_buf *s, kd_log_line *lines, size_t n)
{
    size_t plen = strlen(s->prefix);
    if (n == 0)
        return;
    if (plen == 0) {
        kd_engine_log(e, id, lines, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char *joined = malloc(plen + lines[i].len + 1);
        if (joined == NULL)
            continue;
        memcpy(joined, s->prefix, plen);
        memcpy(joined + plen, lines[i].text, lines[i].len);
        joined[plen + lines[i].len] = '\0';
        lines[i].text = joined;
        lines[i].len += plen;
        kd_engine_log(e, id, &lines[i], 1);
        free(joined);
    }
}

/* Read what is available on s; append complete lines (and, at EOF or when full, the rest). end: read
 * nothing more, log what is buffered and close s (STRAGGLER_MS). */
static int pump(kd_engine *e, int64_t id, stream_buf *s, int end)
{
    kd_log_line lines[256];
    size_t n = 0, start = 0;
    ssize_t r = end ? 0 : read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
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
            log_lines(e, id, s, lines, n);
            n = 0;
        }
    }
    if ((eof || (start == 0 && s->len == sizeof(s->buf))) && start < s->len) {
        /* a final line without newline, or an over-long line: emit it (up to where no secret value
         * is split: the rest starts the next piece) */
        size_t len = eof ? s->len - start : kd_exec_mask_cut(s->spec, s->buf, s->len);
        char *copy = malloc(len + 1);
        if (copy) {
            memcpy(copy, s->buf + start, len);
            copy[len] = '\0';
            kd_exec_mask(s->spec, copy, &len);
            kd_exec_sanitize(copy, len);
            log_lines(e, id, s, lines, n);
            n = 0;
            lines[0] = (kd_log_line){ now, s->stream, copy, len };
            log_lines(e, id, s, lines, 1);
            free(copy);
        }
        start += len;
    }
    log_lines(e, id, s, lines, n);
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    if (eof) {
        close(s->fd);
        s->fd = -1;
    }
    return 0;
}

/* How long the job's output is still read once its process ended and its group was killed: what
 * holds the pipes after that runs outside the group (setsid), and must not keep the job RUNNING, its
 * GPUs held and its cancel, a preemption or kestreld's stop waiting (a hostile test: `setsid sleep`
 * held a job for good, and kestreld's SIGTERM for 327 s). */
#define STRAGGLER_MS 2000

static void drop_stragglers(kd_engine *e, int64_t id, stream_buf *const *s, size_t n)
{
    int held = 0;
    for (size_t i = 0; i < n; i++)
        held |= s[i]->fd >= 0;
    if (!held)
        return;
    kd_exec_log(e, id, "the job's processes ended; what it started outside its process group still holds its "
                       "output, which is no longer read");
    for (size_t i = 0; i < n; i++)
        if (s[i]->fd >= 0)
            pump(e, id, s[i], 1);
}

/* What the run left running outside its group: stopped before the run is said to have ended. */
static void reap_left(kd_engine *e, int64_t id)
{
    size_t n = kd_exec_reap_left(e->cfg->data_dir, id);
    if (n)
        kd_exec_log(e, id, "stopped %zu process%s the job left running", n, n == 1 ? "" : "es");
}

/* Capture both streams until the process exits and the pipes close (or STRAGGLER_MS after it
 * exited); returns the wait status. */
static int capture(kd_engine *e, int64_t id, pid_t pid, stream_buf *out, stream_buf *err)
{
    int status = 0, exited = 0;
    int64_t exited_ms = 0;
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
                pump(e, id, p[i].fd == out->fd ? out : err, 0);
            }
        }
        if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
            exited = 1;
            exited_ms = kestrel__now_ms();
            /* stragglers holding our pipes open would keep the job alive forever */
            killpg(pid, SIGKILL);
        }
        if (exited && kestrel__now_ms() - exited_ms >= STRAGGLER_MS)
            drop_stragglers(e, id, (stream_buf *const[]){ out, err }, 2);
    }
    return status;
}

/* The job's own /tmp and /var/tmp (DATA/jobs/ID/tmp, kd_exec_spawn), or NULL (kd_exec_tmp_own). */
static const char *own_tmp(const kd_engine *e, const char *tmp)
{
    return kd_exec_tmp_own(e->cfg->data_dir) ? tmp : NULL;
}

/* A run's files at its end, before the end is recorded. Stopped for them (job_disk.c): they go, so
 * the disk it filled can record it, and is everyone's again. Then its dir becomes root's (0700): the
 * account's later jobs wrote into their finished jobs' dirs, which no one measures, past
 * --max-job-disk and until another user's job was stopped for the full disk (a hostile test). A
 * rerun's start hands it back (kd_ident_adopt). */
static void settle_files(kd_engine *e, kd_run *run, const kd_ident *ident)
{
    char dir[PATH_MAX];
    kd_engine_job_dir(e, run->id, NULL, dir, sizeof(dir));
    if (kd_engine_term_requested(e, run) == KD_TERM_DISK && kd_ident_empty(ident, dir) < 0)
        fprintf(stderr, "kestreld: job %lld: %s\n", (long long)run->id, kestrel_error_last()->message);
    if (ident->isolated && (chown(dir, 0, 0) < 0 || chmod(dir, 0700) < 0) && errno != ENOENT)
        fprintf(stderr, "kestreld: job %lld: cannot close %s to its account: %s\n", (long long)run->id, dir,
                strerror(errno));
}

/* ---- gangs: one process group a rank, wired together, stopped together -------------------- */

typedef struct {
    pid_t pid;
    int status, exited;
    stream_buf out, err;
} gang_rank;

/* A free TCP port of this host for rank 0's coordinator (bound, read, released: the usual way). */
static int reserve_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* What rank_env sets: the same names in base (kestreld's environment, the job's --env) are dropped,
 * so that every reader (getenv takes the first, sh the last) sees the rank's own. */
static const char *const rank_keys[] = {
    "KESTREL_RANK", "KESTREL_WORLD_SIZE", "KESTREL_LOCAL_RANK", "KESTREL_COORDINATOR", "RANK", "LOCAL_RANK",
    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES", "KERAS_DISTRIBUTION_PROCESS_ID", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
};

static int rank_key(const char *kv)
{
    size_t len = strcspn(kv, "=");
    for (size_t i = 0; i < KESTREL__ARRAY_SIZE(rank_keys); i++)
        if (strlen(rank_keys[i]) == len && !strncmp(kv, rank_keys[i], len))
            return 1;
    return 0;
}

/* base plus the rank's wiring: Kestrel's, torchrun's and Keras' variables, and its devices. */
static char **rank_env(char **base, const kd_run *run, int rank, const char *coord, int port, const char *devices)
{
    size_t n = 0, k = 0;
    char **env;
    int local = 0, local_size = 0;
    for (int r = 0; r < run->nranks; r++)
        if (run->rank_nodes[r] == run->rank_nodes[rank]) {
            local += r < rank;
            local_size++;
        }
    while (base[n])
        n++;
    if ((env = calloc(n + 20, sizeof(char *))) == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!rank_key(base[i]) && (env[k++] = strdup(base[i])) == NULL)
            goto fail;
#define PUT(...) do { if (asprintf(&env[k++], __VA_ARGS__) < 0) { env[--k] = NULL; goto fail; } } while (0)
    PUT("KESTREL_RANK=%d", rank);
    PUT("KESTREL_WORLD_SIZE=%d", run->nranks);
    PUT("KESTREL_LOCAL_RANK=%d", local);
    PUT("KESTREL_COORDINATOR=%s", coord);
    PUT("RANK=%d", rank);
    PUT("LOCAL_RANK=%d", local);
    PUT("WORLD_SIZE=%d", run->nranks);
    PUT("LOCAL_WORLD_SIZE=%d", local_size);
    PUT("MASTER_ADDR=127.0.0.1");
    PUT("MASTER_PORT=%d", port);
    PUT("KERAS_DISTRIBUTION_JOB_ADDRESSES=%s", coord);
    PUT("KERAS_DISTRIBUTION_NUM_PROCESSES=%d", run->nranks);
    PUT("KERAS_DISTRIBUTION_PROCESS_ID=%d", rank);
    PUT("CUDA_VISIBLE_DEVICES=%s", devices);
    PUT("CUDA_DEVICE_ORDER=PCI_BUS_ID");
#undef PUT
    return env;
fail:
    kd_exec_env_free(env);
    return NULL;
}

/* DATA/gangs/ID: "pid start" of every rank, a line written as each rank starts (one write(2)
 * each: a kill -9 of kestreld leaves every line of the ranks it started), so that the next daemon
 * stops them all (the catalog keeps rank 0's). kestreld's own directory: a job cannot write it. */
static int open_ranks_record(kd_engine *e, int64_t id)
{
    char dir[PATH_MAX], path[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/gangs", e->cfg->data_dir);
    snprintf(path, sizeof(path), "%s/%lld", dir, (long long)id);
    if (kestrel__mkdirs(dir, 0700) < 0)
        return -1;
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/* Signal every rank that still runs. */
static void gang_kill(gang_rank *rk, int n, int sig)
{
    for (int r = 0; r < n; r++)
        if (rk[r].pid > 0 && !rk[r].exited)
            killpg(rk[r].pid, sig);
}

/* Start every rank, capture them all, and report the gang's end once: the first rank to fail
 * stops the others (SIGTERM, SIGKILL after the grace period) and its status is the job's. */
static void run_gang(local_job *lj, const char *cwd, const char *ckpt, kd_ident *ident, const kd_exec_as *as)
{
    kd_engine *e = lj->e;
    kd_run *run = lj->run;
    const Kestrel__V1__JobSpec *spec = lj->job->spec;
    int64_t id = lj->job->id, kill_at = 0, all_ended_ms = 0;
    int n = run->nranks, started = 0, first_fail = -1, port = reserve_port(), grace, rec = -1, cgroup = -1;
    char rec_path[PATH_MAX], tmp[PATH_MAX];
    gang_rank *rk = calloc((size_t)n, sizeof(*rk));
    char **base = NULL, **argv = NULL, *devs = strdup(lj->devices), *field, why[512] = "", prog[PATH_MAX + 8], coord[64];
    char **rank_devs = calloc((size_t)n, sizeof(char *));
    struct pollfd *p = NULL;   /* two streams a rank */
    stream_buf **of = NULL;

    grace = spec->grace_period_s > 0 ? spec->grace_period_s : e->cfg->grace_s;
    snprintf(coord, sizeof(coord), "127.0.0.1:%d", port);
    if (rk == NULL || devs == NULL || rank_devs == NULL || port < 0 ||
        (argv = calloc(spec->n_argv + 1, sizeof(char *))) == NULL) {
        snprintf(why, sizeof(why), "cannot prepare the gang: %s", port < 0 ? "no free port" : "out of memory");
        goto not_started;
    }
    field = devs;   /* "d,d;d,d": rank by rank */
    for (int r = 0; r < n; r++) {
        char *semi = field ? strchr(field, ';') : NULL;
        rank_devs[r] = field ? field : "";
        if (semi)
            *semi = '\0';
        field = semi ? semi + 1 : NULL;
    }
    memcpy(argv, spec->argv, spec->n_argv * sizeof(char *));
    if ((base = kd_exec_job_env(e, lj->job, lj->token, ckpt, NULL, 1, as)) == NULL ||
        kd_exec_use_env(e, lj->job, &argv[0], prog, sizeof(prog)) < 0) {
        snprintf(why, sizeof(why), "%s", base ? kestrel_error_last()->message : "cannot prepare the environment");
        goto not_started;
    }
    kd_exec_log(e, id, "starting %d ranks (coordinator %s)", n, coord);
    snprintf(rec_path, sizeof(rec_path), "%s/gangs/%lld", e->cfg->data_dir, (long long)id);
    rec = open_ranks_record(e, id);
    kd_engine_job_dir(e, id, "tmp", tmp, sizeof(tmp));   /* every rank's /tmp */
    cgroup = kd_cgroup_job_open(id);   /* every rank in the job's one cgroup */
    for (int r = 0; r < n; r++) {
        int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
        char **env;
        pid_t pid;
        if (kd_engine_term_requested(e, run)) {   /* cancelled or preempted while starting: no more ranks */
            snprintf(why, sizeof(why), "stopped before start");
            goto stop_started;
        }
        env = rank_env(base, run, r, coord, port, rank_devs[r]);
        if (env == NULL || pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
            if (po[0] >= 0) {
                close(po[0]);
                close(po[1]);
            }
            kd_exec_env_free(env);
            snprintf(why, sizeof(why), "rank %d: cannot prepare the process: %s", r, strerror(errno));
            goto stop_started;
        }
        pid = kd_exec_spawn_rank(argv, env, cwd, po, pe, ident, cgroup, own_tmp(e, tmp));
        kd_exec_env_free(env);
        if (pid < 0) {
            close(po[0]);
            close(pe[0]);
            char because[256];
            snprintf(why, sizeof(why), "rank %d: cannot execute '%s': %s", r, spec->argv[0],
                     kd_exec_spawn_why((int)-pid, ident, because, sizeof(because)));
            goto stop_started;
        }
        rk[r].pid = pid;
        rk[r].out.fd = po[0];
        rk[r].out.stream = KESTREL_LOG_STDOUT;
        rk[r].err.fd = pe[0];
        rk[r].err.stream = KESTREL_LOG_STDERR;
        rk[r].out.spec = rk[r].err.spec = spec;
        snprintf(rk[r].out.prefix, sizeof(rk[r].out.prefix), "[rank %d] ", r);
        memcpy(rk[r].err.prefix, rk[r].out.prefix, sizeof(rk[r].err.prefix));
        if (r == 0)
            kd_catalog_job_set_process(e->cat, id, pid, kd_proc_start_time(pid));
        if (rec >= 0)
            dprintf(rec, "%d %lld\n", (int)pid, (long long)kd_proc_start_time(pid));
        kd_engine_set_rank_pgid(e, run, r, pid);
        started++;
    }
    if (cgroup >= 0) {
        close(cgroup);
        cgroup = -1;
    }
    if ((p = calloc((size_t)n * 2, sizeof(*p))) == NULL || (of = calloc((size_t)n * 2, sizeof(*of))) == NULL) {
        snprintf(why, sizeof(why), "cannot follow the gang: out of memory");
        goto stop_started;
    }
    for (;;) {
        nfds_t np = 0;
        int running = 0;
        for (int r = 0; r < n; r++) {
            stream_buf *sb[2] = { &rk[r].out, &rk[r].err };
            for (int k = 0; k < 2; k++)
                if (sb[k]->fd >= 0) {
                    of[np] = sb[k];
                    p[np++] = (struct pollfd){ sb[k]->fd, POLLIN, 0 };
                }
            running += !rk[r].exited;
        }
        if (np == 0 && running == 0)
            break;
        if (running == 0 && all_ended_ms == 0)
            all_ended_ms = kestrel__now_ms();
        if (running == 0 && kestrel__now_ms() - all_ended_ms >= STRAGGLER_MS) {
            drop_stragglers(e, id, of, np);   /* every rank ended: what still holds a pipe is no rank */
            continue;
        }
        if (np == 0 || poll(p, np, 100) > 0)
            for (nfds_t i = 0; i < np; i++)
                if (p[i].revents)
                    pump(e, id, of[i], 0);
        if (np == 0)
            usleep(20000);
        for (int r = 0; r < n; r++) {
            if (rk[r].exited || waitpid(rk[r].pid, &rk[r].status, WNOHANG) != rk[r].pid)
                continue;
            rk[r].exited = 1;
            killpg(rk[r].pid, SIGKILL);   /* its stragglers would hold the pipes open */
            kd_engine_set_rank_pgid(e, run, r, 0);   /* gone: never signal its (reusable) pid again */
            if (first_fail < 0 && !(WIFEXITED(rk[r].status) && WEXITSTATUS(rk[r].status) == 0)) {
                first_fail = r;
                if (kd_engine_term_requested(e, run))
                    ;   /* stopped by a cancel or a preemption: every rank was signalled already */
                else if (WIFSIGNALED(rk[r].status))
                    kd_exec_log(e, id, "rank %d ended by signal %d: stopping the other ranks", r, WTERMSIG(rk[r].status));
                else
                    kd_exec_log(e, id, "rank %d exited with code %d: stopping the other ranks", r,
                                WEXITSTATUS(rk[r].status));
                gang_kill(rk, n, SIGTERM);
                kill_at = kestrel__now_ms() + (int64_t)grace * 1000;
            }
        }
        if (kill_at && kestrel__now_ms() >= kill_at) {
            gang_kill(rk, n, SIGKILL);
            kill_at = 0;
        }
    }
    reap_left(e, id);
    settle_files(e, run, ident);
    {
        int st = rk[first_fail >= 0 ? first_fail : 0].status;
        if (WIFSIGNALED(st))
            kd_engine_finished(e, run, KD_END_SIGNALED, WTERMSIG(st), NULL);
        else
            kd_engine_finished(e, run, KD_END_EXITED, WEXITSTATUS(st), NULL);
    }
    goto done;
stop_started:
    gang_kill(rk, started, SIGKILL);
    for (int r = 0; r < started; r++) {
        waitpid(rk[r].pid, NULL, 0);
        close(rk[r].out.fd);
        close(rk[r].err.fd);
    }
    kd_exec_log(e, id, "%s", why);
not_started:
    if (cgroup >= 0)
        close(cgroup);
    kd_cgroup_job_end(id);   /* before the end is recorded: a rerun's run makes it again */
    settle_files(e, run, ident);
    kd_engine_finished(e, run, KD_END_NOT_STARTED, 0, why);
done:
    if (rec >= 0) {   /* every rank reaped: nothing for a later daemon to stop */
        close(rec);
        unlink(rec_path);
    }
    kd_exec_env_free(base);
    free(argv);
    free(rank_devs);
    free(devs);
    free(p);
    free(of);
    free(rk);
}

/* The work dir comes from the repository (code and/or datasets), staged by kestreld. */
static int staged(const Kestrel__V1__JobSpec *spec)
{
    return spec->code[0] || spec->n_data;
}

/* kd_exec_as's stop for the job's own helpers (its clone): the job cancelled, or preempted, meanwhile. */
static int term_requested(void *ctx)
{
    local_job *lj = ctx;
    return kd_engine_term_requested(lj->e, lj->run);
}

static void *runner(void *arg)
{
    local_job *lj = arg;
    kd_engine *e = lj->e;
    const Kestrel__V1__JobSpec *spec = lj->job->spec;
    int64_t id = lj->job->id;
    char dir[PATH_MAX], work[PATH_MAX], ckpt[PATH_MAX], tmp[PATH_MAX], cwd[PATH_MAX], why[1024] = "", prog[PATH_MAX + 8];
    stream_buf *out = calloc(1, sizeof(*out)), *err = calloc(1, sizeof(*err));
    char **env = NULL;
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, status;
    pid_t pid;
    kd_ident ident;
    kd_exec_as as = { NULL, NULL };
    const char *inside[3] = { ckpt, tmp, work };

    kd_engine_job_dir(e, id, NULL, dir, sizeof(dir));
    snprintf(work, sizeof(work), "%s/work", dir);
    snprintf(tmp, sizeof(tmp), "%s/tmp", dir);   /* its /tmp and /var/tmp (kd_exec_spawn) */
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
    as.stop = term_requested;
    as.stop_ctx = lj;
    if (kd_ident_rm_tree(&ident, dir, work) < 0 || kd_ident_rm_tree(&ident, dir, tmp) < 0) {   /* a rerun starts clean */
        snprintf(why, sizeof(why), "%s", kestrel_error_last()->message);
        goto not_started;
    }
    if (kestrel__mkdirs(ckpt, 0700) < 0 || kestrel__mkdirs(tmp, 0700) < 0 ||
        (!spec->git_url[0] && !staged(spec) && kestrel__mkdirs(work, 0700) < 0)) {
        snprintf(why, sizeof(why), "cannot create %s: %s", dir, strerror(errno));
        goto not_started;
    }
    /* the job's dir is its identity's alone; nobody else can list or read it */
    if (chmod(dir, 0700) < 0 || kd_ident_adopt(&ident, dir, inside, spec->git_url[0] || staged(spec) ? 2 : 3) < 0) {
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
    if (kd_exec_workdir_ok(work, spec->workdir) < 0) {
        snprintf(why, sizeof(why), "working directory '%s' is no folder of the job's files (a link out of them is "
                 "not followed): give --workdir a folder of the checkout or the code", spec->workdir);
        goto not_started;
    }
    if (kd_engine_term_requested(e, lj->run)) {
        kd_engine_finished(e, lj->run, KD_END_NOT_STARTED, 0, "stopped before start");
        goto done;
    }
    if (lj->run->nranks > 1) {
        run_gang(lj, cwd, ckpt, &ident, &as);
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
        int cgroup = kd_cgroup_job_open(id);
        pid = kd_exec_spawn(argv, env, cwd, po, pe, &ident, cgroup, own_tmp(e, tmp));
        if (cgroup >= 0)
            close(cgroup);
        free(argv);
    }
    if (pid < 0) {
        char because[256];
        snprintf(why, sizeof(why), "cannot execute '%s': %s", spec->argv[0],
                 kd_exec_spawn_why((int)-pid, &ident, because, sizeof(because)));
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
    reap_left(e, id);
    settle_files(e, lj->run, &ident);
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
    kd_cgroup_job_end(id);   /* before the end is recorded: a rerun's run makes it again */
    if (as.id)   /* its account known */
        settle_files(e, lj->run, &ident);
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
    for (int r = 0; run->rank_pgids && r < run->nranks; r++)   /* a gang: every rank's group */
        if (run->rank_pgids[r] > 0)
            killpg(run->rank_pgids[r], sig);
    if (!run->rank_pgids && run->pgid > 0)
        killpg(run->pgid, sig);
}

const kd_executor kd_exec_local = { "local", local_start, local_signal };
