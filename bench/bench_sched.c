/* bench/bench_sched.c - the pure scheduler, measured.
 *
 * (a) One pass over 10,000 queued jobs (10 % of them gangs of 2-4 ranks) and 64 nodes x 8 GPUs
 *     (half of them busy): median of 21
 *     passes (queue in order, as the catalog index delivers it), beside the same pass under strict
 *     FIFO and a sort of the unordered queue, measured in the same run. Target: <= 5 ms.
 * (b) A trace of 200 mixed jobs (1/2/4/8 GPUs, 5-90 min, 70 % normal / 20 % high / 10 % urgent)
 *     on 4 nodes x 8 GPUs with a simulated clock (checkpoints every 10 min, preemption loses the
 *     work since the last one): device utilisation while the queue is non-empty and mean wait per
 *     class, side by side with strict FIFO on the same trace. Target: >= 95 % utilisation. The
 *     same again with 10 % of the jobs gangs of 2-4 ranks (each rank its own GPUs, all at once). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sched_plan.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t rng_state = 42;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_qjob(const void *a, const void *b)
{
    return kd_sched_order(a, b);
}

static kd_qjob make_job(int64_t id, int64_t submit, int gpus, int prio)
{
    kd_qjob j;
    memset(&j, 0, sizeof(j));
    j.id = id;
    j.submit_ms = submit;
    j.gpus = gpus;
    j.priority = prio;
    j.gpu_type = j.pool = j.team = j.affinity_group = "";
    j.owner_name = "bench";
    j.owner = 1 + id % 17;
    j.preemptible = 1;
    return j;
}

static const int sizes[] = { 1, 1, 1, 2, 2, 4, 4, 8 };

static int class_of(uint64_t r)
{
    r %= 10;
    return r < 7 ? 1 : (r < 9 ? 2 : 3);
}

/* ---- (a) one pass -------------------------------------------------------------------- */

static void bench_pass(void)
{
    enum { NN = 64, ND = 8, NQ = 10000, RUNS = 21 };
    static kd_dev devs[ND];
    static kd_node nodes[NN];
    static char names[NN][8];
    static int alloc_devs[NN][ND];
    static kd_alloc allocs[NN * ND];
    static kd_qjob queue[NQ], sorted[NQ];
    double t_kestrel[RUNS], t_fifo[RUNS], t_sort[RUNS];
    size_t na = 0;
    kd_snapshot s;
    kd_plan p;

    for (int d = 0; d < ND; d++)
        devs[d] = (kd_dev){ "a100", 81920, 80 };
    for (int n = 0; n < NN; n++) {
        snprintf(names[n], sizeof(names[n]), "n%d", n);
        nodes[n] = (kd_node){ names[n], n < 48 ? "default" : "big", ND, devs };
        /* half of every node busy with two running jobs of 2 GPUs */
        for (int k = 0; k < 2; k++) {
            alloc_devs[n][2 * k] = 2 * k;
            alloc_devs[n][2 * k + 1] = 2 * k + 1;
            allocs[na++] = (kd_alloc){ 100000 + na, n, 2, &alloc_devs[n][2 * k], 1 + k, 1, 0, 0, 1, "", 0 };
        }
    }
    for (int i = 0; i < NQ; i++) {
        queue[i] = make_job(i + 1, (int64_t)(rnd() % 1000000), sizes[rnd() % 8], class_of(rnd()));
        if (i % 10 == 9)
            queue[i].replicas = 2 + (int)(rnd() % 3);   /* 10 % gangs */
    }
    /* kestreld hands the queue over in order (the catalog's queue index), so the pass does as well */
    qsort(queue, NQ, sizeof(kd_qjob), cmp_qjob);
    memset(&s, 0, sizeof(s));
    s.nodes = nodes;
    s.nnodes = NN;
    s.allocs = allocs;
    s.nallocs = na;
    s.queue = queue;
    s.nqueue = NQ;
    s.free_slots = 1000000;
    s.now_ms = 2000000;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_ms();
        if (kd_sched_plan(&s, &p) < 0)
            exit(1);
        t_kestrel[r] = now_ms() - t0;
        if (r == 0) {
            size_t pre = 0;
            for (size_t a = 0; a < p.nacts; a++)
                pre += p.acts[a].kind == KD_ACT_PREEMPT;
            printf("  pass: %zu starts, %zu preemptions planned, %zu jobs wait\n", p.nacts - pre, pre, p.nwaits);
        }
        kd_plan_free(&p);
        s.fifo = 1;
        t0 = now_ms();
        kd_sched_plan(&s, &p);
        t_fifo[r] = now_ms() - t0;
        kd_plan_free(&p);
        s.fifo = 0;
        memcpy(sorted, queue, sizeof(queue));
        for (int i = NQ - 1; i > 0; i--) {   /* unordered copy: what a sort of the raw queue costs */
            size_t k = (size_t)(rnd() % (uint64_t)(i + 1));
            kd_qjob tmp = sorted[i];
            sorted[i] = sorted[k];
            sorted[k] = tmp;
        }
        t0 = now_ms();
        qsort(sorted, NQ, sizeof(kd_qjob), cmp_qjob);
        t_sort[r] = now_ms() - t0;
    }
    qsort(t_kestrel, RUNS, sizeof(double), cmp_double);
    qsort(t_fifo, RUNS, sizeof(double), cmp_double);
    qsort(t_sort, RUNS, sizeof(double), cmp_double);
    printf("  one pass, 10,000 queued (10 %% gangs) x 64 nodes x 8 GPUs: median %.2f ms (target <= 5 ms)\n",
           t_kestrel[RUNS / 2]);
    printf("    strict FIFO pass on the same snapshot: %.2f ms (ratio %.2f); sort of the unordered queue: %.2f ms (ratio %.1f)\n",
           t_fifo[RUNS / 2], t_kestrel[RUNS / 2] / t_fifo[RUNS / 2], t_sort[RUNS / 2],
           t_kestrel[RUNS / 2] / t_sort[RUNS / 2]);
}

/* ---- (b) trace simulation ------------------------------------------------------------- */

enum { NJOBS = 200, SIM_NODES = 4, SIM_DEV = 8, CKPT_S = 600, SIM_RANKS = 4 };

typedef struct {
    int64_t id, submit;
    int gpus, prio;
    int replicas;           /* ranks (1: one process), gpus each */
    int rnode[SIM_RANKS], rdevs[SIM_RANKS][SIM_DEV];
    double work;            /* seconds of work left */
    double since_ckpt;      /* work done since the last checkpoint in this run */
    int64_t first_start;    /* -1 until started */
    int running, done;
    int64_t backfill_for;
    int64_t run_start;
} simjob;

typedef struct {
    double util;
    double wait[4];
    int count[4];
    int preemptions;
    double lost_gpu_h;
    double busy_gpu_h;
    double makespan_h;
} simres;

static simres simulate(const simjob *trace, int fifo)
{
    static kd_dev devs[SIM_DEV];
    static kd_node nodes[SIM_NODES];
    static char names[SIM_NODES][8];
    simjob jobs[NJOBS];
    kd_qjob q[NJOBS];
    kd_alloc al[NJOBS * SIM_RANKS];
    simres res;
    int64_t t = 0;
    double busy_area = 0, cap_area = 0;
    int finished = 0;

    memset(&res, 0, sizeof(res));
    memcpy(jobs, trace, sizeof(jobs));
    for (int d = 0; d < SIM_DEV; d++)
        devs[d] = (kd_dev){ "a100", 81920, 80 };
    for (int n = 0; n < SIM_NODES; n++) {
        snprintf(names[n], sizeof(names[n]), "n%d", n);
        nodes[n] = (kd_node){ names[n], "default", SIM_DEV, devs };
    }
    while (finished < NJOBS) {
        int64_t next = INT64_MAX;
        size_t nq = 0, na = 0;
        int busy = 0;
        kd_snapshot s;
        kd_plan p;
        int changed;

        do {   /* plan until nothing more happens at this instant (preemptions free devices at once) */
            nq = na = 0;
            busy = 0;
            for (int i = 0; i < NJOBS; i++) {
                simjob *j = &jobs[i];
                if (j->done || j->submit > t)
                    continue;
                if (j->running) {
                    for (int r = 0; r < j->replicas; r++)   /* an allocation a rank */
                        al[na++] = (kd_alloc){ j->id, j->rnode[r], j->gpus, j->rdevs[r], j->prio, 1, j->run_start * 1000,
                                               (j->run_start + (int64_t)(j->since_ckpt - (int64_t)j->since_ckpt % CKPT_S)) * 1000,
                                               1, "", 0, j->backfill_for, j->replicas };
                    busy += j->gpus * j->replicas;
                } else {
                    q[nq] = make_job(j->id, j->submit * 1000, j->gpus, fifo ? 1 : j->prio);
                    q[nq++].replicas = j->replicas;
                }
            }
            memset(&s, 0, sizeof(s));
            s = (kd_snapshot){ nodes, SIM_NODES, al, na, q, nq, NULL, 0, NULL, 0, NULL, 0, 1000000, t * 1000, fifo };
            if (kd_sched_plan(&s, &p) < 0)
                exit(1);
            changed = 0;
            for (size_t a = 0; a < p.nacts; a++) {
                simjob *j = &jobs[p.acts[a].job - 1];
                if (p.acts[a].kind == KD_ACT_START) {
                    j->running = 1;
                    j->rnode[p.acts[a].rank] = p.acts[a].node;
                    memcpy(j->rdevs[p.acts[a].rank], p.devs + p.acts[a].dev_off, (size_t)j->gpus * sizeof(int));
                    j->run_start = t;
                    j->since_ckpt = 0;
                    j->backfill_for = p.acts[a].cause;
                    if (j->first_start < 0)
                        j->first_start = t;
                    changed = 1;
                } else if (p.acts[a].kind == KD_ACT_PREEMPT && j->running) {   /* a gang: once, whole */
                    /* stop now; the work since the last checkpoint is lost */
                    double lost = (double)((int64_t)j->since_ckpt % CKPT_S);
                    j->work += lost;
                    res.lost_gpu_h += lost * j->gpus * j->replicas / 3600;
                    j->running = 0;
                    res.preemptions++;
                    changed = 1;
                }
            }
            kd_plan_free(&p);
        } while (changed);

        /* next event: an arrival or a completion */
        busy = 0;
        nq = 0;
        for (int i = 0; i < NJOBS; i++) {
            const simjob *j = &jobs[i];
            if (j->done)
                continue;
            if (j->submit > t && j->submit < next)
                next = j->submit;
            if (j->running) {
                busy += j->gpus * j->replicas;
                if (t + (int64_t)j->work < next)
                    next = t + (int64_t)(j->work + 0.999);
            } else if (j->submit <= t) {
                nq++;
            }
        }
        if (next == INT64_MAX)
            break;
        res.busy_gpu_h += (double)busy * (double)(next - t) / 3600;
        if (nq > 0) {
            busy_area += (double)busy * (double)(next - t);
            cap_area += (double)(SIM_NODES * SIM_DEV) * (double)(next - t);
        }
        for (int i = 0; i < NJOBS; i++) {
            simjob *j = &jobs[i];
            if (!j->running)
                continue;
            j->work -= (double)(next - t);
            j->since_ckpt += (double)(next - t);
            if (j->work <= 0) {
                j->done = 1;
                j->running = 0;
                finished++;
                res.wait[j->prio] += (double)(j->first_start - j->submit);
                res.count[j->prio]++;
            }
        }
        t = next;
    }
    res.util = cap_area > 0 ? busy_area / cap_area : 1;
    res.makespan_h = (double)t / 3600;
    return res;
}

static void bench_trace(int gangs)
{
    simjob trace[NJOBS];
    simres k, f;
    int64_t at = 0;
    rng_state = 7;
    for (int i = 0; i < NJOBS; i++) {
        simjob *j = &trace[i];
        memset(j, 0, sizeof(*j));
        j->id = i + 1;
        at += (int64_t)(rnd() % 240);             /* a job every 2 min on average: more than 32 GPUs can absorb */
        j->submit = at;
        j->gpus = sizes[rnd() % 8];
        j->prio = class_of(rnd());
        j->work = (double)(300 + rnd() % 5100);   /* 5 to 90 minutes */
        j->first_start = -1;
        j->replicas = 1;
        if (gangs && i % 10 == 9) {   /* 10 % gangs of 2-4 ranks, 1-4 GPUs each */
            j->replicas = 2 + (int)(rnd() % 3);
            j->gpus = 1 << (rnd() % 3);
        }
    }
    k = simulate(trace, 0);
    f = simulate(trace, 1);
    printf("  trace: 200 jobs (1/2/4/8 GPUs, 5-90 min, 70/20/10 %% normal/high/urgent) on 4 x 8 GPUs, simulated clock%s\n",
           gangs ? ";\n    10 % of them gangs of 2-4 ranks of 1-4 GPUs" : "");
    printf("    %-12s %12s %14s %14s %14s %12s %10s\n", "policy", "utilisation", "wait normal", "wait high",
           "wait urgent", "preemptions", "makespan");
    printf("    %-12s %11.1f%% %12.1f m %12.1f m %12.1f m %12d %8.1f h\n", "kestrel", 100 * k.util,
           k.wait[1] / 60 / (k.count[1] ? k.count[1] : 1), k.wait[2] / 60 / (k.count[2] ? k.count[2] : 1),
           k.wait[3] / 60 / (k.count[3] ? k.count[3] : 1), k.preemptions, k.makespan_h);
    printf("    %-12s %11.1f%% %12.1f m %12.1f m %12.1f m %12d %8.1f h\n", "strict FIFO", 100 * f.util,
           f.wait[1] / 60 / (f.count[1] ? f.count[1] : 1), f.wait[2] / 60 / (f.count[2] ? f.count[2] : 1),
           f.wait[3] / 60 / (f.count[3] ? f.count[3] : 1), f.preemptions, f.makespan_h);
    printf("    (utilisation = busy GPU-time / capacity while the queue is non-empty; target >= 95 %%)\n");
    printf("    work lost to preemption (since the last 10-min checkpoint): %.1f GPU-h of %.1f busy GPU-h (%.1f %%)\n",
           k.lost_gpu_h, k.busy_gpu_h, 100 * k.lost_gpu_h / (k.busy_gpu_h > 0 ? k.busy_gpu_h : 1));
}

int main(void)
{
    printf("bench-sched:\n");
    bench_pass();
    bench_trace(0);
    bench_trace(1);
    return 0;
}
