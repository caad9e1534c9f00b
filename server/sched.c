/* server/sched.c - pure scheduling pass (see sched_plan.h). */
#include <stdlib.h>
#include <string.h>
#include "sched_plan.h"

int kd_sched_order(const kd_sched_job *a, const kd_sched_job *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    if (a->submit_ms != b->submit_ms)
        return a->submit_ms < b->submit_ms ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

size_t kd_sched_plan(const kd_sched_job *queue, size_t n, const kd_sched_node *node,
                     kd_sched_start *starts, size_t max_starts, int *devices)
{
    uint8_t small[256], *busy = small;
    int free_devs = 0, slots = node->free_slots, gpu_blocked = 0;
    size_t nstarts = 0, used = 0;

    if (node->ndev > (int)sizeof(small) && (busy = malloc((size_t)node->ndev)) == NULL)
        return 0;
    for (int d = 0; d < node->ndev; d++) {
        busy[d] = node->busy[d] ? 1 : 0;
        free_devs += !busy[d];
    }
    for (size_t i = 0; i < n && slots > 0 && nstarts < max_starts; i++) {
        const kd_sched_job *j = &queue[i];
        if (j->gpus > 0 && (gpu_blocked || j->gpus > free_devs)) {
            gpu_blocked = 1;
            continue;
        }
        starts[nstarts].job_id = j->id;
        starts[nstarts].dev_off = used;
        starts[nstarts].ndev = j->gpus;
        for (int d = 0, got = 0; d < node->ndev && got < j->gpus; d++) {
            if (!busy[d]) {
                busy[d] = 1;
                devices[used++] = d;
                got++;
            }
        }
        free_devs -= j->gpus;
        slots--;
        nstarts++;
    }
    if (busy != small)
        free(busy);
    return nstarts;
}
