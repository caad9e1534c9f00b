/* server/sched_priv.h - the scheduling pass's state and the helpers its parts share (sched.c: one
 * process a job; sched_gang.c: gangs). Private to the scheduler library. */
#ifndef KD_SCHED_PRIV_H
#define KD_SCHED_PRIV_H

#include "sched_plan.h"

#define KESTREL_SCHED_MEMO 32

enum { ST_SUCCEEDED = 3, ST_FAILED = 4, ST_CANCELLED = 5 };
enum { DEV_FREE = 0, DEV_USED = 1, DEV_SOON = 2 };   /* SOON: held by a stopping job, not yet claimed */
/* What placing a job came to (-1: out of memory). Only a KD_BLOCKED verdict is remembered for the
 * job's shape: preemptions planned or awaited are that job's own. */
enum { KD_BLOCKED = 0, KD_PLACED = 1, KD_PREEMPTING = 2 };

typedef struct {
    const kd_snapshot *s;
    uint8_t **dev;          /* per node, per device: DEV_* */
    int *nfree, *nsoon;     /* per node: devices FREE / SOON */
    uint8_t *uniform;       /* per node: every device alike (one match test stands for all) */
    size_t **node_allocs;   /* per node: indices of its allocations */
    size_t *n_node_allocs;
    const kd_alloc **cand, **bestv;   /* scratch for preemption, nallocs each */
    /* Shapes found blocked in this pass: a later job of the same shape and no higher class is
     * blocked too (devices only get scarcer as the pass goes on), so it reuses the verdict. */
    struct { const kd_qjob *j; char reason[256]; } blocked[32];
    size_t nblocked;
    int64_t *held_by;       /* per node: blocked job holding it, 0 none */
    int *held_prio;
    uint8_t *held_firm;     /* per node: its holder waits only for its borrowers to stop: no one borrows it */
    uint8_t *claimed;       /* per alloc: already a victim (or awaited) in this plan */
    int64_t *usage_user;    /* parallel to quotas: GPUs in use */
    int soon_slots;         /* process slots of stopping jobs not yet awaited by a job of this pass */
    int64_t *lessors;       /* sorted: jobs whose reservation a running job borrows (they may preempt it) */
    size_t nlessors;
    kd_plan *out;
    size_t cap_acts, cap_devs, cap_waits;
} pass;

/* The node is of the job's pool and not one it excludes. */
int kd__sched_node_ok(const kd_snapshot *s, const kd_qjob *j, size_t n);
/* Matching devices of node n in a DEV_* state; matching devices it has at all. */
int kd__sched_count(pass *ps, int n, const kd_qjob *j, int state);
int kd__sched_count_static(pass *ps, int n, const kd_qjob *j);
/* Mark up to want matching devices in state from on node n as used (recorded in the plan when rec). */
int kd__sched_take(pass *ps, int n, const kd_qjob *j, int from, int want, int rec);
kd_action *kd__sched_add_action(pass *ps, kd_act_kind kind, int64_t job);
/* Append "; " + text to a reason. */
void kd__sched_say(char *buf, size_t n, const char *text);
void kd__sched_charge_quota(pass *ps, int64_t owner, const char *team, int gpus);
/* "2 x a100 with >= 40960 MB cc >= 8.0": what one job (or one rank of a gang) needs. */
void kd__sched_describe_devices(char *buf, size_t n, const kd_qjob *j);
/* Place a gang (j->replicas > 1): KD_PLACED, KD_BLOCKED or KD_PREEMPTING (why filled), -1 out of memory
 * (sched_gang.c). */
int kd__sched_place_gang(pass *ps, const kd_qjob *j, int *slots, char *why, size_t wn);

#endif
