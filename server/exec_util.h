/* server/exec_util.h - shared by the executors (local, Slurm). */
#ifndef KD_EXEC_UTIL_H
#define KD_EXEC_UTIL_H

#include <stddef.h>
#include <sys/types.h>
#include "engine.h"
#include "identity.h"

/* Who runs a helper or a job: the identity (NULL or not isolated: kestreld itself) and its HOME.
 * For kd_exec_run only, and all optional: more of the helper's environment, a time limit, and a
 * stop polled while it runs (a job's cancel): past either, its process group is killed. */
typedef struct {
    const kd_ident *id;
    const char *home;           /* NULL: kestreld's own HOME */
    char *const *env;           /* "K=V" entries added (NULL-terminated; NULL: none) */
    int timeout_s;              /* 0: none */
    int (*stop)(void *ctx);     /* nonzero: stop now (polled about every 0.2 s) */
    void *stop_ctx;
    size_t whole_up_to;         /* > 0: out kept whole, and the helper stopped (-1) past this many bytes
                                 * (a document to parse); 0: its ends past 256 KiB */
    int job_env;                /* the helper hands its environment to a job (sbatch): of kestreld's, what
                                 * a local job gets (kd_exec_job_env), and SLURM_*, SBATCH_* */
} kd_exec_as;

/* A job with an environment (ready: the scheduler started it): record it and its packages on the job,
 * and point *argv0 at the venv's program of that name when it has one (prog holds the path). -1
 * with the error set when the environment is gone (the job must not run without it). */
int kd_exec_use_env(kd_engine *e, const Kestrel__V1__Job *job, char **argv0, char *prog, size_t n);
/* A SYSTEM line in the job's log. */
void kd_exec_log(kd_engine *e, int64_t id, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Make bytes safe for a protobuf string: invalid UTF-8 bytes become '?'. */
void kd_exec_sanitize(char *s, size_t len);
/* The processes (threads too: Linux counts tasks) an account may have at once, all of its processes
 * together, where it runs a job or a build step (kd_exec_spawn, _rank): RLIMIT_NPROC, set as the
 * account is taken (kestreld as root only; 0: none). One user's fork bomb could take every pid of the
 * host, kestreld's forks with them. kestreld's own helpers (kd_exec_run) are not limited. Set once at
 * start (main.c), before any spawn. */
void kd_exec_set_max_procs(long n);
/* --max-job-processes' default: a quarter of the least of pid_max, threads-max and the pids.max of
 * kestreld's cgroup and those above it (at least 64). */
long kd_exec_default_max_procs(void);
/* Why a spawn as id failed with err: strerror(err), or, for EAGAIN where id's account has a process
 * limit, that it is at it (in buf, n bytes). */
const char *kd_exec_spawn_why(int err, const kd_ident *id, char *buf, size_t n);
/* 1 when entry ("NAME=value") is named in names (NULL-terminated; "PREFIX*" a prefix). */
int kd_exec_env_listed(const char *const *names, const char *entry);
/* 1 when entry is one of the network's settings (proxies, CA bundles) that jobs and environment
 * builds both get of kestreld's environment. */
int kd_exec_network_env(const char *entry);
/* --job-env NAME (or PREFIX*): one more of kestreld's variables every local job gets. 0, or -1 after
 * printing why (not a variable's name, or past 64). */
int kd_exec_job_env_pass(kd_config *cfg, const char *name);
/* The config whose --job-env every job's environment (local, Slurm's through sbatch) and every helper
 * run as a job's account (git, rm: another job of that account can read its environment) take from
 * kestreld's, beside the defaults. Set once at start. */
void kd_exec_set_job_env(const kd_config *cfg);
/* Spawn argv (PATH searched, no shell) in its own process group, stdout/stderr to the pipes' write
 * ends (err_fd NULL: both to out_fd), which it closes. With an isolated id the process runs as that
 * uid and gid with no supplementary groups, and while still root enters the cgroup whose
 * cgroup.procs cgroup_fd is open for writing (job_cgroup.c; -1: none) and a mount namespace of its
 * own where tmp (a folder; NULL: none) is its /tmp and /var/tmp. Returns the pid or -errno. */
pid_t kd_exec_spawn(char *const argv[], char *const envp[], const char *cwd, int out_fd[2], int err_fd[2],
                    const kd_ident *id, int cgroup_fd, const char *tmp);
/* 1 when jobs' starts can make a mount namespace of their own (kestreld root, and the host lets it;
 * probed once, at start, before any job):
 * their /tmp is then their own (kd_exec_spawn's tmp); else they share the host's, unmeasured. */
int kd_exec_private_tmp(void);
/* 1 when a job of data_dir gets its own /tmp: kd_exec_private_tmp, and the data dir is not itself
 * below /tmp or /var/tmp (bound over it, the job's own dir would be gone from its sight). */
int kd_exec_tmp_own(const char *data_dir);
/* The same for a gang's rank, which (run as an identity) dies with the thread that spawned it: a
 * rank alone is of no use once kestreld is gone (a single job is left to the next daemon). */
pid_t kd_exec_spawn_rank(char *const argv[], char *const envp[], const char *cwd, int out_fd[2], int err_fd[2],
                         const kd_ident *id, int cgroup_fd, const char *tmp);
/* Run a helper to completion, its stdout and stderr collected into out, as `as` (NULL: kestreld).
 * The exit status, or -1 (it could not run, died, or was stopped: out ends saying which). */
int kd_exec_run(char *const argv[], const char *cwd, kestrel_buf *out, const kd_exec_as *as);
/* Clone the job's git source into work (whose parent `as` may write) and check out its ref, as the
 * job's identity (stopped by as->stop: the job's cancel); records the commit. -1 with why
 * (exec_git.c: credentials in the URL reach git through its environment, never its argv). */
int kd_exec_checkout(kd_engine *e, const Kestrel__V1__JobSpec *spec, int64_t id, const char *work, char *why,
                     size_t n, const kd_exec_as *as);
/* 0 when workdir ("" : work itself) is a folder inside work, found without following a link out
 * of it and without looking outside it: the check runs as root, which could tell a job whether any
 * folder of the host exists (a link in a --git checkout to another user's 0700 job dir, a hostile
 * test). -1 else. */
int kd_exec_workdir_ok(const char *work, const char *workdir);
#define KD_GIT_URL_SHOWN_MAX 2200   /* a --git URL (at most 2048 bytes) and its redaction */
/* url as it may be shown to anyone (a log, a reason, a model's lineage): its userinfo (http(s)'s
 * user:token@ or token@, any scheme's user:password@) as "***". */
void kd_git_url_shown(const char *url, char *out, size_t n);
/* The job's environment contract ("K=V", NULL-terminated): with inherit the daemon's own environment
 * minus what Kestrel sets, then the spec's env, then KESTREL_URL/TOKEN/JOB_ID/JOB_NAME/
 * CHECKPOINT_DIR/RESTART_COUNT, and CUDA_VISIBLE_DEVICES when devices is not NULL. */
/* With `as` (not NULL), HOME is its home and USER/LOGNAME its account. */
char **kd_exec_job_env(const kd_engine *e, const Kestrel__V1__Job *job, const char *token, const char *ckpt,
                       const char *devices, int inherit, const kd_exec_as *as);
void kd_exec_env_free(char **env);
/* Replace each of the job's secret values (each line of one of several lines: 4 bytes or more) in
 * s[0..*len) by "***"; *len shrinks. */
void kd_exec_mask(const Kestrel__V1__JobSpec *spec, char *s, size_t *len);
/* Where to cut s[0..len), a line too long to log whole, so that no secret value is split between
 * its two pieces: the piece before the cut is logged, the rest waits for more output. len when
 * the job has no value to mask, or one longer than half of len (such a value may be split). */
size_t kd_exec_mask_cut(const Kestrel__V1__JobSpec *spec, const char *s, size_t len);

#endif
