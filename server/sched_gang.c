/* server/sched_gang.c - placing a gang: replicas ranks of gpus devices each (every rank's devices on
 * one node), all at once or none, in one pool. Packed: the node that holds every rank with the
 * fewest devices left over; else the nodes with the most room first, as few as hold them all.
 * A blocked gang reserves the nodes it would need, so later jobs cannot starve it there: a
 * preemptible job may borrow them, on a lease the gang takes back (it preempts its borrowers, as a
 * blocked job does) once that makes room for every rank. A gang never takes devices on a node
 * another job reserved, and preempts no one else (a running gang is preempted whole, like any job). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched_priv.h"

typedef struct {
    int node;
    int now;      /* ranks that fit on its free devices */
    int later;    /* ranks that fit once the devices being freed are free */
    int free, soon;   /* matching devices free, being freed */
    int lent;     /* devices of jobs borrowing the gang's reservation there (they may be preempted) */
    int theirs;   /* reserved for another job: no room for the gang, whatever is freed */
} room;

static int by_room(const void *x, const void *y)
{
    const room *a = x, *b = y;
    if (a->now != b->now)
        return a->now > b->now ? -1 : 1;
    return (a->node > b->node) - (a->node < b->node);
}

/* Most room once its borrowers and the jobs being stopped are gone, then node order. */
static int by_reclaim(const void *x, const void *y)
{
    const room *a = x, *b = y;
    int ra = a->free + a->soon + a->lent, rb = b->free + b->soon + b->lent;
    if (ra != rb)
        return ra > rb ? -1 : 1;
    return (a->node > b->node) - (a->node < b->node);
}

static int by_later(const void *x, const void *y)
{
    const room *a = x, *b = y;
    if (a->later != b->later)
        return a->later > b->later ? -1 : 1;
    return (a->node > b->node) - (a->node < b->node);
}

/* "gang of 4 ranks: needs 2 x a100 with >= 40960 MB each, on up to 4 nodes of pool p" */
static void describe(char *buf, size_t n, const kd_qjob *j)
{
    char devs[160];
    kd__sched_describe_devices(devs, sizeof(devs), j);
    snprintf(buf, n, "gang of %d ranks: needs %s each, on up to %d nodes%s%s", j->replicas, devs, j->replicas,
             j->pool[0] ? " of pool " : "", j->pool);
}

/* Start rank after rank on the chosen nodes (rooms[0..nchosen), take[k] ranks on each). */
static int start(pass *ps, const kd_qjob *j, const room *rooms, const int *take, size_t nchosen, int *slots)
{
    const kd_snapshot *s = ps->s;
    char where[160] = "";
    int rank = 0;
    for (size_t k = 0; k < nchosen; k++) {
        size_t len = strlen(where);
        for (int r = 0; r < take[k]; r++, rank++) {
            kd_action *a = kd__sched_add_action(ps, KD_ACT_START, j->id);
            if (a == NULL)
                return -1;
            a->node = rooms[k].node;
            a->dev_off = ps->out->ndevs;
            a->ndev = j->gpus;
            a->rank = rank;
            a->replicas = j->replicas;
            if (kd__sched_take(ps, rooms[k].node, j, DEV_FREE, j->gpus, 1) < 0)
                return -1;
        }
        if (len + 40 < sizeof(where))
            snprintf(where + len, sizeof(where) - len, "%s%s (%d)", k ? ", " : "", s->nodes[rooms[k].node].name,
                     take[k]);
    }
    for (int r = 0; r < j->replicas; r++) {   /* every rank's action says where the gang went */
        kd_action *a = &ps->out->acts[ps->out->nacts - (size_t)j->replicas + (size_t)r];
        snprintf(a->reason, sizeof(a->reason), "placed %d ranks on node%s %s", j->replicas, nchosen > 1 ? "s" : "",
                 where);
    }
    kd__sched_charge_quota(ps, j->owner, j->team, kd_job_gpus(j->gpus, j->replicas));
    (*slots)--;
    return KD_PLACED;
}

int kd__sched_place_gang(pass *ps, const kd_qjob *j, int *slots, char *why, size_t wn)
{
    const kd_snapshot *s = ps->s;
    room *rooms = calloc(s->nnodes + 1, sizeof(*rooms));
    int *take = calloc(s->nnodes + 1, sizeof(*take));
    size_t nr = 0, nchosen = 0, single = (size_t)-1;
    int ever = 0, now = 0, free_devs = 0, rc = KD_BLOCKED;
    char buf[320];

    if (rooms == NULL || take == NULL) {
        free(rooms);
        free(take);
        return -1;
    }
    for (size_t n = 0; n < s->nnodes; n++) {
        int fit_ever, f, soon;
        if (!kd__sched_node_ok(s, j, n))
            continue;
        fit_ever = j->gpus ? kd__sched_count_static(ps, (int)n, j) / j->gpus : j->replicas;
        if (fit_ever == 0)
            continue;
        ever += fit_ever;
        f = j->gpus ? kd__sched_count(ps, (int)n, j, DEV_FREE) : 0;
        soon = j->gpus ? kd__sched_count(ps, (int)n, j, DEV_SOON) : 0;
        rooms[nr].node = (int)n;
        rooms[nr].later = j->gpus ? (f + soon) / j->gpus : j->replicas;
        rooms[nr].free = f;
        rooms[nr].soon = soon;
        for (size_t x = 0; x < ps->n_node_allocs[n]; x++) {
            size_t i = ps->node_allocs[n][x];
            const kd_alloc *a = &s->allocs[i];
            if (a->backfill_for == j->id && !a->terminating && !ps->claimed[i])
                rooms[nr].lent += a->ndev;
        }
        rooms[nr].theirs = ps->held_by[n] && ps->held_by[n] != j->id;
        if (rooms[nr].theirs) {
            rooms[nr].now = 0;   /* reserved for another job */
        } else {
            rooms[nr].now = j->gpus ? f / j->gpus : j->replicas;
            free_devs += f;
        }
        now += rooms[nr].now;
        if (rooms[nr].now >= j->replicas &&
            (single == (size_t)-1 || rooms[nr].now < rooms[single].now))   /* best fit: fewest left over */
            single = nr;
        nr++;
    }
    describe(buf, sizeof(buf), j);
    if (ever < j->replicas) {
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof(buf) - len, ": the nodes hold at most %d such ranks", ever);
        kd__sched_say(why, wn, buf);
        kd__sched_say(why, wn, "no set of nodes can ever hold it");
        goto out;
    }
    if (single != (size_t)-1) {
        rooms[0] = rooms[single];
        take[0] = j->replicas;
        rc = start(ps, j, rooms, take, 1, slots);
        goto out;
    }
    if (now >= j->replicas) {
        int left = j->replicas;
        qsort(rooms, nr, sizeof(*rooms), by_room);
        for (; nchosen < nr && left > 0; nchosen++) {
            take[nchosen] = rooms[nchosen].now < left ? rooms[nchosen].now : left;
            left -= take[nchosen];
        }
        rc = start(ps, j, rooms, take, nchosen, slots);
        goto out;
    }
    /* Not now. Enough room once what is being freed and what it lent out is back? Then it holds
     * those nodes firmly (nobody borrows them while it waits) and takes its leases back; else it
     * reserves the nodes closest to holding it, which preemptible jobs may borrow. */
    {
        int could = 0, need = j->replicas, firm;
        size_t len = strlen(buf);
        for (size_t k = 0; k < nr; k++)
            if (!rooms[k].theirs)
                could += j->gpus ? (rooms[k].free + rooms[k].soon + rooms[k].lent) / j->gpus : j->replicas;
        firm = could >= j->replicas;
        qsort(rooms, nr, sizeof(*rooms), firm ? by_reclaim : by_later);
        if (firm)
            snprintf(buf + len, sizeof(buf) - len, ": waiting for jobs to stop on its nodes");
        for (size_t k = 0; k < nr && need > 0; k++) {
            int n = rooms[k].node;
            if (rooms[k].theirs || (ps->held_by[n] && ps->held_by[n] != j->id))
                continue;
            ps->held_by[n] = j->id;
            ps->held_prio[n] = j->priority;
            ps->held_firm[n] = (uint8_t)firm;
            if (!firm) {
                need -= j->gpus ? kd__sched_count_static(ps, n, j) / j->gpus : j->replicas;
                continue;
            }
            need -= j->gpus ? (rooms[k].free + rooms[k].soon + rooms[k].lent) / j->gpus : j->replicas;
            for (size_t x = 0; rooms[k].lent && x < ps->n_node_allocs[n]; x++) {   /* its leases back */
                size_t i = ps->node_allocs[n][x];
                const kd_alloc *al = &s->allocs[i];
                kd_action *a;
                if (al->backfill_for != j->id || al->terminating || ps->claimed[i])
                    continue;
                if ((a = kd__sched_add_action(ps, KD_ACT_PREEMPT, al->id)) == NULL) {
                    rc = -1;
                    goto out;
                }
                a->node = n;
                a->cause = j->id;
                snprintf(a->reason, sizeof(a->reason), "preempted by job %lld (a gang), whose reservation it borrowed",
                         (long long)j->id);
                ps->claimed[i] = 1;
                len = strlen(buf);
                snprintf(buf + len, sizeof(buf) - len, "%s job %lld, which borrowed its reservation",
                         strstr(buf, "preempting") ? "," : "; preempting", (long long)al->id);
            }
        }
        if (!firm) {
            len = strlen(buf);
            snprintf(buf + len, sizeof(buf) - len, ": %d GPU%s free for it", free_devs, free_devs == 1 ? "" : "s");
        }
        kd__sched_say(why, wn, buf);
        rc = firm ? KD_PREEMPTING : KD_BLOCKED;
    }
out:
    free(rooms);
    free(take);
    return rc;
}
