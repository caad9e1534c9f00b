/* server/sched_plan.h - the scheduling policy: a pure function, no I/O, no clock, no globals.
 *
 * Foundation policy (the scheduler issue replaces it with the full one):
 * jobs are considered in queue order (class desc, then submit time, then id);
 * a job starts when a process slot and enough free devices exist, taking the
 * lowest-numbered free devices. A GPU job that does not fit blocks every later
 * GPU job (no backfill, so it is never delayed by them); jobs needing no GPU
 * still start while process slots remain. */
#ifndef KD_SCHED_H
#define KD_SCHED_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t id;
    int priority;       /* 1 normal, 2 high, 3 urgent */
    int gpus;
    int64_t submit_ms;
} kd_sched_job;

typedef struct {
    int ndev;               /* devices on the node */
    const uint8_t *busy;    /* ndev flags: non-zero = allocated */
    int free_slots;         /* process slots left */
} kd_sched_node;

typedef struct {
    int64_t job_id;
    size_t dev_off;         /* first device index of this start in the devices array */
    int ndev;
} kd_sched_start;

/* Plan starts for queue[0..n) (already in queue order). Writes at most max_starts
 * starts and their device indices into devices (capacity node->ndev). Returns the
 * number of starts. */
size_t kd_sched_plan(const kd_sched_job *queue, size_t n, const kd_sched_node *node,
                     kd_sched_start *starts, size_t max_starts, int *devices);

/* Queue order as a comparator (for tests and callers that must sort). */
int kd_sched_order(const kd_sched_job *a, const kd_sched_job *b);

#endif
