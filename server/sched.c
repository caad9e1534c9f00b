/* server/sched.c - the pure scheduling pass (policy in sched_plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched_priv.h"



/* The node is of the job's pool and not one it excludes. */
int kd__sched_node_ok(const kd_snapshot *s, const kd_qjob *j, size_t n)
{
    if (j->pool[0] && strcmp(s->nodes[n].pool, j->pool))
        return 0;
    for (size_t x = 0; x < j->nexclude; x++)
        if (!strcmp(j->exclude[x], s->nodes[n].name))
            return 0;
    return 1;
}

int kd_sched_order(const kd_qjob *a, const kd_qjob *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    if (a->submit_ms != b->submit_ms)
        return a->submit_ms < b->submit_ms ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

int kd_sched_parse_cc(const char *s)
{
    int maj = 0, min = 0;
    char dot = 0, extra = 0;
    if (s == NULL || !*s)
        return 0;
    if (sscanf(s, "%d%c%d%c", &maj, &dot, &min, &extra) != 3 || dot != '.' || maj < 0 || maj > 99 || min < 0 || min > 9)
        return -1;
    return maj * 10 + min;
}


int kd_sched_dev_matches(const kd_dev *d, const kd_qjob *j)
{
    return (!j->gpu_type[0] || !strcmp(d->type, j->gpu_type)) && d->mem_mb >= j->min_mem_mb && d->cc >= j->min_cc;
}

static const kd_ref *find_ref(const kd_snapshot *s, int64_t id)
{
    size_t lo = 0, hi = s->nrefs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->refs[mid].id == id)
            return &s->refs[mid];
        if (s->refs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 64;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(*p, ncap * elem);
    if (np == NULL)
        return -1;
    *p = np;
    *cap = ncap;
    return 0;
}

kd_action *kd__sched_add_action(pass *ps, kd_act_kind kind, int64_t job)
{
    kd_action *a;
    if (grow((void **)&ps->out->acts, &ps->cap_acts, ps->out->nacts + 1, sizeof(kd_action)) < 0)
        return NULL;
    a = &ps->out->acts[ps->out->nacts++];
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->job = job;
    a->node = -1;
    return a;
}

/* Append "; " + text to a reason buffer. */
void kd__sched_say(char *buf, size_t n, const char *text)
{
    size_t len = strlen(buf), add = strlen(text);
    if (len && len + 2 < n) {
        memcpy(buf + len, "; ", 2);
        len += 2;
    }
    if (len + add >= n)
        add = len < n ? n - len - 1 : 0;
    memcpy(buf + len, text, add);
    buf[len + add] = '\0';
}

static int add_wait(pass *ps, int64_t job, const char *reason)
{
    kd_wait *w;
    if (grow((void **)&ps->out->waits, &ps->cap_waits, ps->out->nwaits + 1, sizeof(kd_wait)) < 0)
        return -1;
    w = &ps->out->waits[ps->out->nwaits++];
    w->reason[0] = '\0';
    w->job = job;
    w->position = (int)ps->out->nwaits;
    kd__sched_say(w->reason, sizeof(w->reason), reason);
    return 0;
}

static int same_shape(const kd_qjob *a, const kd_qjob *b)
{
    if (a->nexclude != b->nexclude)
        return 0;
    for (size_t x = 0; x < a->nexclude; x++)
        if (strcmp(a->exclude[x], b->exclude[x]))
            return 0;
    return a->gpus == b->gpus && a->replicas == b->replicas && a->min_mem_mb == b->min_mem_mb && a->min_cc == b->min_cc &&
           a->preemptible == b->preemptible && !strcmp(a->gpu_type, b->gpu_type) && !strcmp(a->pool, b->pool);
}

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static const char *known_blocked(const pass *ps, const kd_qjob *j)
{
    if (j->gpus == 0 || j->affinity_job || j->affinity_group[0] ||
        (ps->nlessors && bsearch(&j->id, ps->lessors, ps->nlessors, sizeof(int64_t), id_cmp)))
        return NULL;   /* (a job with a lease out may preempt its lessee: its verdict is its own) */
    for (size_t i = 0; i < ps->nblocked; i++)
        if (ps->blocked[i].j->priority >= j->priority && same_shape(ps->blocked[i].j, j))
            return ps->blocked[i].reason;
    return NULL;
}

static void remember_blocked(pass *ps, const kd_qjob *j, const char *reason)
{
    if (j->gpus == 0 || j->affinity_job || j->affinity_group[0] || ps->nblocked == KESTREL_SCHED_MEMO)
        return;
    ps->blocked[ps->nblocked].j = j;
    snprintf(ps->blocked[ps->nblocked].reason, sizeof(ps->blocked[0].reason), "%s", reason);
    ps->nblocked++;
}

static const kd_quota *quota_hit(pass *ps, const kd_qjob *j, int64_t *used)
{
    for (size_t q = 0; q < ps->s->nquotas; q++) {
        const kd_quota *k = &ps->s->quotas[q];
        if (kd_quota_covers(k, j->owner, j->team) && ps->usage_user[q] + kd_job_gpus(j->gpus, j->replicas) > k->max_gpus) {
            *used = ps->usage_user[q];
            return k;
        }
    }
    return NULL;
}

void kd__sched_charge_quota(pass *ps, int64_t owner, const char *team, int gpus)
{
    for (size_t q = 0; q < ps->s->nquotas; q++) {
        const kd_quota *k = &ps->s->quotas[q];
        if (kd_quota_covers(k, owner, team))
            ps->usage_user[q] += gpus;
    }
}

/* Count matching devices on node n in a state. */
int kd__sched_count(pass *ps, int n, const kd_qjob *j, int state)
{
    const kd_node *node = &ps->s->nodes[n];
    int c = 0;
    if (ps->uniform[n]) {
        if (node->ndev == 0 || !kd_sched_dev_matches(&node->devs[0], j))
            return 0;
        return state == DEV_FREE ? ps->nfree[n] : state == DEV_SOON ? ps->nsoon[n] : node->ndev - ps->nfree[n] - ps->nsoon[n];
    }
    for (int d = 0; d < node->ndev; d++)
        if (ps->dev[n][d] == state && kd_sched_dev_matches(&node->devs[d], j))
            c++;
    return c;
}

int kd__sched_count_static(pass *ps, int n, const kd_qjob *j)
{
    const kd_node *node = &ps->s->nodes[n];
    int c = 0;
    if (ps->uniform[n])
        return (node->ndev && kd_sched_dev_matches(&node->devs[0], j)) ? node->ndev : 0;
    for (int d = 0; d < node->ndev; d++)
        c += kd_sched_dev_matches(&node->devs[d], j);
    return c;
}

static void set_state(pass *ps, int n, int d, int to)
{
    int from = ps->dev[n][d];
    ps->nfree[n] += (to == DEV_FREE) - (from == DEV_FREE);
    ps->nsoon[n] += (to == DEV_SOON) - (from == DEV_SOON);
    ps->dev[n][d] = (uint8_t)to;
}

/* Mark up to want matching devices in state `from` on node n as used; record them when rec. */
int kd__sched_take(pass *ps, int n, const kd_qjob *j, int from, int want, int rec)
{
    const kd_node *node = &ps->s->nodes[n];
    int got = 0;
    for (int d = 0; d < node->ndev && got < want; d++) {
        if (ps->dev[n][d] != from || !kd_sched_dev_matches(&node->devs[d], j))
            continue;
        set_state(ps, n, d, DEV_USED);
        if (rec) {
            if (grow((void **)&ps->out->devs, &ps->cap_devs, ps->out->ndevs + 1, sizeof(int)) < 0)
                return -1;
            ps->out->devs[ps->out->ndevs++] = d;
        }
        got++;
    }
    return got;
}

static int alloc_matching(const pass *ps, const kd_alloc *a, const kd_qjob *j)
{
    int c = 0;
    for (int d = 0; d < a->ndev; d++)
        c += kd_sched_dev_matches(&ps->s->nodes[a->node].devs[a->devs[d]], j);
    return c;
}

/* Work lost by preempting a: time since its checkpoint (else start), times its ranks (a gang stops whole). */
static int64_t lost_work(const kd_snapshot *s, const kd_alloc *a)
{
    return (s->now_ms - (a->checkpoint_ms > a->start_ms ? a->checkpoint_ms : a->start_ms)) * (a->ranks > 1 ? a->ranks : 1);
}

static int victim_order(const void *x, const void *y, void *snap)
{
    const kd_alloc *a = *(const kd_alloc *const *)x, *b = *(const kd_alloc *const *)y;
    int64_t la = lost_work(snap, a), lb = lost_work(snap, b);
    if (la != lb)
        return la < lb ? -1 : 1;
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    if (a->start_ms != b->start_ms)
        return a->start_ms > b->start_ms ? -1 : 1;   /* youngest first */
    return (a->id < b->id) - (a->id > b->id);
}

/* Smallest victim set on node n for j needing `need` more devices; returns count (0: impossible). */
static size_t victims_on(pass *ps, int n, const kd_qjob *j, int need, const kd_alloc **out, int64_t *lost)
{
    size_t nc = 0, k = 0;
    int sum = 0;
    for (size_t x = 0; x < ps->n_node_allocs[n]; x++) {
        size_t i = ps->node_allocs[n][x];
        const kd_alloc *a = &ps->s->allocs[i];
        if (!a->terminating && !ps->claimed[i] && a->preemptible &&
            (a->priority < j->priority || a->backfill_for == j->id) &&
            alloc_matching(ps, a, j) > 0)
            out[nc++] = a;
    }
    if (nc > 1)
        qsort_r(out, nc, sizeof(*out), victim_order, (void *)ps->s);
    while (k < nc && sum < need)
        sum += alloc_matching(ps, out[k++], j);
    if (sum < need)
        return 0;
    /* walk back: drop victims that are not needed */
    for (size_t i = k; i-- > 0;) {
        int m = alloc_matching(ps, out[i], j);
        if (sum - m >= need) {
            sum -= m;
            memmove(&out[i], &out[i + 1], (k - i - 1) * sizeof(*out));
            k--;
        }
    }
    *lost = 0;
    for (size_t i = 0; i < k; i++)
        *lost += lost_work(ps->s, out[i]);
    return k;
}

void kd__sched_describe_devices(char *buf, size_t n, const kd_qjob *j)
{
    char extra[96] = "";
    if (j->min_mem_mb)
        snprintf(extra, sizeof(extra), " with >= %lld MB", (long long)j->min_mem_mb);
    if (j->min_cc)
        snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), " cc >= %d.%d", j->min_cc / 10, j->min_cc % 10);
    snprintf(buf, n, "%d x %s%s", j->gpus, j->gpu_type[0] ? j->gpu_type : "GPU", extra);
}

static void describe_need(char *buf, size_t n, const kd_qjob *j)
{
    char devs[160];
    kd__sched_describe_devices(devs, sizeof(devs), j);
    snprintf(buf, n, "needs %s%s%s", devs, j->pool[0] ? " in pool " : "", j->pool);
    for (size_t x = 0; x < j->nexclude && strlen(buf) + strlen(j->exclude[x]) + 24 < n; x++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", x ? ", " : " not on node ", j->exclude[x]);
}

/* Returns KD_PLACED, KD_BLOCKED (it waits for capacity), KD_PREEMPTING (it waits for the
 * preemptions it planned or awaits); why filled when it waits. -1 on OOM. */
static int place(pass *ps, const kd_qjob *j, int *slots, char *why, size_t wn)
{
    const kd_snapshot *s = ps->s;
    int target = -1, best = -1, best_pref = 0, best_left = 0, best_held = 0, any_static = 0, most_free = 0;
    int64_t holder = 0;
    char buf[256];

    if (j->affinity_job || j->affinity_group[0]) {
        if (j->affinity_job) {
            const kd_ref *r = find_ref(s, j->affinity_job);
            target = r ? r->node : -1;
        } else {
            for (size_t g = 0; g < s->ngroups; g++)
                if (s->groups[g].owner == j->owner && !strcmp(s->groups[g].group, j->affinity_group))
                    target = s->groups[g].node;
        }
        if (target < 0 && j->affinity_required) {
            if (j->affinity_job)
                snprintf(buf, sizeof(buf), "waiting for job %lld to be placed (affinity)", (long long)j->affinity_job);
            else
                snprintf(buf, sizeof(buf), "waiting for a job of group %s to be placed (affinity)", j->affinity_group);
            kd__sched_say(why, wn, buf);
            return KD_BLOCKED;
        }
    }
    for (size_t n = 0; n < s->nnodes; n++) {
        int free_m, left, pref;
        if (!kd__sched_node_ok(s, j, n))
            continue;
        if (j->affinity_required && (int)n != target)
            continue;
        if (kd__sched_count_static(ps, (int)n, j) < j->gpus)
            continue;
        any_static = 1;
        if (j->gpus > 0 && ps->held_by[n] && (!j->preemptible || ps->held_firm[n])) {
            holder = ps->held_by[n];   /* no borrowing: the job cannot be preempted, or the holder waits for its nodes */
            continue;
        }
        free_m = j->gpus ? kd__sched_count(ps, (int)n, j, DEV_FREE) : 0;
        if (free_m > most_free)
            most_free = free_m;
        if (free_m < j->gpus)
            continue;
        left = free_m - j->gpus;
        pref = (int)n == target ? 0 : 1;
        {
            int held = j->gpus > 0 && ps->held_by[n] != 0;   /* borrow a reserved node only when needed */
            if (best < 0 || pref < best_pref || (pref == best_pref && held < best_held) ||
                (pref == best_pref && held == best_held && left < best_left)) {
                best = (int)n;
                best_pref = pref;
                best_held = held;
                best_left = left;
            }
        }
    }
    if (best >= 0) {
        kd_action *a = kd__sched_add_action(ps, KD_ACT_START, j->id);
        if (a == NULL)
            return -1;
        a->node = best;
        a->dev_off = ps->out->ndevs;
        a->ndev = j->gpus;
        a->replicas = 1;
        if (kd__sched_take(ps, best, j, DEV_FREE, j->gpus, 1) < 0)
            return -1;
        if (best_held) {
            a->cause = ps->held_by[best];
            snprintf(a->reason, sizeof(a->reason), "placed on node %s, borrowing the reservation of job %lld",
                     s->nodes[best].name, (long long)a->cause);
        } else {
            snprintf(a->reason, sizeof(a->reason), "placed on node %s", s->nodes[best].name);
        }
        kd__sched_charge_quota(ps, j->owner, j->team, j->gpus);
        (*slots)--;
        return KD_PLACED;
    }
    describe_need(buf, sizeof(buf), j);
    if (!any_static) {
        kd__sched_say(why, wn, buf);
        kd__sched_say(why, wn, j->affinity_required && target >= 0 ? "its affinity node cannot hold it" : "no node can ever hold it");
        return KD_BLOCKED;
    }
    if (j->gpus == 0)
        return KD_BLOCKED;

    /* devices already being freed by stopping jobs: wait for them instead of preempting more */
    for (size_t n = 0; n < s->nnodes; n++) {
        if (!kd__sched_node_ok(s, j, n) || (j->affinity_required && (int)n != target) ||
            (ps->held_by[n] && ps->held_prio[n] >= j->priority))
            continue;
        int f = kd__sched_count(ps, (int)n, j, DEV_FREE), soon = kd__sched_count(ps, (int)n, j, DEV_SOON);
        if (soon > 0 && f + soon >= j->gpus) {
            kd__sched_take(ps, (int)n, j, DEV_FREE, f, 0);
            kd__sched_take(ps, (int)n, j, DEV_SOON, j->gpus - f, 0);
            snprintf(buf, sizeof(buf), "waiting for preempted jobs to stop on node %s", s->nodes[n].name);
            kd__sched_say(why, wn, buf);
            return KD_PREEMPTING;
        }
    }
    /* preemption */
    if (!s->fifo) {   /* lower classes, and jobs borrowing this job's reservation */
        const kd_alloc **cand = ps->cand, **bestv = ps->bestv;
        size_t bestk = 0;
        int64_t bestlost = 0;
        int bestn = -1;
        for (size_t n = 0; n < s->nnodes; n++) {
            int64_t lost;
            size_t k;
            int f;
            if (!kd__sched_node_ok(s, j, n) || (j->affinity_required && (int)n != target) ||
                ps->held_by[n] || kd__sched_count_static(ps, (int)n, j) < j->gpus)
                continue;
            f = kd__sched_count(ps, (int)n, j, DEV_FREE) + kd__sched_count(ps, (int)n, j, DEV_SOON);
            k = victims_on(ps, (int)n, j, j->gpus - f, cand, &lost);
            if (k && (bestn < 0 || k < bestk || (k == bestk && lost < bestlost))) {
                bestn = (int)n;
                bestk = k;
                bestlost = lost;
                memcpy(bestv, cand, k * sizeof(*cand));
            }
        }
        if (bestn >= 0) {
            size_t len;
            snprintf(buf, sizeof(buf), "preempting job");
            for (size_t v = 0; v < bestk; v++) {
                kd_action *a = kd__sched_add_action(ps, KD_ACT_PREEMPT, bestv[v]->id);
                if (a == NULL)
                    return -1;
                a->node = bestn;
                a->cause = j->id;
                snprintf(a->reason, sizeof(a->reason), "preempted by job %lld (%s)%s", (long long)j->id, kd_priority_name(j->priority),
                         bestv[v]->backfill_for == j->id ? ", whose reservation it borrowed" : "");
                ps->claimed[bestv[v] - s->allocs] = 1;
                len = strlen(buf);
                snprintf(buf + len, sizeof(buf) - len, "%s %lld", v ? "," : "", (long long)bestv[v]->id);
            }
            len = strlen(buf);
            snprintf(buf + len, sizeof(buf) - len, " on node %s", s->nodes[bestn].name);
            kd__sched_take(ps, bestn, j, DEV_FREE, j->gpus, 0);
            kd__sched_take(ps, bestn, j, DEV_SOON, j->gpus, 0);
            kd__sched_say(why, wn, buf);
            return KD_PREEMPTING;
        }
    }
    /* blocked: reserve the node closest to fitting it (most free matching devices, then node
     * order) so that later jobs cannot delay it there; other nodes stay open for backfill */
    {
        int hold = -1, hold_free = -1;
        for (size_t n = 0; n < s->nnodes; n++) {
            int f;
            if (!kd__sched_node_ok(s, j, n) || (j->affinity_required && (int)n != target) ||
                ps->held_by[n] || kd__sched_count_static(ps, (int)n, j) < j->gpus)
                continue;
            f = kd__sched_count(ps, (int)n, j, DEV_FREE) + kd__sched_count(ps, (int)n, j, DEV_SOON);
            for (size_t x = 0; x < ps->n_node_allocs[n]; x++)
                if (s->allocs[ps->node_allocs[n][x]].backfill_for == j->id)
                    f += s->allocs[ps->node_allocs[n][x]].ndev;
            if (f > hold_free) {
                hold = (int)n;
                hold_free = f;
            }
        }
        if (hold >= 0) {
            ps->held_by[hold] = j->id;
            ps->held_prio[hold] = j->priority;
        }
    }
    {
        size_t len = strlen(buf);
        if (holder)
            snprintf(buf + len, sizeof(buf) - len, ": node held for job %lld", (long long)holder);
        else
            snprintf(buf + len, sizeof(buf) - len, ": at most %d free on a node%s", most_free,
                     j->priority > 1 && !s->fifo ? ", nothing preemptible of a lower class" : "");
    }
    kd__sched_say(why, wn, buf);
    return KD_BLOCKED;
}

/* A slot victim: fewest devices held first (a job without any first: no one's GPUs go idle for a
 * slot), then least work lost (victim_order). */
static int slot_victim_order(const kd_alloc *a, const kd_alloc *b, const kd_snapshot *s)
{
    if (a->ndev != b->ndev)
        return a->ndev < b->ndev ? -1 : 1;
    return victim_order(&a, &b, (void *)s);
}

/* A job held by --max-jobs alone: 0-GPU jobs hold no device, so no preemption reached them, and one
 * user's `sleep` jobs took every slot from every class (a hostile test). When the devices it needs
 * are free it takes the slot of a preemptible job of a strictly lower class (not a gang: fewest
 * devices, then least work lost), those devices kept for it in this pass; a stopping job's slot is
 * awaited first. When they are not, a device preemption (place()) frees a slot as well: planned as
 * if it had one. Gangs and jobs bound to a node (affinity) only wait. KD_PREEMPTING (why says
 * which), KD_BLOCKED, or -1 out of memory. */
static int take_slot(pass *ps, const kd_qjob *j, char *why, size_t wn)
{
    const kd_snapshot *s = ps->s;
    const kd_alloc *best = NULL;
    int fit = -1, one = 1, r;
    char buf[160];
    kd_action *a;
    if (s->fifo || j->replicas > 1 || j->affinity_required)
        return KD_BLOCKED;
    for (size_t n = 0; n < s->nnodes && fit < 0; n++)   /* where place() would start it, given a slot: */
        if (kd__sched_node_ok(s, j, n) && kd__sched_count_static(ps, (int)n, j) >= j->gpus &&
            !(j->gpus > 0 && ps->held_by[n] && (!j->preemptible || ps->held_firm[n])) &&   /* its holds too */
            kd__sched_count(ps, (int)n, j, DEV_FREE) >= j->gpus)
            fit = (int)n;   /* (a node held for another job was taken for free: its victim resumed, was
                             * preempted again every pass, and the job never ran; a hostile test) */
    if (fit < 0) {   /* no node has them free: place() cannot start it, only plan or await preemptions */
        if (j->gpus == 0)
            return KD_BLOCKED;
        r = place(ps, j, &one, why, wn);
        return r < 0 ? -1 : r == KD_PREEMPTING ? KD_PREEMPTING : KD_BLOCKED;
    }
    for (size_t i = 0; i < s->nallocs; i++) {
        const kd_alloc *v = &s->allocs[i];
        if (!v->terminating && !ps->claimed[i] && v->preemptible && v->priority < j->priority && v->ranks <= 1 &&
            (best == NULL || slot_victim_order(v, best, s) < 0))
            best = v;
    }
    if (best == NULL)
        return KD_BLOCKED;
    if (kd__sched_take(ps, fit, j, DEV_FREE, j->gpus, 0) < 0)   /* no other job of this pass takes them */
        return -1;
    if (ps->soon_slots > 0) {
        ps->soon_slots--;
        kd__sched_say(why, wn, "waiting for a stopping job's process slot (--max-jobs)");
        return KD_PREEMPTING;
    }
    if ((a = kd__sched_add_action(ps, KD_ACT_PREEMPT, best->id)) == NULL)
        return -1;
    a->node = best->node;
    a->cause = j->id;
    snprintf(a->reason, sizeof(a->reason), "preempted by job %lld (%s) for its process slot (--max-jobs)",
             (long long)j->id, kd_priority_name(j->priority));
    ps->claimed[best - s->allocs] = 1;
    snprintf(buf, sizeof(buf), "preempting job %lld for a process slot (--max-jobs)", (long long)best->id);
    kd__sched_say(why, wn, buf);
    return KD_PREEMPTING;
}

static int order_idx(const void *x, const void *y, void *snap)
{
    const kd_snapshot *s = snap;
    const kd_qjob *a = &s->queue[*(const size_t *)x], *b = &s->queue[*(const size_t *)y];
    if (s->fifo) {
        if (a->submit_ms != b->submit_ms)
            return a->submit_ms < b->submit_ms ? -1 : 1;
        return (a->id > b->id) - (a->id < b->id);
    }
    return kd_sched_order(a, b);
}

int kd_sched_plan(const kd_snapshot *s, kd_plan *out)
{
    pass ps;
    size_t *idx = NULL;
    int slots = s->free_slots, rc = -1, fifo_blocked = 0;

    memset(out, 0, sizeof(*out));
    memset(&ps, 0, sizeof(ps));
    ps.s = s;
    ps.out = out;
    ps.dev = calloc(s->nnodes + 1, sizeof(*ps.dev));
    ps.held_by = calloc(s->nnodes + 1, sizeof(*ps.held_by));
    ps.held_prio = calloc(s->nnodes + 1, sizeof(*ps.held_prio));
    ps.held_firm = calloc(s->nnodes + 1, 1);
    ps.claimed = calloc(s->nallocs + 1, 1);
    ps.usage_user = calloc(s->nquotas + 1, sizeof(*ps.usage_user));
    idx = malloc((s->nqueue + 1) * sizeof(*idx));
    ps.nfree = calloc(s->nnodes + 1, sizeof(int));
    ps.nsoon = calloc(s->nnodes + 1, sizeof(int));
    ps.uniform = calloc(s->nnodes + 1, 1);
    ps.node_allocs = calloc(s->nnodes + 1, sizeof(*ps.node_allocs));
    ps.n_node_allocs = calloc(s->nnodes + 1, sizeof(size_t));
    ps.cand = malloc((s->nallocs + 1) * sizeof(*ps.cand));
    ps.bestv = malloc((s->nallocs + 1) * sizeof(*ps.bestv));
    ps.lessors = malloc((s->nallocs + 1) * sizeof(*ps.lessors));
    if (!ps.dev || !ps.held_by || !ps.held_prio || !ps.held_firm || !ps.claimed || !ps.usage_user || !idx || !ps.nfree ||
        !ps.nsoon || !ps.uniform || !ps.node_allocs || !ps.n_node_allocs || !ps.cand || !ps.bestv || !ps.lessors)
        goto done;
    for (size_t n = 0; n < s->nnodes; n++) {
        const kd_node *node = &s->nodes[n];
        if ((ps.dev[n] = calloc((size_t)node->ndev + 1, 1)) == NULL ||
            (ps.node_allocs[n] = malloc((s->nallocs + 1) * sizeof(size_t))) == NULL)
            goto done;
        ps.nfree[n] = node->ndev;
        ps.uniform[n] = 1;
        for (int d = 1; d < node->ndev; d++)
            if (strcmp(node->devs[d].type, node->devs[0].type) || node->devs[d].mem_mb != node->devs[0].mem_mb ||
                node->devs[d].cc != node->devs[0].cc)
                ps.uniform[n] = 0;
    }
    for (size_t i = 0; i < s->nallocs; i++) {
        const kd_alloc *a = &s->allocs[i];
        for (int d = 0; d < a->ndev; d++)
            set_state(&ps, a->node, a->devs[d], a->terminating ? DEV_SOON : DEV_USED);
        ps.node_allocs[a->node][ps.n_node_allocs[a->node]++] = i;
        kd__sched_charge_quota(&ps, a->owner, a->team, a->ndev);
        ps.soon_slots += a->terminating && (i == 0 || s->allocs[i - 1].id != a->id);   /* a gang's ranks: one slot */
        if (a->backfill_for)
            ps.lessors[ps.nlessors++] = a->backfill_for;
    }
    if (ps.nlessors > 1)
        qsort(ps.lessors, ps.nlessors, sizeof(*ps.lessors), id_cmp);
    for (size_t i = 0; i < s->nqueue; i++)
        idx[i] = i;
    {
        /* the daemon hands the queue over in order (the catalog's index): check, sort only if not */
        int sorted = 1;
        for (size_t i = 1; i < s->nqueue && sorted; i++)
            sorted = order_idx(&idx[i - 1], &idx[i], (void *)s) <= 0;
        if (!sorted)
            qsort_r(idx, s->nqueue, sizeof(*idx), order_idx, (void *)s);
    }

    for (size_t qi = 0; qi < s->nqueue; qi++) {
        const kd_qjob *j = &s->queue[idx[qi]];
        char why[320], buf[160];
        int64_t used;
        const kd_quota *q;
        int failed = 0, r;

        why[0] = '\0';

        for (size_t k = 0; k < j->n_after_ok + j->n_after_any && !failed; k++) {
            int ok_kind = k < j->n_after_ok;
            int64_t dep = ok_kind ? j->after_ok[k] : j->after_any[k - j->n_after_ok];
            const kd_ref *ref = find_ref(s, dep);
            if (ref == NULL || ((ref->state == ST_FAILED || ref->state == ST_CANCELLED) && ok_kind)) {
                kd_action *a = kd__sched_add_action(&ps, KD_ACT_FAIL, j->id);
                if (a == NULL)
                    goto done;
                if (ref == NULL)
                    snprintf(a->reason, sizeof(a->reason), "dependency job %lld does not exist", (long long)dep);
                else
                    snprintf(a->reason, sizeof(a->reason), "dependency job %lld ended %s (after_ok)", (long long)dep,
                             ref->state == ST_FAILED ? "FAILED" : "CANCELLED");
                failed = 1;
            } else if (ok_kind ? ref->state != ST_SUCCEEDED
                               : !(ref->state == ST_SUCCEEDED || ref->state == ST_FAILED || ref->state == ST_CANCELLED)) {
                snprintf(buf, sizeof(buf), "waiting for job %lld (%s)", (long long)dep, ok_kind ? "after_ok" : "after_any");
                kd__sched_say(why, sizeof(why), buf);
            }
        }
        if (failed)
            continue;
        if (j->gpus > 0 && (q = quota_hit(&ps, j, &used)) != NULL) {
            if (q->is_team)
                snprintf(buf, sizeof(buf), "quota of team %s: %lld of %d GPUs in use", q->team, (long long)used, q->max_gpus);
            else
                snprintf(buf, sizeof(buf), "quota of user %s: %lld of %d GPUs in use", j->owner_name, (long long)used,
                         q->max_gpus);
            kd__sched_say(why, sizeof(why), buf);
        }
        if (slots <= 0 && !why[0] && !fifo_blocked) {
            if ((r = take_slot(&ps, j, why, sizeof(why))) < 0)
                goto done;
            if (r == KD_PREEMPTING) {
                if (add_wait(&ps, j->id, why) < 0)
                    goto done;
                continue;
            }
        }
        if (slots <= 0)
            kd__sched_say(why, sizeof(why), "no free process slot (--max-jobs)");
        if (fifo_blocked)
            kd__sched_say(why, sizeof(why), "strict FIFO: an earlier job is blocked");
        if (why[0]) {
            if (add_wait(&ps, j->id, why) < 0)
                goto done;
            continue;
        }
        {
            const char *known = known_blocked(&ps, j);
            if (known) {
                kd__sched_say(why, sizeof(why), known);
                r = KD_BLOCKED;
            } else {
                r = j->replicas > 1 ? kd__sched_place_gang(&ps, j, &slots, why, sizeof(why))
                                    : place(&ps, j, &slots, why, sizeof(why));
                /* only a capacity verdict carries over (preemption planned or awaited does not) */
                if (r == KD_BLOCKED)
                    remember_blocked(&ps, j, why);
            }
        }
        if (r < 0)
            goto done;
        if (r != KD_PLACED) {
            if (s->fifo)
                fifo_blocked = 1;
            if (add_wait(&ps, j->id, why[0] ? why : "waiting") < 0)
                goto done;
        }
    }
    rc = 0;
done:
    for (size_t n = 0; ps.dev && n < s->nnodes; n++)
        free(ps.dev[n]);
    for (size_t n = 0; ps.node_allocs && n < s->nnodes; n++)
        free(ps.node_allocs[n]);
    free(ps.dev);
    free(ps.nfree);
    free(ps.nsoon);
    free(ps.uniform);
    free(ps.node_allocs);
    free(ps.n_node_allocs);
    free(ps.cand);
    free(ps.bestv);
    free(ps.lessors);
    free(ps.held_by);
    free(ps.held_prio);
    free(ps.held_firm);
    free(ps.claimed);
    free(ps.usage_user);
    free(idx);
    if (rc < 0)
        kd_plan_free(out);
    return rc;
}

void kd_plan_free(kd_plan *p)
{
    free(p->acts);
    free(p->devs);
    free(p->waits);
    memset(p, 0, sizeof(*p));
}
