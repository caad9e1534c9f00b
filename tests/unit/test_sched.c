/* Unit tests: the pure scheduling pass (server/sched.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "sched_plan.h"

static kd_dev a100[8], v100[8];
static kd_node nodes[3];

static void setup_nodes(void)
{
    for (int i = 0; i < 8; i++) {
        a100[i] = (kd_dev){ "a100", 81920, 80 };
        v100[i] = (kd_dev){ "v100", 16384, 70 };
    }
    nodes[0] = (kd_node){ "n0", "default", 4, a100 };
    nodes[1] = (kd_node){ "n1", "default", 8, a100 };
    nodes[2] = (kd_node){ "old", "legacy", 4, v100 };
}

static kd_qjob job(int64_t id, int prio, int gpus)
{
    kd_qjob j;
    memset(&j, 0, sizeof(j));
    j.id = id;
    j.priority = prio;
    j.submit_ms = id * 10;
    j.gpus = gpus;
    j.gpu_type = "";
    j.pool = "";
    j.team = "";
    j.owner = 1;
    j.owner_name = "alice";
    j.affinity_group = "";
    j.preemptible = 1;
    return j;
}

static kd_snapshot snap(const kd_qjob *q, size_t n, size_t nnodes)
{
    kd_snapshot s;
    memset(&s, 0, sizeof(s));
    setup_nodes();
    s.nodes = nodes;
    s.nnodes = nnodes;
    s.queue = q;
    s.nqueue = n;
    s.free_slots = 100;
    s.now_ms = 1000000;
    return s;
}

static const kd_action *act(const kd_plan *p, int64_t job)
{
    for (size_t i = 0; i < p->nacts; i++)
        if (p->acts[i].job == job)
            return &p->acts[i];
    return NULL;
}

static const kd_wait *waiting(const kd_plan *p, int64_t job)
{
    for (size_t i = 0; i < p->nwaits; i++)
        if (p->waits[i].job == job)
            return &p->waits[i];
    return NULL;
}

static void order_is_class_then_submit_time_then_id(void **state)
{
    kd_qjob a = job(5, 1, 0), b = job(4, 3, 0), c = job(3, 2, 0), d = job(2, 3, 0);
    (void)state;
    assert_true(kd_sched_order(&d, &b) < 0);   /* urgent, earlier */
    assert_true(kd_sched_order(&b, &c) < 0);   /* urgent before high */
    assert_true(kd_sched_order(&c, &a) < 0);
    a.submit_ms = c.submit_ms = 7;
    a.priority = c.priority = 1;
    assert_true(kd_sched_order(&c, &a) < 0);   /* same class and time: lower id */
    assert_int_equal(kd_sched_parse_cc("8.6"), 86);
    assert_int_equal(kd_sched_parse_cc("8"), -1);
}

static void best_fit_keeps_large_holes(void **state)
{
    kd_qjob q[] = { job(1, 1, 2) };
    int busy0[] = { 0, 1 };
    kd_alloc al[] = { { 50, 0, 2, busy0, 1, 1, 0, 0, 1, "", 0, 0 } };
    kd_snapshot s = snap(q, 1, 2);
    kd_plan p;
    (void)state;
    s.allocs = al;
    s.nallocs = 1;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 1)->kind, KD_ACT_START);
    assert_int_equal(act(&p, 1)->node, 0);        /* n0 has exactly 2 left; n1's 8 stay whole */
    assert_int_equal(p.devs[act(&p, 1)->dev_off], 2);
    assert_int_equal(p.devs[act(&p, 1)->dev_off + 1], 3);
    kd_plan_free(&p);
}

static void constraints_filter_with_reasons(void **state)
{
    kd_qjob q[] = { job(1, 1, 2), job(2, 1, 2), job(3, 1, 1), job(4, 1, 16) };
    kd_snapshot s = snap(q, 4, 3);
    kd_plan p;
    (void)state;
    q[0].gpu_type = "v100";
    q[1].min_mem_mb = 40960;
    q[1].pool = "legacy";
    q[2].min_cc = 80;
    q[2].pool = "legacy";
    s.nnodes = 3;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 1)->node, 2);
    assert_non_null(waiting(&p, 2));
    assert_non_null(strstr(waiting(&p, 2)->reason, "needs 2 x GPU with >= 40960 MB in pool legacy"));
    assert_non_null(strstr(waiting(&p, 3)->reason, "cc >= 8.0 in pool legacy"));
    assert_non_null(strstr(waiting(&p, 4)->reason, "no node can ever hold it"));
    kd_plan_free(&p);
}

static void blocked_job_is_not_delayed_by_backfill(void **state)
{
    /* n0: 2 of 4 busy with a non-preemptible job. A normal 4-GPU job is blocked and reserves n0.
     * A later non-preemptible job may not use the reservation; a preemptible one borrows it on a
     * lease; a job needing no GPU runs anyway. */
    kd_qjob q[] = { job(1, 1, 4), job(2, 1, 1), job(3, 1, 0) };
    int d[] = { 0, 1 }, d2[] = { 2 };
    kd_alloc al[] = { { 50, 0, 2, d, 2, 0, 0, 0, 9, "", 0, 0 }, { 2, 0, 1, d2, 1, 1, 900000, 0, 1, "", 0, 1 } };
    kd_snapshot s = snap(q, 3, 1);
    kd_plan p;
    (void)state;
    s.allocs = al;
    s.nallocs = 1;
    q[1].preemptible = 0;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_null(act(&p, 1));
    assert_null(act(&p, 2));
    assert_non_null(strstr(waiting(&p, 2)->reason, "node held for job 1"));
    assert_int_equal(act(&p, 3)->kind, KD_ACT_START);
    assert_int_equal(waiting(&p, 1)->position, 1);
    assert_int_equal(waiting(&p, 2)->position, 2);
    kd_plan_free(&p);
    q[1].preemptible = 1;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 2)->kind, KD_ACT_START);
    assert_int_equal(act(&p, 2)->cause, 1);
    assert_non_null(strstr(act(&p, 2)->reason, "borrowing the reservation of job 1"));
    kd_plan_free(&p);
    /* the reserved node's own job ended: the holder takes its lease back, class or not */
    s.queue = q;
    s.nqueue = 1;
    al[0] = al[1];
    s.nallocs = 1;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 1);
    assert_int_equal(p.acts[0].kind, KD_ACT_PREEMPT);
    assert_int_equal(p.acts[0].job, 2);
    assert_int_equal(p.acts[0].cause, 1);
    kd_plan_free(&p);
}

static void preemption_picks_least_lost_work_and_walks_back(void **state)
{
    /* n0 full: A (1 GPU, lost 1 s), B (1 GPU, lost 50 s), C (2 GPUs, lost 2 s). Urgent needs 2:
     * candidates by lost work A, C, B; A + C suffice; walking back drops A (C alone is enough). */
    kd_qjob q[] = { job(9, 3, 2) };
    int da[] = { 0 }, db[] = { 1 }, dc[] = { 2, 3 };
    kd_alloc al[] = {
        { 101, 0, 1, da, 1, 1, 999000, 0, 1, "", 0, 0 },
        { 102, 0, 1, db, 1, 1, 950000, 0, 1, "", 0, 0 },
        { 103, 0, 2, dc, 1, 1, 100000, 998000, 1, "", 0, 0 },
    };
    kd_snapshot s = snap(q, 1, 1);
    kd_plan p;
    (void)state;
    s.allocs = al;
    s.nallocs = 3;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 1);
    assert_int_equal(p.acts[0].kind, KD_ACT_PREEMPT);
    assert_int_equal(p.acts[0].job, 103);
    assert_int_equal(p.acts[0].cause, 9);
    assert_string_equal(p.acts[0].reason, "preempted by job 9 (urgent)");
    assert_non_null(strstr(waiting(&p, 9)->reason, "preempting job 103 on node n0"));
    kd_plan_free(&p);
    /* once they stop, the job waits for them instead of preempting more */
    al[2].terminating = 1;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 0);
    assert_non_null(strstr(waiting(&p, 9)->reason, "waiting for preempted jobs to stop on node n0"));
    kd_plan_free(&p);
}

static void never_preempt_equal_class_or_opted_out(void **state)
{
    kd_qjob q[] = { job(9, 3, 4) };
    int d1[] = { 0, 1 }, d2[] = { 2, 3 };
    kd_alloc al[] = { { 101, 0, 2, d1, 3, 1, 0, 0, 1, "", 0 }, { 102, 0, 2, d2, 1, 0, 0, 0, 1, "", 0, 0 } };
    kd_snapshot s = snap(q, 1, 1);
    kd_plan p;
    (void)state;
    s.allocs = al;
    s.nallocs = 2;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 0);
    assert_non_null(strstr(waiting(&p, 9)->reason, "nothing preemptible of a lower class"));
    kd_plan_free(&p);
}

static void dependencies(void **state)
{
    int64_t ok1[] = { 70 }, ok2[] = { 71 }, any[] = { 72 }, ghost[] = { 99 };
    kd_ref refs[] = { { 70, 3, 0 }, { 71, 4, 0 }, { 72, 2, 0 } };
    kd_qjob q[] = { job(1, 1, 0), job(2, 1, 0), job(3, 1, 0), job(4, 1, 0) };
    kd_snapshot s = snap(q, 4, 1);
    kd_plan p;
    (void)state;
    q[0].after_ok = ok1; q[0].n_after_ok = 1;
    q[1].after_ok = ok2; q[1].n_after_ok = 1;
    q[2].after_any = any; q[2].n_after_any = 1;
    q[3].after_ok = ghost; q[3].n_after_ok = 1;
    s.refs = refs;
    s.nrefs = 3;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 1)->kind, KD_ACT_START);
    assert_int_equal(act(&p, 2)->kind, KD_ACT_FAIL);
    assert_string_equal(act(&p, 2)->reason, "dependency job 71 ended FAILED (after_ok)");
    assert_string_equal(waiting(&p, 3)->reason, "waiting for job 72 (after_any)");
    assert_string_equal(act(&p, 4)->reason, "dependency job 99 does not exist");
    kd_plan_free(&p);
}

static void quotas_hold_jobs(void **state)
{
    kd_qjob q[] = { job(1, 1, 2), job(2, 1, 1) };
    int d[] = { 0, 1 };
    kd_alloc al[] = { { 50, 1, 2, d, 1, 1, 0, 0, 1, "vision", 0 } };
    kd_quota quotas[] = { { 1, 0, "vision", 3 } };
    kd_snapshot s = snap(q, 2, 2);
    kd_plan p;
    (void)state;
    q[0].team = q[1].team = "vision";
    s.allocs = al;
    s.nallocs = 1;
    s.quotas = quotas;
    s.nquotas = 1;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_string_equal(waiting(&p, 1)->reason, "quota of team vision: 2 of 3 GPUs in use");
    assert_int_equal(act(&p, 2)->kind, KD_ACT_START);   /* 1 more fits the quota */
    kd_plan_free(&p);
}

static void affinity(void **state)
{
    kd_ref refs[] = { { 70, 3, 1 } };
    /* groups are per user: bob's "bert" (owner 2, on node 1) must not steer alice's job */
    kd_group_ref groups[] = { { "bert", 1, 0 }, { "bert", 2, 1 } };
    kd_qjob q[] = { job(1, 1, 1), job(2, 1, 1), job(3, 1, 1) };
    kd_snapshot s = snap(q, 3, 2);
    kd_plan p;
    (void)state;
    q[0].affinity_job = 70;
    q[0].affinity_required = 1;
    q[1].affinity_group = "bert";     /* preferred */
    q[2].affinity_job = 80;           /* unknown target, required: waits */
    q[2].affinity_required = 1;
    s.refs = refs;
    s.nrefs = 1;
    s.groups = groups;
    s.ngroups = 2;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 1)->node, 1);
    assert_int_equal(act(&p, 2)->node, 0);
    assert_string_equal(waiting(&p, 3)->reason, "waiting for job 80 to be placed (affinity)");
    kd_plan_free(&p);
}

static void slots_and_fifo(void **state)
{
    kd_qjob q[] = { job(1, 1, 8), job(2, 3, 1), job(3, 1, 0) };
    kd_snapshot s = snap(q, 3, 1);
    kd_plan p;
    (void)state;
    s.free_slots = 1;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 2)->kind, KD_ACT_START);                 /* urgent first */
    assert_non_null(strstr(waiting(&p, 3)->reason, "no free process slot"));
    kd_plan_free(&p);
    s.free_slots = 10;
    s.fifo = 1;                                                       /* job 1 can never fit n0 (4 GPUs) */
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 0);
    assert_non_null(strstr(waiting(&p, 2)->reason, "strict FIFO"));
    kd_plan_free(&p);
}

/* --max-jobs: a higher class takes the slot of a lower preemptible job, a CPU job's too (it holds no
 * device, so no device preemption reached it: a hostile test filled every slot with `sleep`); a
 * stopping job's slot is awaited; an equal class, or a job whose devices are not free, only waits */
static void a_higher_class_takes_a_lower_jobs_process_slot(void **state)
{
    kd_qjob q[] = { job(9, 3, 1), job(10, 1, 0) };
    kd_alloc al[] = { { 101, 0, 0, NULL, 1, 1, 500000, 0, 2, "", 0, 0, 0 },
                      { 102, 0, 0, NULL, 1, 1, 900000, 0, 2, "", 0, 0, 0 } };
    kd_snapshot s = snap(q, 2, 1);
    kd_plan p;
    (void)state;
    s.allocs = al;
    s.nallocs = 2;
    s.free_slots = 0;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 1);
    assert_int_equal(p.acts[0].kind, KD_ACT_PREEMPT);
    assert_int_equal(p.acts[0].job, 102);                             /* the least work lost */
    assert_int_equal(p.acts[0].cause, 9);
    assert_string_equal(p.acts[0].reason, "preempted by job 9 (urgent) for its process slot (--max-jobs)");
    assert_non_null(strstr(waiting(&p, 9)->reason, "preempting job 102 for a process slot"));
    assert_non_null(strstr(waiting(&p, 10)->reason, "no free process slot"));   /* normal: no lower class */
    kd_plan_free(&p);
    al[1].terminating = 1;                                            /* stopping: awaited, no second victim */
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 0);
    assert_non_null(strstr(waiting(&p, 9)->reason, "waiting for a stopping job's process slot"));
    kd_plan_free(&p);
    al[1].terminating = 0;
    q[0].priority = 1;                                                /* equal class */
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 0);
    assert_non_null(strstr(waiting(&p, 9)->reason, "no free process slot"));
    kd_plan_free(&p);
    q[0] = job(9, 3, 8);                                              /* n0 has 4 GPUs: a slot would not help */
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 0);
    kd_plan_free(&p);
}

/* (a review) the slots full and the GPUs too, by normal jobs: an urgent GPU job preempts for a device,
 * which frees a slot as well (it waited for good); a slot victim is the one holding fewest devices;
 * two jobs of one pass do not both preempt for the same free GPU */
static void a_slot_and_busy_gpus_are_preempted_for_and_slot_victims_hold_fewest_devices(void **state)
{
    kd_qjob q[] = { job(9, 3, 1) };
    int d0[] = { 0 }, d1[] = { 1 }, d2[] = { 2 }, d3[] = { 3 };
    kd_alloc busy[] = { { 101, 0, 1, d0, 1, 1, 500000, 0, 2, "", 0, 0, 0 }, { 102, 0, 1, d1, 1, 1, 500000, 0, 2, "", 0, 0, 0 },
                        { 103, 0, 1, d2, 1, 1, 500000, 0, 2, "", 0, 0, 0 }, { 104, 0, 1, d3, 1, 1, 900000, 0, 2, "", 0, 0, 0 },
                        { 105, 0, 0, NULL, 1, 1, 500000, 0, 2, "", 0, 0, 0 } };
    kd_qjob two[] = { job(9, 3, 1), job(10, 3, 1) };
    kd_alloc some[] = { { 201, 0, 2, d0, 1, 1, 990000, 0, 2, "", 0, 0, 0 }, { 202, 0, 0, NULL, 1, 1, 100000, 0, 2, "", 0, 0, 0 },
                        { 203, 0, 0, NULL, 1, 1, 200000, 0, 2, "", 0, 0, 0 } };
    kd_snapshot s = snap(q, 1, 1);
    kd_plan p;
    (void)state;
    s.allocs = busy;
    s.nallocs = 5;
    s.free_slots = 0;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(p.nacts, 1);
    assert_int_equal(p.acts[0].kind, KD_ACT_PREEMPT);
    assert_int_equal(p.acts[0].job, 104);                             /* a GPU job: its device and its slot */
    assert_string_equal(p.acts[0].reason, "preempted by job 9 (urgent)");
    kd_plan_free(&p);
    {   /* n0's devices 0 and 1 free, 2 and 3 held by 201 */
        int d23[] = { 2, 3 };
        some[0].devs = d23;
        s = snap(two, 2, 1);
        s.allocs = some;
        s.nallocs = 3;
        s.free_slots = 0;
        assert_int_equal(kd_sched_plan(&s, &p), 0);
        assert_int_equal(p.nacts, 2);                                 /* two free GPUs, two slots taken */
        assert_int_equal(p.acts[0].job, 203);                         /* no devices, least work lost */
        assert_int_equal(p.acts[1].job, 202);                         /* not 201, whose GPUs would go idle */
        kd_plan_free(&p);
        two[1].gpus = 2;                                              /* 2 GPUs free, one kept for job 9 */
        assert_int_equal(kd_sched_plan(&s, &p), 0);
        assert_int_equal(p.acts[0].job, 203);
        for (size_t i = 1; i < p.nacts; i++)                          /* job 10 preempts for devices, */
            assert_true(p.acts[i].job != 202);                        /* never a slot it could not use */
        kd_plan_free(&p);
    }
    {   /* a node held for an earlier blocked job: a job that may not borrow it takes no slot for it (a
         * hostile test: its victim resumed and was preempted again every pass, the job never ran) */
        kd_qjob held[] = { job(20, 3, 4), job(21, 3, 1) };
        kd_alloc run[] = { { 101, 0, 1, d1, 3, 1, 500000, 0, 2, "", 0, 0, 0 },
                           { 102, 0, 0, NULL, 1, 1, 500000, 0, 3, "", 0, 0, 0 } };
        held[1].preemptible = 0;
        s = snap(held, 2, 1);
        s.allocs = run;
        s.nallocs = 2;
        s.free_slots = 0;
        assert_int_equal(kd_sched_plan(&s, &p), 0);
        assert_int_equal(p.nacts, 0);
        kd_plan_free(&p);
    }
}

static void deterministic(void **state)
{
    kd_qjob q[40];
    kd_snapshot s;
    kd_plan a, b;
    (void)state;
    for (int i = 0; i < 40; i++)
        q[i] = job(40 - i, 1 + i % 3, (i * 7) % 5);
    s = snap(q, 40, 3);
    assert_int_equal(kd_sched_plan(&s, &a), 0);
    assert_int_equal(kd_sched_plan(&s, &b), 0);
    assert_int_equal(a.nacts, b.nacts);
    assert_int_equal(a.ndevs, b.ndevs);
    assert_memory_equal(a.acts, b.acts, a.nacts * sizeof(kd_action));
    assert_memory_equal(a.devs, b.devs, a.ndevs * sizeof(int));
    assert_int_equal(a.nwaits, b.nwaits);
    for (size_t i = 0; i < a.nwaits; i++) {
        assert_int_equal(a.waits[i].job, b.waits[i].job);
        assert_int_equal(a.waits[i].position, b.waits[i].position);
        assert_string_equal(a.waits[i].reason, b.waits[i].reason);
    }
    kd_plan_free(&a);
    kd_plan_free(&b);
}

static int starts_of(const kd_plan *p, int64_t job, int *node_of_rank, int max)
{
    int n = 0;
    for (size_t i = 0; i < p->nacts; i++)
        if (p->acts[i].job == job && p->acts[i].kind == KD_ACT_START) {
            assert_int_equal(p->acts[i].rank, n);   /* ranks in a row, in order */
            if (n < max)
                node_of_rank[n] = p->acts[i].node;
            n++;
        }
    return n;
}

static void gang_packs_on_the_best_fitting_node_else_spreads(void **state)
{
    /* n0: 4 free, n1: 8 free. 2 x 2 fits n0 exactly (best fit); 3 x 4 needs both nodes */
    kd_qjob q[] = { job(1, 1, 2), job(2, 1, 4) };
    kd_snapshot s = snap(q, 1, 2);
    kd_plan p;
    int on[8];
    (void)state;
    q[0].replicas = 2;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(starts_of(&p, 1, on, 8), 2);
    assert_int_equal(on[0], 0);
    assert_int_equal(on[1], 0);
    assert_int_equal(p.acts[0].replicas, 2);
    assert_int_equal(p.acts[0].ndev, 2);
    assert_int_not_equal(p.devs[p.acts[0].dev_off], p.devs[p.acts[1].dev_off]);   /* each its own devices */
    assert_non_null(strstr(p.acts[1].reason, "placed 2 ranks on node n0 (2)"));
    kd_plan_free(&p);
    s.queue = &q[1];
    q[1].replicas = 3;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(starts_of(&p, 2, on, 8), 3);
    assert_int_equal(on[0], 1);   /* the most room first: as few nodes as hold it */
    assert_int_equal(on[1], 1);
    assert_int_equal(on[2], 0);
    assert_non_null(strstr(p.acts[0].reason, "placed 3 ranks on nodes n1 (2), n0 (1)"));
    kd_plan_free(&p);
}

static void gang_is_all_or_nothing_and_reserves_its_nodes(void **state)
{
    /* n0: 2 of 4 held by a job that cannot be preempted. 3 x 4 has room for 2 ranks now: nothing
     * starts, both nodes are reserved, and a later 1-GPU job that cannot be preempted waits too */
    kd_qjob q[] = { job(1, 1, 4), job(2, 1, 1), job(3, 1, 4) };
    int d[] = { 0, 1 };
    kd_alloc al[] = { { 50, 0, 2, d, 2, 0, 0, 0, 9, "", 0, 0 } };
    kd_snapshot s = snap(q, 2, 2);
    kd_plan p;
    int on[8];
    (void)state;
    s.allocs = al;
    s.nallocs = 1;
    q[0].replicas = 3;
    q[1].preemptible = 0;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(starts_of(&p, 1, on, 8), 0);
    assert_non_null(strstr(waiting(&p, 1)->reason, "gang of 3 ranks: needs 4 x GPU each, on up to 3 nodes: 10 GPUs free"));
    assert_null(act(&p, 2));
    assert_non_null(strstr(waiting(&p, 2)->reason, "node held for job 1"));
    kd_plan_free(&p);
    /* more ranks than the nodes can ever hold: said, and nothing is reserved */
    s.queue = &q[2];
    s.nqueue = 1;
    q[2].replicas = 5;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_non_null(strstr(waiting(&p, 3)->reason, "the nodes hold at most 3 such ranks"));
    assert_non_null(strstr(waiting(&p, 3)->reason, "no set of nodes can ever hold it"));
    kd_plan_free(&p);
    /* a pool: the gang stays in it */
    q[2].replicas = 2;
    q[2].gpus = 2;
    q[2].pool = "legacy";
    s.nnodes = 3;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(starts_of(&p, 3, on, 8), 2);
    assert_int_equal(on[0], 2);
    assert_int_equal(on[1], 2);
    kd_plan_free(&p);
}

static void running_gang_is_preempted_whole(void **state)
{
    /* a normal gang of 2 ranks holds all of n0 (an allocation a rank); an urgent 4-GPU job preempts it */
    kd_qjob q[] = { job(1, 3, 4) };
    int d0[] = { 0, 1 }, d1[] = { 2, 3 };
    kd_alloc al[] = { { 7, 0, 2, d0, 1, 1, 900000, 0, 1, "", 0, 0 }, { 7, 0, 2, d1, 1, 1, 900000, 0, 1, "", 0, 0 } };
    kd_snapshot s = snap(q, 1, 1);
    kd_plan p;
    (void)state;
    s.allocs = al;
    s.nallocs = 2;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 7)->kind, KD_ACT_PREEMPT);
    assert_null(act(&p, 1));   /* it waits for the gang to stop */
    kd_plan_free(&p);
}

static void gang_takes_back_its_lease_and_a_gang_is_the_costlier_victim(void **state)
{
    /* n0 (4 GPUs): job 60 borrows 2 devices of gang 1's reservation; 2 are free. The gang of
     * 2 x 2 preempts its borrower, whatever its class, and waits for it to stop */
    kd_qjob q[] = { job(1, 1, 2), job(3, 1, 1) };
    int d[] = { 0, 1 }, d1[] = { 2, 3 }, d2[] = { 0, 1 };
    kd_alloc lease[] = { { 60, 0, 2, d, 3, 1, 900000, 0, 1, "", 0, 1, 0 } };
    char *not_n1[] = { "n1" };
    kd_alloc mixed[] = { { 7, 0, 2, d1, 1, 1, 995000, 0, 1, "", 0, 0, 2 }, { 7, 2, 2, d2, 1, 1, 995000, 0, 1, "", 0, 0, 2 },
                         { 8, 0, 2, d, 1, 1, 992000, 0, 1, "", 0, 0, 0 } };
    kd_snapshot s = snap(q, 1, 1);
    kd_plan p;
    (void)state;
    q[0].replicas = 2;
    s.allocs = lease;
    s.nallocs = 1;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 60)->kind, KD_ACT_PREEMPT);
    assert_int_equal(act(&p, 60)->cause, 1);
    assert_non_null(strstr(waiting(&p, 1)->reason, "preempting job 60, which borrowed its reservation"));
    kd_plan_free(&p);
    /* while it waits for its borrower to stop, nobody borrows the node again (else: preempt, borrow, ...) */
    s.nqueue = 2;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_null(act(&p, 3));
    assert_non_null(strstr(waiting(&p, 3)->reason, "node held for job 1"));
    kd_plan_free(&p);
    s.nqueue = 1;
    /* an urgent 2-GPU job on n0, where a gang of 2 ranks (one rank there, one on old) and a one-process job hold
     * 2 devices each: the gang started later, but it loses 2 ranks' work (2 x 5 s > 8 s): the one-process job goes */
    q[0] = job(2, 3, 2);
    q[0].exclude = not_n1;   /* only n0 can take it */
    q[0].gpu_type = "a100";
    q[0].nexclude = 1;
    s.allocs = mixed;
    s.nallocs = 3;
    s.nnodes = 3;
    assert_int_equal(kd_sched_plan(&s, &p), 0);
    assert_int_equal(act(&p, 8)->kind, KD_ACT_PREEMPT);
    assert_null(act(&p, 7));
    kd_plan_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(order_is_class_then_submit_time_then_id),
        cmocka_unit_test(best_fit_keeps_large_holes),
        cmocka_unit_test(constraints_filter_with_reasons),
        cmocka_unit_test(blocked_job_is_not_delayed_by_backfill),
        cmocka_unit_test(preemption_picks_least_lost_work_and_walks_back),
        cmocka_unit_test(never_preempt_equal_class_or_opted_out),
        cmocka_unit_test(dependencies),
        cmocka_unit_test(quotas_hold_jobs),
        cmocka_unit_test(affinity),
        cmocka_unit_test(slots_and_fifo),
        cmocka_unit_test(a_higher_class_takes_a_lower_jobs_process_slot),
        cmocka_unit_test(a_slot_and_busy_gpus_are_preempted_for_and_slot_victims_hold_fewest_devices),
        cmocka_unit_test(deterministic),
        cmocka_unit_test(gang_packs_on_the_best_fitting_node_else_spreads),
        cmocka_unit_test(gang_is_all_or_nothing_and_reserves_its_nodes),
        cmocka_unit_test(running_gang_is_preempted_whole),
        cmocka_unit_test(gang_takes_back_its_lease_and_a_gang_is_the_costlier_victim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
