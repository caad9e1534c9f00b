/* server/sched_plan.h - the scheduling policy: a pure function from a snapshot to actions.
 * No I/O, no clock reads, no globals: the daemon builds the snapshot and applies the plan.
 *
 * Order: class (urgent > high > normal), then original submit time, then id.
 * Filter: dependencies, quotas, process slots, pool, GPU type / memory / compute capability,
 *   required affinity. Score (best fit): the node left with the fewest free matching devices
 *   after placement (keeps large holes for large jobs), preferred affinity first, then node order.
 * Backfill: a GPU job blocked for capacity reserves the node closest to fitting it. A later job
 *   may take devices there only if it is preemptible, and then on a lease: the reservation's job
 *   may preempt it whatever its class, once the node's other jobs are gone. Other nodes stay open.
 * Preemption: when no node has room, on each node that passes the filter take running,
 *   preemptible jobs of strictly lower class, least work lost first (latest checkpoint, else latest
 *   start), then lowest class, then youngest; walk the list back dropping victims not needed; pick
 *   the node with the fewest victims, then least work lost, then node order. Victims' devices are
 *   held for the job while they stop.
 * Gangs (replicas > 1, sched_gang.c): every rank's gpus on one node, all ranks at once or none,
 *   in one pool: on the node that holds them all with the fewest devices left, else spread over the
 *   nodes with the most room first (as few nodes as hold them). A blocked gang reserves the nodes
 *   it needs, as a blocked job reserves one; it does not preempt to start. A running gang is one
 *   allocation a rank (same id): preempting any of them stops the whole gang. */
#ifndef KD_SCHED_H
#define KD_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const char *type;      /* "a100", "virtual", ... */
    int64_t mem_mb;
    int cc;                /* compute capability major*10 + minor */
    const char *uuid;      /* a real GPU's UUID; NULL for a virtual device */
} kd_dev;

typedef struct {
    const char *name;
    const char *pool;
    int ndev;
    const kd_dev *devs;
} kd_node;

/* A running (or stopping) job's allocation. */
typedef struct {
    int64_t id;
    int node;
    int ndev;
    const int *devs;
    int priority;
    int preemptible;
    int64_t start_ms;
    int64_t checkpoint_ms;  /* last acknowledged checkpoint, 0: none */
    int64_t owner;
    const char *team;
    int terminating;        /* already being stopped */
    int64_t backfill_for;   /* started on a node reserved for this job: it may preempt it, whatever the class */
    int ranks;              /* a gang's rank count (0 or 1: one process): preempting it stops all */
} kd_alloc;

/* A job referenced by a dependency or an affinity (sorted by id). */
typedef struct {
    int64_t id;
    int state;              /* kestrel_job_state_t */
    int node;               /* node it last ran on, -1: never placed */
} kd_ref;

typedef struct {
    const char *group;
    int64_t owner;          /* groups are each user's own: the same name of two users is two groups */
    int node;               /* node of the group's last placed job */
} kd_group_ref;

typedef struct {
    int is_team;
    int64_t user;
    const char *team;
    int max_gpus;
} kd_quota;

/* Whether quota k covers a job of owner in team ("" or NULL: none). */
static inline int kd_quota_covers(const kd_quota *k, int64_t owner, const char *team)
{
    return k->is_team ? (team && team[0] && !strcmp(k->team, team)) : k->user == owner;
}

/* The GPUs a job holds at once: gpus on each of its replicas ranks (a single job: 1). */
static inline int kd_job_gpus(int gpus, int replicas)
{
    return gpus * (replicas > 1 ? replicas : 1);
}

typedef struct {
    int64_t id;
    int priority;
    int64_t submit_ms;
    int gpus;
    const char *gpu_type;   /* "" any */
    int64_t min_mem_mb;
    int min_cc;
    const char *pool;       /* "" any */
    char *const *exclude;   /* nodes it must not run on (by name) */
    size_t nexclude;
    int64_t owner;
    const char *owner_name;
    const char *team;       /* "" none */
    const int64_t *after_ok;
    size_t n_after_ok;
    const int64_t *after_any;
    size_t n_after_any;
    int64_t affinity_job;
    const char *affinity_group;   /* "" none */
    int affinity_required;
    int preemptible;
    int replicas;           /* a gang of this many ranks, gpus each (0 or 1: one process) */
} kd_qjob;

typedef struct {
    const kd_node *nodes;
    size_t nnodes;
    const kd_alloc *allocs;
    size_t nallocs;
    const kd_qjob *queue;   /* any order */
    size_t nqueue;
    const kd_ref *refs;     /* sorted by id */
    size_t nrefs;
    const kd_group_ref *groups;
    size_t ngroups;
    const kd_quota *quotas;
    size_t nquotas;
    int free_slots;         /* process slots left */
    int64_t now_ms;
    int fifo;               /* 1: strict FIFO (submit time only, stop at the first blocked job; for comparison) */
} kd_snapshot;

typedef enum { KD_ACT_START = 1, KD_ACT_PREEMPT = 2, KD_ACT_FAIL = 3 } kd_act_kind;

typedef struct {
    kd_act_kind kind;
    int64_t job;
    int node;               /* START, PREEMPT */
    size_t dev_off;         /* START: devices in plan.devs[dev_off .. dev_off + ndev) */
    int ndev;
    int64_t cause;          /* PREEMPT: the job it makes room for; START: the reservation it backfills (0: none) */
    int rank;               /* START of a gang: one action a rank, ranks 0..replicas-1 in a row */
    int replicas;           /* START: the gang's size (1: one process) */
    char reason[200];
} kd_action;

typedef struct {
    int64_t job;
    int position;           /* 1-based place in the queue order */
    char reason[320];
} kd_wait;

typedef struct {
    kd_action *acts;
    size_t nacts;
    int *devs;
    size_t ndevs;
    kd_wait *waits;
    size_t nwaits;
} kd_plan;

/* Compute the plan. Returns 0, or -1 when out of memory. Deterministic for a snapshot. */
int kd_sched_plan(const kd_snapshot *s, kd_plan *out);
void kd_plan_free(kd_plan *p);

/* Queue order comparator. */
int kd_sched_order(const kd_qjob *a, const kd_qjob *b);
/* Whether device d is of job j's GPU type, memory and compute capability. */
int kd_sched_dev_matches(const kd_dev *d, const kd_qjob *j);
/* "8.0" -> 80; -1 when malformed. */
int kd_sched_parse_cc(const char *s);

/* A priority class's name: "normal", "high" or "urgent" (anything else reads as normal, the default);
 * the spelling of the scheduler's reasons, the metrics' labels, the events and the errors. The
 * library's kestrel_priority_name says the same but NULL for a class it does not know, and the
 * scheduler links no library (pure): this one is total, for both. */
static inline const char *kd_priority_name(int cls)
{
    return cls == 3 ? "urgent" : cls == 2 ? "high" : "normal";   /* KESTREL_PRIORITY_URGENT, _HIGH (kestrel/job.h) */
}

#endif
