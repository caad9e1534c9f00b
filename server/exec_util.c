/* server/exec_util.c - what every executor needs: system log lines, the job's environment
 * contract, running helper commands to completion, the check of a job's --workdir (its --git
 * checkout: exec_git.c). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "exec_util.h"
#include "envs.h"
#include "identity.h"
#include "file_open.h"

extern char **environ;

void kd_exec_log(kd_engine *e, int64_t id, const char *fmt, ...)
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

/* Make bytes safe for a protobuf string: invalid UTF-8 bytes become '?'. */
void kd_exec_sanitize(char *s, size_t len)
{
    if (kestrel__utf8_valid(s, len))
        return;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80)
            s[i] = '?';
}

static long max_procs;   /* kd_exec_set_max_procs */

void kd_exec_set_max_procs(long n)
{
    max_procs = n;
}

const char *kd_exec_spawn_why(int err, const kd_ident *id, char *buf, size_t n)
{
    if (err != EAGAIN || max_procs <= 0 || id == NULL || !id->isolated)
        return strerror(err);
    snprintf(buf, n, "the account %s is at its process limit (--max-job-processes %ld: the processes and threads "
             "of this user's jobs, all together)", id->name, max_procs);
    return buf;
}

/* The number in file, or -1 (missing, or "max"). */
static long read_long(const char *file)
{
    long v = -1;
    FILE *f = fopen(file, "r");
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* A quarter of the tasks this host lets kestreld's jobs have: the kernel's pid_max and threads-max,
 * and the pids.max of kestreld's cgroup and those above it (cgroup v2: a systemd unit's TasksMax,
 * 15 % of the host by default, is the bound its jobs reach first). One user's jobs may not take the
 * pids every other user, and kestreld, needs. 8192 where pid_max is 32768 and nothing is lower. */
long kd_exec_default_max_procs(void)
{
    long lim = read_long("/proc/sys/kernel/pid_max"), v = read_long("/proc/sys/kernel/threads-max");
    char line[PATH_MAX], dir[PATH_MAX + 32];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (lim < 1024)
        lim = 32768;
    if (v > 0 && v < lim)
        lim = v;
    while (f && fgets(line, sizeof(line), f)) {   /* "0::/path" (v2), "N:pids:/path" (v1) */
        char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;
        const char *base = NULL;
        if (path == NULL || path[1] != '/')
            continue;
        *path++ = '\0';
        if (!strcmp(ctl + 1, ""))
            base = "/sys/fs/cgroup";
        else if (!strcmp(ctl + 1, "pids"))
            base = "/sys/fs/cgroup/pids";
        else
            continue;
        path[strcspn(path, "\n")] = '\0';
        for (char *cut;;) {   /* the cgroup, then each above it */
            snprintf(dir, sizeof(dir), "%s%s/pids.max", base, path);
            if ((v = read_long(dir)) > 0 && v < lim)
                lim = v;
            if ((cut = strrchr(path, '/')) == NULL || cut == path)
                break;
            *cut = '\0';
        }
    }
    if (f)
        fclose(f);
    return lim / 4 > 64 ? lim / 4 : 64;
}

/* Spawn argv with stdout/stderr to pipes (or one pipe when merge); returns pid or -errno. */
/* fork + exec as another identity (posix_spawn cannot change uid): in the child only
 * async-signal-safe calls; an exec failure comes back as errno through a close-on-exec pipe. */
#define DIE_WITH_PARENT 1   /* spawn's flags */
#define LIMITED 2           /* user code (a job, a build step): max_procs applies */

static pid_t spawn_as(char *const argv[], char *const envp[], const char *cwd, int out_fd[2], int err_fd[2],
                      const kd_ident *id, int flags, int cgroup_fd, const char *tmp)
{
    int ep[2], err = 0;
    sigset_t none, all, old;
    pid_t pid, daemon_pid = getpid();
    ssize_t r;
    if (pipe2(ep, O_CLOEXEC) < 0)
        return -errno;
    sigfillset(&all);
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC), e;
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        for (int s = 1; s < NSIG; s++)
            sigaction(s, &dfl, NULL);
        /* a session of its own: no controlling terminal of kestreld's to push keystrokes into
         * (TIOCSTI); the pid is still the process group, for killpg */
        if (setsid() < 0)
            goto fail;
        if (null < 0 || dup2(null, 0) < 0 || dup2(out_fd[1], 1) < 0 || dup2(err_fd ? err_fd[1] : out_fd[1], 2) < 0)
            goto fail;
        /* the account's processes, before root is gone (only root may raise the hard limit); an
         * account already past it fails the exec with EAGAIN (Linux checks it at the uid change) */
        if ((flags & LIMITED) && max_procs > 0) {
            struct rlimit nproc = { (rlim_t)max_procs, (rlim_t)max_procs };
            if (setrlimit(RLIMIT_NPROC, &nproc) < 0)
                goto fail;
        }
        /* into the job's cgroup (job_cgroup.c) while still root: what it starts stays there. A host
         * that refuses it runs the job all the same, found by its marker alone (a review) */
        if (cgroup_fd >= 0 && write(cgroup_fd, "0", 1) != 1) {
        }
        /* /tmp and /var/tmp its own (tmp, in the job's dir, measured there: job_disk.c), as systemd's
         * PrivateTmp: written there, a job's files filled the data disk unmeasured, and another job
         * was stopped for it (a hostile test). A host that refuses it runs the job with the host's */
        if (tmp && unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
            mount(tmp, "/tmp", NULL, MS_BIND, NULL) == 0)
            (void)mount(tmp, "/var/tmp", NULL, MS_BIND, NULL);
        /* groups first (needs root), then gid, then uid; none of them may be undone */
        if (setgroups(0, NULL) < 0 || setresgid(id->gid, id->gid, id->gid) < 0 ||
            setresuid(id->uid, id->uid, id->uid) < 0)
            goto fail;
        if (setuid(0) == 0)   /* paranoia: root must be gone for good */
            _exit(126);
        /* a gang's rank never outlives the thread that runs the gang (alone it is of no use: its
         * peers die with a kill -9 of kestreld too). After the credentials change, which clears it;
         * a daemon gone before this line is seen by getppid. */
        if ((flags & DIE_WITH_PARENT) && (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != daemon_pid))
            goto fail;
        /* no way back up through setuid programs (sudo, su, pkexec) */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
            goto fail;
        if (cwd && chdir(cwd) < 0)   /* as the identity: a link in its dir leads nowhere root could go */
            goto fail;
        if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {   /* kernels before 5.11 */
            long max = sysconf(_SC_OPEN_MAX);
            for (int fd = 3; fd < (max > 0 && max < 1 << 20 ? max : 1 << 16); fd++)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvpe(argv[0], argv, envp);
    fail:
        e = errno;
        if (write(ep[1], &e, sizeof(e)) < 0)
            _exit(127);
        _exit(127);
    }
    err = pid < 0 ? errno : 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    close(out_fd[1]);
    if (err_fd)
        close(err_fd[1]);
    if (pid < 0) {
        close(ep[0]);
        return -err;
    }
    while ((r = read(ep[0], &err, sizeof(err))) < 0 && errno == EINTR)
        ;
    close(ep[0]);
    if (r == sizeof(err)) {
        waitpid(pid, NULL, 0);
        return -err;
    }
    return pid;
}

static pid_t spawn(char *const argv[], char *const envp[], const char *cwd, int out_fd[2], int err_fd[2],
                   const kd_ident *id, int flags, int cgroup_fd, const char *tmp)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    pid_t pid;
    int rc;
    if (id && id->isolated)
        return spawn_as(argv, envp, cwd, out_fd, err_fd, id, flags, cgroup_fd, tmp);
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

int kd_exec_private_tmp(void)
{
    static int known = -1;
    pid_t pid;
    int st;
    if (known >= 0)
        return known;
    if (geteuid() != 0)
        return known = 0;
    if ((pid = fork()) == 0)   /* the child makes the namespace a job's start makes, and is gone */
        _exit(unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 ? 0 : 1);
    known = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    return known;
}

int kd_exec_tmp_own(const char *data_dir)
{
    char real[PATH_MAX];
    if (!kd_exec_private_tmp() || realpath(data_dir, real) == NULL)
        return 0;
    return !(!strcmp(real, "/tmp") || !strncmp(real, "/tmp/", 5) || !strcmp(real, "/var/tmp") ||
             !strncmp(real, "/var/tmp/", 9));
}

pid_t kd_exec_spawn(char *const argv[], char *const envp[], const char *cwd, int out_fd[2], int err_fd[2],
                    const kd_ident *id, int cgroup_fd, const char *tmp)
{
    return spawn(argv, envp, cwd, out_fd, err_fd, id, LIMITED, cgroup_fd, tmp);
}

pid_t kd_exec_spawn_rank(char *const argv[], char *const envp[], const char *cwd, int out_fd[2], int err_fd[2],
                         const kd_ident *id, int cgroup_fd, const char *tmp)
{
    return spawn(argv, envp, cwd, out_fd, err_fd, id, DIE_WITH_PARENT | LIMITED, cgroup_fd, tmp);
}

/* out kept to its first and last KEEP bytes past 4 KEEP (a server that streams "remote:" lines for
 * the clone's hour), the bytes left out said between them. */
#define KEEP (64u * 1024)
static void keep_ends(kestrel_buf *out, int64_t *dropped)
{
    char mark[80];
    size_t head, tail, n;
    if (out->size <= 4 * KEEP)
        return;
    head = KEEP;
    tail = KEEP;
    *dropped += (int64_t)(out->size - head - tail);
    n = (size_t)snprintf(mark, sizeof(mark), "\n[%lld bytes of output left out]\n", (long long)*dropped);
    /* an earlier mark sits inside the part dropped now: the head stays as it was */
    memmove(out->ptr + head + n, out->ptr + out->size - tail, tail);
    memcpy(out->ptr + head, mark, n);
    out->size = head + n + tail;
    out->ptr[out->size] = '\0';
}

/* An entry of kestreld's environment that configures its environment builds, and no job: PIP_* (a
 * team index, often with its credentials; README). */
static int builders_own(const char *entry)
{
    return !strncmp(entry, "PIP_", 4);
}

/* An environment entry's name is one of names (NULL-terminated "K=V" entries), or one git reads its
 * configuration or transports from, which a helper given env must take from env alone. */
static int overridden(const char *entry, char *const *names)
{
    size_t klen = strcspn(entry, "=");
    if (!strncmp(entry, "GIT_CONFIG", 10) || (klen == 18 && !strncmp(entry, "GIT_ALLOW_PROTOCOL", 18)) ||
        (klen == 22 && !strncmp(entry, "GIT_PROTOCOL_FROM_USER", 22)))
        return 1;
    for (size_t i = 0; names && names[i]; i++)
        if (strcspn(names[i], "=") == klen && !strncmp(names[i], entry, klen))
            return 1;
    return 0;
}

/* What of kestreld's environment a local job gets: these, and what --job-env adds. Everything else
 * stays kestreld's: a job read AWS keys, a terraform config and the daemon's OLDPWD from its own
 * /proc/self/environ (a hostile test). NAME* is a prefix. (HOME, USER, LOGNAME: the job's own
 * account's where it has one.) */
static const char *const job_env_default[] = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH", "KERAS_*",
    "CUDA_*", "NVIDIA_*", "XLA_*", "JAX_*", "OMP_NUM_THREADS", NULL
};
/* The network's settings: jobs and the environment builds get them alike (a review: jobs behind a
 * proxy broke). */
static const char *const network_env[] = {
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", NULL
};
static const kd_config *passed;   /* kd_exec_set_job_env: its --job-env */

static int name_matches(const char *pattern, const char *entry, size_t klen)
{
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '*')
        return klen >= n - 1 && !strncmp(entry, pattern, n - 1);
    return klen == n && !strncmp(entry, pattern, n);
}

int kd_exec_env_listed(const char *const *names, const char *entry)
{
    size_t klen = strcspn(entry, "=");
    for (size_t i = 0; names[i]; i++)
        if (name_matches(names[i], entry, klen))
            return 1;
    return 0;
}

int kd_exec_network_env(const char *entry)
{
    return kd_exec_env_listed(network_env, entry);
}

static int inherited(const char *entry)
{
    size_t klen = strcspn(entry, "=");
    if (kd_exec_env_listed(job_env_default, entry) || kd_exec_network_env(entry))
        return 1;
    for (size_t i = 0; passed && i < passed->njob_env; i++)
        if (name_matches(passed->job_env[i], entry, klen))
            return 1;
    return 0;
}

void kd_exec_set_job_env(const kd_config *cfg)
{
    passed = cfg;
}

int kd_exec_job_env_pass(kd_config *cfg, const char *name)
{
    size_t n = strlen(name), ok = n > 0 && !(name[0] >= '0' && name[0] <= '9') && name[0] != '*';
    for (size_t i = 0; ok && i < n; i++)
        ok = (name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
             name[i] == '_' || (name[i] == '*' && i == n - 1);
    if (!ok || n > 128) {
        fprintf(stderr, "kestreld: --job-env: a variable's name (letters, digits, _), or a prefix ending in *, "
                "got '%s'\n", name);
        return -1;
    }
    if (cfg->njob_env == sizeof(cfg->job_env) / sizeof(cfg->job_env[0])) {
        fprintf(stderr, "kestreld: --job-env: at most 64\n");
        return -1;
    }
    cfg->job_env[cfg->njob_env++] = name;
    return 0;
}

/* Run a helper (git) to completion, collecting its output (stdout and stderr) into out (its ends,
 * past 256 KiB; or whole up to as->whole_up_to, the helper stopped past it), with as's environment
 * added, time limit and stop (exec_util.h). Returns the exit
 * status, or -1 when it could not run, died or was stopped. Its output is read until the helper has
 * ended and then 2 s more at most: a process it left (setsid) may hold the pipe for good. */
int kd_exec_run(char *const argv[], const char *cwd, kestrel_buf *out, const kd_exec_as *as)
{
    static char *const extra[] = { "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "LC_ALL=C", NULL };
    char home[PATH_MAX + 8];
    char *env[512], chunk[4096];
    size_t k = 0, more = 0;
    int p[2], status = -1, stopped = 0, reaped = 0;
    int64_t deadline = as && as->timeout_s > 0 ? kestrel__now_ms() + (int64_t)as->timeout_s * 1000 : 0;
    int64_t ended = 0, dropped = 0;   /* ended: when the helper was reaped or killed */
    ssize_t r;
    pid_t pid;
    while (as && as->env && as->env[more] && more < 16)
        more++;
    for (char **v = environ; *v && k < KESTREL__ARRAY_SIZE(env) - KESTREL__ARRAY_SIZE(extra) - more - 2; v++)
        if (!(as && as->home && !strncmp(*v, "HOME=", 5)) && !overridden(*v, extra) &&
            !(as && as->env && overridden(*v, as->env)) && !(as && as->job_env && builders_own(*v)) &&
            (!as || !(as->job_env || (as->id && as->id->isolated)) || inherited(*v) ||
             (as->job_env && (!strncmp(*v, "SLURM_", 6) || !strncmp(*v, "SBATCH_", 7)))))
            env[k++] = *v;
    for (size_t i = 0; extra[i]; i++)
        env[k++] = extra[i];
    for (size_t i = 0; i < more; i++)
        env[k++] = as->env[i];
    if (as && as->home) {
        snprintf(home, sizeof(home), "HOME=%s", as->home);
        env[k++] = home;
    }
    env[k] = NULL;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    /* not limited: kestreld's own helper (the kill of a build's processes, an rm) must run even
     * where the account is at max_procs, which makes a limited exec fail (EAGAIN) */
    if ((pid = spawn(argv, env, cwd, p, NULL, as ? as->id : NULL, 0, -1, NULL)) < 0) {
        kestrel__buf_printf(out, "cannot run %s: %s\n", argv[0], strerror((int)-pid));
        close(p[0]);
        return -1;
    }
    for (;;) {   /* until its output ends; a stop or the deadline kill its group (a hung clone held GPUs) */
        struct pollfd pf = { p[0], POLLIN, 0 };
        int64_t now = kestrel__now_ms();
        if (!stopped && !reaped && ((as && as->stop && as->stop(as->stop_ctx)) || (deadline && now >= deadline))) {
            stopped = deadline && now >= deadline ? 2 : 1;
            killpg(pid, SIGKILL);
            ended = now;
        }
        if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
            reaped = 1;
            ended = ended ? ended : now;
        }
        if (ended && now - ended > 2000)
            break;   /* what it left holds the pipe: not waited for */
        if (poll(&pf, 1, 200) < 0 && errno != EINTR)
            break;
        if (!(pf.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        if ((r = read(p[0], chunk, sizeof(chunk))) > 0) {
            kestrel__buf_put(out, chunk, (size_t)r);
            if (!as || !as->whole_up_to)
                keep_ends(out, &dropped);
            else if (out->size > as->whole_up_to && !stopped) {
                killpg(pid, SIGKILL);
                stopped = 3;
                ended = kestrel__now_ms();
                break;   /* nothing more of it is read */
            }
        } else if (r == 0 || errno != EINTR) {
            break;
        }
    }
    close(p[0]);
    if (stopped)
        kestrel__buf_printf(out, "\n%s\n", stopped == 3 ? "stopped: its output ran past what is read"
                                           : stopped == 2 ? "stopped: it ran past its time limit" : "stopped: the job was stopped");
    if (!reaped && waitpid(pid, &status, 0) < 0)
        return -1;
    return WIFEXITED(status) && !stopped ? WEXITSTATUS(status) : -1;
}

static int spec_sets(const Kestrel__V1__JobSpec *spec, const char *key, size_t klen)
{
    for (size_t i = 0; i < spec->n_env; i++)
        if (strlen(spec->env[i]->key) == klen && !strncmp(key, spec->env[i]->key, klen))
            return 1;
    return 0;
}

static int env_overridden(const char *entry, const Kestrel__V1__JobSpec *spec, int own_user)
{
    size_t klen = strcspn(entry, "=");
    if (own_user && (!strncmp(entry, "HOME=", 5) || !strncmp(entry, "USER=", 5) || !strncmp(entry, "LOGNAME=", 8)))
        return 1;
    /* PIP_*: the environment builds' (README: a team index or proxy, often with its credentials),
     * not every job's (a hostile test read kestreld's environment from a job) */
    if (!strncmp(entry, "KESTREL_", 8) || builders_own(entry) ||
        (klen == 20 && !strncmp(entry, "CUDA_VISIBLE_DEVICES", 20)) ||
        (klen == 17 && !strncmp(entry, "CUDA_DEVICE_ORDER", 17)))
        return 1;
    for (size_t i = 0; i < spec->n_secret_env; i++)
        if (strlen(spec->secret_env[i]->key) == klen && !strncmp(entry, spec->secret_env[i]->key, klen))
            return 1;
    return spec_sets(spec, entry, klen);
}

/* The job's secret values worth masking (4 bytes or more: shorter ones would mask ordinary text). A
 * value of several lines is masked line by line, since output is logged a line at a time (a PEM
 * key printed whole: a hostile test saw each of its lines in the log). */
#define SECRET_MIN 4

/* The next line of a secret value from *v on (its '\r' left out): its length, *v moved past it; -1
 * at the end. */
static ssize_t secret_part(const char **v, const char **part)
{
    size_t n;
    if (**v == '\0')
        return -1;
    *part = *v;
    n = strcspn(*v, "\n");
    *v += n + ((*v)[n] == '\n');
    return (ssize_t)(n && (*part)[n - 1] == '\r' ? n - 1 : n);
}

void kd_exec_mask(const Kestrel__V1__JobSpec *spec, char *s, size_t *len)
{
    for (size_t i = 0; i < spec->n_secret_env; i++) {
        const char *v = spec->secret_env[i]->value, *part;
        ssize_t vl;
        while ((vl = secret_part(&v, &part)) >= 0) {
            char *p;
            if (vl < SECRET_MIN)
                continue;
            while ((p = memmem(s, *len, part, (size_t)vl)) != NULL) {
                memcpy(p, "***", 3);
                memmove(p + 3, p + vl, *len - (size_t)(p - s) - (size_t)vl);
                *len -= (size_t)vl - 3;
                s[*len] = '\0';
            }
        }
    }
}

size_t kd_exec_mask_cut(const Kestrel__V1__JobSpec *spec, const char *s, size_t len)
{
    size_t longest = 0, cut;
    int moved = 1;
    for (size_t i = 0; i < spec->n_secret_env; i++) {
        const char *v = spec->secret_env[i]->value, *part;
        ssize_t vl;
        while ((vl = secret_part(&v, &part)) >= 0)
            if (vl >= SECRET_MIN && (size_t)vl > longest)
                longest = (size_t)vl;
    }
    if (longest == 0 || longest - 1 >= len / 2)
        return len;   /* nothing to mask, or a value too long to keep a window of (said in README) */
    cut = len - (longest - 1);   /* what follows may begin a value the next read completes */
    while (moved) {   /* and no value found whole may straddle the cut: it goes after it, whole */
        moved = 0;
        for (size_t i = 0; i < spec->n_secret_env; i++) {
            const char *v = spec->secret_env[i]->value, *part;
            ssize_t vl;
            while ((vl = secret_part(&v, &part)) >= 0) {
                const char *p = s, *end = s + len;
                if (vl < SECRET_MIN)
                    continue;
                while ((p = memmem(p, (size_t)(end - p), part, (size_t)vl)) != NULL && p < s + cut) {
                    if (p + vl > s + cut) {
                        cut = (size_t)(p - s);
                        moved = 1;
                    }
                    p++;
                }
            }
        }
    }
    return cut ? cut : len;
}

/* KESTREL_PARAMS={"lr":"0.001",...}: the job's parameters as one JSON object of strings. */
static char *params_env(const Kestrel__V1__JobSpec *spec)
{
    cJSON *o = cJSON_CreateObject();
    char *json, *out = NULL;
    for (size_t i = 0; o && i < spec->n_params; i++)
        if (cJSON_AddStringToObject(o, spec->params[i]->key, spec->params[i]->value) == NULL) {
            cJSON_Delete(o);
            return NULL;
        }
    json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (json && asprintf(&out, "KESTREL_PARAMS=%s", json) < 0)
        out = NULL;
    cJSON_free(json);
    return out;
}

char **kd_exec_job_env(const kd_engine *e, const Kestrel__V1__Job *job, const char *token, const char *ckpt,
                       const char *devices, int inherit, const kd_exec_as *as)
{
    int own = as && as->id && as->id->isolated;
    const Kestrel__V1__JobSpec *spec = job->spec;
    size_t n = 0, k = 0;
    char **env, venv[PATH_MAX] = "", digest[80], why[256];
    if (e->envs && kd_envs_check(e->envs, job->id, spec, why, sizeof(why), venv, digest) != KD_ENV_READY)
        venv[0] = '\0';
    for (char **v = environ; inherit && *v; v++)
        n++;
    if ((env = calloc(n + spec->n_env + spec->n_secret_env + 17, sizeof(char *))) == NULL)
        return NULL;
    for (char **v = environ; inherit && *v; v++)
        if (inherited(*v) && !env_overridden(*v, spec, own) &&
            !(venv[0] && (!strncmp(*v, "PATH=", 5) || !strncmp(*v, "PYTHONHOME=", 11))))
            env[k++] = strdup(*v);
    if (venv[0]) {   /* `python` and every tool of the environment come first */
        const char *path = getenv("PATH");
        if (asprintf(&env[k++], "PATH=%s/bin:%s", venv, path ? path : "/usr/bin:/bin") < 0) env[k - 1] = NULL;
        if (asprintf(&env[k++], "VIRTUAL_ENV=%s", venv) < 0) env[k - 1] = NULL;
    }
    if (own) {   /* before the spec's env, which may set its own HOME */
        static const char *const keys[] = { "HOME", "USER", "LOGNAME" };
        for (size_t i = 0; i < 3; i++)
            if (!spec_sets(spec, keys[i], strlen(keys[i])) &&
                asprintf(&env[k++], "%s=%s", keys[i], i ? as->id->name : as->home) < 0)
                env[k - 1] = NULL;
    }
    for (size_t i = 0; i < spec->n_env; i++)
        if (asprintf(&env[k++], "%s=%s", spec->env[i]->key, spec->env[i]->value) < 0)
            env[k - 1] = NULL;
    for (size_t i = 0; i < spec->n_secret_env; i++)
        if (asprintf(&env[k++], "%s=%s", spec->secret_env[i]->key, spec->secret_env[i]->value) < 0)
            env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_URL=%s", e->url) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_TOKEN=%s", token) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_JOB_ID=%lld", (long long)job->id) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_JOB_NAME=%s", spec->name) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_CHECKPOINT_DIR=%s", ckpt) < 0) env[k - 1] = NULL;
    if (asprintf(&env[k++], "KESTREL_RESTART_COUNT=%d", job->restart_count) < 0) env[k - 1] = NULL;
    if (e->cfg->tls_ca && asprintf(&env[k++], "KESTREL_CA_FILE=%s", e->cfg->tls_ca) < 0) env[k - 1] = NULL;
    env[k++] = params_env(spec);
    if (devices) {
        if (asprintf(&env[k++], "CUDA_VISIBLE_DEVICES=%s", devices) < 0) env[k - 1] = NULL;
        env[k++] = strdup("CUDA_DEVICE_ORDER=PCI_BUS_ID");
    }
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

void kd_exec_env_free(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

int kd_exec_use_env(kd_engine *e, const Kestrel__V1__Job *job, char **argv0, char *prog, size_t n)
{
    char venv[PATH_MAX], digest[80], why[256];
    char *packages;
    int st;
    if (e->envs == NULL || (st = kd_envs_check(e->envs, job->id, job->spec, why, sizeof(why), venv, digest)) == KD_ENV_NONE)
        return 0;
    if (st != KD_ENV_READY)   /* removed (evicted) since it was placed: never run it without it */
        return kestrel__error_set(KESTREL_EIO, "its environment is gone since the job was placed (%s): submit it again",
                                  why);
    kd_envs_used(venv);
    packages = kd_envs_packages(venv);
    kd_catalog_job_set_env(e->cat, job->id, digest, packages);
    free(packages);
    kd_exec_log(e, job->id, "environment %s (%s)", job->spec->environment[0] ? job->spec->environment : "from the "
                "job's requirements", digest);
    if (!strchr(*argv0, '/')) {   /* the venv's own program of that name: its python, its tools */
        snprintf(prog, n, "%s/bin/%s", venv, *argv0);
        if (access(prog, X_OK) == 0)
            *argv0 = prog;
    }
    return 0;
}

int kd_exec_workdir_ok(const char *work, const char *workdir)
{
    int fd = kestrel__open_beneath(work, workdir);
    if (fd >= 0)
        close(fd);
    return fd >= 0 ? 0 : -1;
}
