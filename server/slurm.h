/* server/slurm.h - the Slurm executor's internals (exec_slurm.c follows, slurm_submit.c submits,
 * slurm_parse.c reads Slurm's command output). Slurm is driven through its command-line tools
 * (sbatch, scontrol, scancel, sacct): their output is stable across releases, while slurmrestd's
 * API version changes with each one (v0.0.38 in 22.05, v0.0.40+ in 24.x). */
#ifndef KD_SLURM_H
#define KD_SLURM_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include "engine.h"

extern const kd_executor kd_exec_slurm;

/* One job handed to Slurm, as the follower knows it. Under kd_slurm.mu. */
typedef struct kd_sjob {
    int64_t id;
    char slurm_id[32];          /* "" until submitted */
    int kstate;                 /* what the catalog says: QUEUED or RUNNING */
    int priority;
    int restarts;               /* Slurm's Restarts= when last seen; -1 unknown */
    int ending;                 /* requeued, its old run still COMPLETING (kd_slurm_follow) */
    char sstate[32];            /* Slurm's JobState */
    char reason[160];           /* why it waits: Slurm's Reason, or ours before submission */
    char node[64];
    int64_t off[2];             /* bytes of slurm.out / slurm.err already in the catalog */
    int cancelled;              /* cancelled through Kestrel */
    int cancels_trying;         /* cancels in scancel now */
    int cancel_sent;            /* one scancel of them worked */
    int dep_failed;             /* Slurm said DependencyNeverSatisfied: cancelled there, FAILED here */
    int cloning;                /* its git source is being cloned on a helper thread */
    char clone_error[400];      /* why that clone failed ("" none) */
    char cancelled_by[160];
    int missing;                /* polls in a row in which Slurm did not list it */
    int64_t seen_running_ms;
    struct kd_sjob *next;
} kd_sjob;

typedef struct {
    kd_engine *e;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int running;
    int stop;
    int wake;
    kd_sjob *jobs;
    char dir[PATH_MAX];         /* DATA/slurm: the wrapper */
    char wrapper[PATH_MAX];
    int ctl_down;               /* the last poll's call failed (logged once) */
    int no_json;                /* squeue gave no JSON: polled with scontrol's words (exec_slurm.c) */
    int clones;                 /* helper threads cloning git sources (close waits for them) */
} kd_slurm;

/* Slurm's view of one job (scontrol show job -o, or sacct). */
typedef struct {
    char id[32];
    char state[32];
    char reason[160];
    char node[64];
    int restarts;
    int exit_code;
    int exit_signal;
} kd_sview;

/* Parse `squeue --json` output (every job, whatever -j says: Slurm 22.05 ignores it); *out is
 * malloc'd. KESTREL_EPROTO when it holds no "jobs" list (a Slurm without JSON). The one kestreld
 * polls: its strings are JSON's, where scontrol's words are a job name's too (a hostile test: a job
 * named "x\nJobId=5 JobState=COMPLETED" ended another user's job 5 in Kestrel, and one with
 * Reason=DependencyNeverSatisfied had kestreld cancel it). */
int kd_slurm_parse_squeue_json(const char *text, kd_sview **out, size_t *n);
/* Parse `scontrol show job -o` output (one job per line); *out is malloc'd. Where squeue has no
 * JSON only: a job's name may forge words and lines here. */
int kd_slurm_parse_scontrol(const char *text, kd_sview **out, size_t *n);
/* Parse one `sacct -X -n -P -o JobID,State,ExitCode,NodeList` line. 0, or -1 when malformed. */
int kd_slurm_parse_sacct(const char *line, kd_sview *v);
/* Slurm's state names by what they mean to Kestrel. */
int kd_slurm_state_pending(const char *st);   /* waits for resources, dependencies, a node boot, a requeue */
int kd_slurm_state_running(const char *st);
int kd_slurm_state_final(const char *st);
/* What one poll's view v means for a job the follower has in *kstate (QUEUED or RUNNING) with
 * Slurm's Restarts= last seen in *restarts (-1 unknown) and *ending (requeued, its old run still
 * completing); all three are updated. KD_SLURM_REQUEUED: the run Kestrel knew ended and the job
 * waits again (its state is pending, or its count went up, possibly while it still completes).
 * KD_SLURM_STARTED: a new run began, or one began and ended between two polls, or one began and was
 * requeued between two polls (its count went up: *restarts is left as it was, so that the next poll
 * says REQUEUED). 0: nothing Kestrel records. A requeued job stays COMPLETING (flags win over the
 * base state in scontrol's JobState) with its new count until its old run has ended: that is the
 * old run's end, never a start (a CI run counted one requeue twice: a start there, then PENDING),
 * also when followed again after kestreld restarted. A job whose count went up in a final state is
 * recorded started and ended, without the runs between (it is dropped after that poll). */
enum { KD_SLURM_REQUEUED = 1, KD_SLURM_STARTED = 2 };
int kd_slurm_follow(int *kstate, int *restarts, int *ending, const kd_sview *v);

/* Submit the job (catalog load, dependencies, script, sbatch). 0 submitted (j->slurm_id set),
 * 1 not yet (waits for a dependency or an affinity target; j->reason says why), -1 failed for good
 * (why says why), -2 Slurm unreachable (try again later). */
int kd_slurm_submit(kd_slurm *s, kd_sjob *j, char *why, size_t n);
/* The QOS of a priority class (--slurm-qos). */
const char *kd_slurm_qos(const kd_engine *e, int priority);
/* The partition of a pool. */
const char *kd_slurm_partition(const kd_engine *e, const char *pool);
/* Write the job wrapper (DATA/slurm/kestrel-wrap): 0 or -1. */
int kd_slurm_write_wrapper(kd_slurm *s);

#endif
