/* server/engine.c - applies scheduling decisions and records how jobs end. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine.h"
#include "exec_local.h"
#include "exec_reap.h"
#include "metrics.h"
#include "alerts.h"
#include "job_cgroup.h"
#include "job_disk.h"
#include "telemetry.h"
#include "policy.h"
#include "log_index.h"
#include "store.h"

static void deadline_ts(struct timespec *ts, int64_t deadline_ms)
{
    ts->tv_sec = (time_t)(deadline_ms / 1000);
    ts->tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
}

void kd_engine_changed(kd_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->gen++;
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->mu);
}

void kd_engine_kick(kd_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->sched_pending = 1;
    pthread_cond_signal(&e->sched_cv);
    pthread_mutex_unlock(&e->mu);
}

uint64_t kd_engine_generation(kd_engine *e)
{
    uint64_t g;
    pthread_mutex_lock(&e->mu);
    g = e->gen;
    pthread_mutex_unlock(&e->mu);
    return g;
}

void kd_engine_wait(kd_engine *e, uint64_t seen, int64_t deadline_ms)
{
    struct timespec ts;
    deadline_ts(&ts, deadline_ms);
    pthread_mutex_lock(&e->mu);
    while (e->gen == seen && !e->stopping && kestrel__now_ms() < deadline_ms)
        if (pthread_cond_timedwait(&e->changed, &e->mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&e->mu);
}

static kd_run *find_run(kd_engine *e, int64_t id)
{
    for (kd_run *r = e->runs; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

/* Begin stopping a run (engine lock held): SIGTERM now, SIGKILL after its grace period. */
void kd_engine_terminate_locked(kd_engine *e, kd_run *r, int why, const char *by)
{
    if (r->term != KD_TERM_NONE)
        return;
    r->term = why;
    snprintf(r->term_by, sizeof(r->term_by), "%s", by ? by : "");
    r->kill_at_ms = kestrel__now_ms() + (int64_t)(r->grace_s > 0 ? r->grace_s : e->cfg->grace_s) * 1000;
    e->exec->signal(e, r, SIGTERM);
    e->sched_pending = 1;   /* let the loop watch the deadline */
    pthread_cond_signal(&e->sched_cv);
}

/* The note a cancel of a running job leaves in its events, then who asked. */
#define CANCEL_ASKED "cancel requested by "

/* Who asked to cancel job id's latest run, when someone did (a note since it entered RUNNING): 1
 * with by filled, else 0. */
static int cancel_asked(kd_engine *e, int64_t id, char *by, size_t n)
{
    Kestrel__V1__Job *job = NULL;
    int asked = 0;
    if (kd_catalog_job_load(e->cat, id, 1, &job, NULL) < 0) {
        kestrel_error_clear();
        return 0;
    }
    for (size_t i = job->n_events; i-- > 0 && !asked;) {
        const Kestrel__V1__JobEvent *ev = job->events[i];
        if (ev->to_state == KESTREL__V1__JOB_STATE__RUNNING && ev->from_state != KESTREL__V1__JOB_STATE__RUNNING)
            break;   /* the run's start: no cancel was asked of it */
        if (!strncmp(ev->reason, CANCEL_ASKED, strlen(CANCEL_ASKED))) {
            snprintf(by, n, "%s", ev->reason + strlen(CANCEL_ASKED));
            asked = 1;
        }
    }
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return asked;
}

int kd_engine_cancel(kd_engine *e, int64_t id, const char *by)
{
    char reason[200];
    kd_transition t = { 0, reason, 0, 0, NULL, 0, NULL };
    if (e->ext) {
        int rc = e->ext->cancel(e, id, by);
        if (rc <= 0)
            return rc;
    }
    snprintf(reason, sizeof(reason), "cancelled by %s", by);
    /* A job moves between the catalog (queued) and a run (running); retry across that hand-over. */
    for (int tries = 0; tries < 500; tries++) {
        int rc, state, found = 0;
        struct timespec ts = { 0, 2000000 };
        t.now_ms = kestrel__now_ms();
        rc = kd_catalog_job_transition(e->cat, id, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_CANCELLED, &t);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            kd_engine_changed(e);
            return 0;
        }
        pthread_mutex_lock(&e->mu);
        {
            kd_run *r = find_run(e, id);
            if (r && (r->term == KD_TERM_PREEMPT || r->term == KD_TERM_SHUTDOWN)) {
                /* a cancel wins over a preemption in progress: the job must not come back */
                r->term = KD_TERM_CANCEL;
                snprintf(r->term_by, sizeof(r->term_by), "%s", by);
                found = 1;
            } else if (r) {
                kd_engine_terminate_locked(e, r, KD_TERM_CANCEL, by);
                found = 1;
            }
        }
        pthread_mutex_unlock(&e->mu);
        if (found) {   /* kept: a kestreld killed before the run ends cancels it at its next start */
            char note[200];
            snprintf(note, sizeof(note), "%s%s", CANCEL_ASKED, by);
            kd_catalog_job_note(e->cat, id, kestrel__now_ms(), note);
            return 0;
        }
        if ((rc = kd_catalog_job_state(e->cat, id, &state)) < 0)
            return rc;
        if (state == KESTREL_JOB_STATE_SUCCEEDED || state == KESTREL_JOB_STATE_FAILED ||
            state == KESTREL_JOB_STATE_CANCELLED)
            return 0;
        nanosleep(&ts, NULL);   /* between a run's end and its requeue */
    }
    return kestrel__error_set(KESTREL_ERROR, "job %lld did not settle for cancellation", (long long)id);
}

void kd_run_free(kd_run *r)
{
    if (r == NULL)
        return;
    free(r->devices);
    free(r->rank_nodes);
    free(r->rank_pgids);
    free(r);
}

void kd_engine_set_rank_pgid(kd_engine *e, kd_run *run, int rank, pid_t pgid)
{
    pthread_mutex_lock(&e->mu);
    if (rank == 0 && pgid > 0)
        run->pgid = pgid;
    if (run->rank_pgids && rank >= 0 && rank < run->nranks)
        run->rank_pgids[rank] = pgid;   /* 0: the rank was reaped */
    if (pgid > 0 && run->term != KD_TERM_NONE)   /* cancelled or preempted while the gang was starting */
        kill(-pgid, run->kill_at_ms && kestrel__now_ms() >= run->kill_at_ms ? SIGKILL : SIGTERM);
    pthread_mutex_unlock(&e->mu);
}

void kd_engine_set_pgid(kd_engine *e, kd_run *run, pid_t pgid)
{
    pthread_mutex_lock(&e->mu);
    run->pgid = pgid;
    if (run->term != KD_TERM_NONE)   /* cancelled while starting */
        e->exec->signal(e, run, SIGTERM);
    pthread_mutex_unlock(&e->mu);
}

int kd_engine_term_requested(kd_engine *e, kd_run *run)
{
    int t;
    pthread_mutex_lock(&e->mu);
    t = run->term;
    pthread_mutex_unlock(&e->mu);
    return t;
}

void kd_engine_log(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t n)
{
    kd_engine_log_from(e, job_id, lines, n, 0, -1);
}

void kd_engine_log_from(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t n, int stream, int64_t off)
{
    int first_drop = 0;
    kd_log_line note;
    size_t k = n;
    const kd_log_line *kept = kd_job_disk_log_keep(e, job_id, lines, &k, &note);   /* lines, but at the floor */
    if (kd_catalog_log_append(e->cat, job_id, kept, k, e->cfg->max_log_bytes, stream, off, &first_drop) < 0)
        fprintf(stderr, "kestreld: job %lld: %s\n", (long long)job_id, kestrel_error_last()->message);
    else
        kd_metrics_log_lines(e->metrics, k);
    kd_policies_scan(e, job_id, lines, n);
    if (first_drop)
        kd_catalog_job_note(e->cat, job_id, kestrel__now_ms(), "log over --max-log-bytes: its first and last bytes "
                            "are kept, the middle is dropped");
    kd_engine_changed(e);
}

void kd_engine_finished(kd_engine *e, kd_run *run, kd_end_kind kind, int code, const char *why)
{
    char reason[512];
    kd_transition t = { kestrel__now_ms(), reason, -1, 0, NULL, 0 };
    int to, term;

    pthread_mutex_lock(&e->mu);
    term = run->term;
    pthread_mutex_unlock(&e->mu);
    /* the run's token dies before anyone can see that the run ended (a client that saw the end, then
     * used the token, found it alive for a moment) */
    kd_catalog_token_drop_job(e->cat, run->id);
    if (kind == KD_END_EXITED) {
        t.set_exit = 1;
        t.exit_code = code;
    } else if (kind == KD_END_SIGNALED) {
        t.set_exit = 1;
        t.exit_code = 128 + code;
    }
    if (term == KD_TERM_PREEMPT) {
        /* an exit after SIGTERM (or the SIGKILL at the end of the grace) is a preemption, never a failure */
        kd_transition p = { kestrel__now_ms(), run->term_by, 0, 0, NULL, 0, NULL };
        kd_catalog_job_transition(e->cat, run->id, KESTREL_JOB_STATE_RUNNING, KESTREL_JOB_STATE_PREEMPTED, &p);
        to = KESTREL_JOB_STATE_QUEUED;
        snprintf(reason, sizeof(reason), "requeued after preemption, keeps its submit time");
        t.set_exit = 0;
        t.bump_restart = 1;
        if (kd_catalog_job_transition(e->cat, run->id, KESTREL_JOB_STATE_PREEMPTED, to, &t) < 0)
            fprintf(stderr, "kestreld: job %lld: %s\n", (long long)run->id, kestrel_error_last()->message);
        pthread_mutex_lock(&e->mu);
        term = run->term;   /* cancelled while it was being requeued? */
        pthread_mutex_unlock(&e->mu);
        if (term == KD_TERM_CANCEL) {
            kd_transition c = { kestrel__now_ms(), reason, 0, 0, NULL, 0, NULL };
            snprintf(reason, sizeof(reason), "cancelled by %s", run->term_by);
            kd_catalog_job_transition(e->cat, run->id, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_CANCELLED, &c);
        }
        goto release;
    }
    if (term == KD_TERM_CANCEL) {
        to = KESTREL_JOB_STATE_CANCELLED;
        snprintf(reason, sizeof(reason), "cancelled by %s", run->term_by);
    } else if (term == KD_TERM_DISK) {   /* never retried: it would fill the disk again */
        to = KESTREL_JOB_STATE_FAILED;
        snprintf(reason, sizeof(reason), "stopped: %s", run->term_by);
    } else if (term == KD_TERM_SHUTDOWN) {
        to = run->no_retry ? KESTREL_JOB_STATE_FAILED : KESTREL_JOB_STATE_QUEUED;
        snprintf(reason, sizeof(reason), run->no_retry ? "daemon stopped" : "requeued: daemon shutting down");
        t.bump_restart = !run->no_retry;
        if (!run->no_retry)
            t.set_exit = 0;
    } else if (kind == KD_END_NOT_STARTED) {
        to = KESTREL_JOB_STATE_FAILED;
        snprintf(reason, sizeof(reason), "%s", why ? why : "could not start");
    } else if (kind == KD_END_EXITED && code == 0) {
        to = KESTREL_JOB_STATE_SUCCEEDED;
        snprintf(reason, sizeof(reason), "exit code 0");
    } else {
        char failure[128];
        if (kind == KD_END_EXITED)
            snprintf(failure, sizeof(failure), "exit code %d", code);
        else
            snprintf(failure, sizeof(failure), "killed by signal %d (%s)", code, strsignal(code));
        to = KESTREL_JOB_STATE_FAILED;
        snprintf(reason, sizeof(reason), "%s", failure);
        if (!run->no_retry && kd_engine_retry(e, run, 1, failure, reason, sizeof(reason))) {
            to = KESTREL_JOB_STATE_QUEUED;
            t.bump_restart = 1;
        }
    }
    if (kd_catalog_job_transition(e->cat, run->id, KESTREL_JOB_STATE_RUNNING, to, &t) < 0)
        fprintf(stderr, "kestreld: job %lld: %s\n", (long long)run->id, kestrel_error_last()->message);
release:
    kd_policies_run_end(e, run->id, NULL, 0);   /* each run starts with no policy matched */
    pthread_mutex_lock(&e->mu);
    kd_engine_release_locked(e, run);
    e->gen++;
    e->sched_pending = 1;
    pthread_cond_broadcast(&e->changed);
    pthread_cond_signal(&e->sched_cv);
    pthread_mutex_unlock(&e->mu);
    kd_run_free(run);
}

/* Forget a run and its slot (engine lock held; the caller frees it). */
void kd_engine_release_locked(kd_engine *e, kd_run *run)
{
    for (kd_run **pp = &e->runs; *pp; pp = &(*pp)->next) {
        if (*pp == run) {
            *pp = run->next;
            break;
        }
    }
    e->running--;
}

int kd_engine_set_priority(kd_engine *e, int64_t id, int priority)
{
    int state, rc;
    if ((rc = kd_catalog_job_state(e->cat, id, &state)) < 0)
        return rc;
    if (state != KESTREL_JOB_STATE_QUEUED)
        return 1;
    if (e->ext && (rc = e->ext->set_priority(e, id, priority)) < 0)
        return rc;   /* the cluster refused: nothing changes here either */
    rc = kd_catalog_job_set_priority(e->cat, id, priority, kestrel__now_ms());
    kd_engine_kick(e);
    kd_engine_changed(e);
    return rc;
}

int kd_engine_checkpoint(kd_engine *e, int64_t id)
{
    int64_t now = kestrel__now_ms();
    int rc = kd_catalog_job_checkpoint(e->cat, id, now, !kd_job_disk_low(e));   /* no event at the floor */
    pthread_mutex_lock(&e->mu);
    {
        kd_run *r = find_run(e, id);
        if (r)
            r->checkpoint_ms = now;
    }
    pthread_mutex_unlock(&e->mu);
    kd_engine_changed(e);
    return rc;
}

static int wait_cmp(const void *a, const void *b)
{
    int64_t x = ((const kd_wait *)a)->job, y = ((const kd_wait *)b)->job;
    return (x > y) - (x < y);
}

void kd_engine_fresh_pass(kd_engine *e, long timeout_ms)
{
    struct timespec ts;
    uint64_t target;
    deadline_ts(&ts, kestrel__now_ms() + timeout_ms);
    pthread_mutex_lock(&e->mu);
    /* a pass in progress may have read the queue before our job: then the one after it; with none
     * in progress, the next one (which this request starts) */
    target = e->passes + (e->in_pass ? 2 : 1);
    e->sched_pending = 1;
    pthread_cond_signal(&e->sched_cv);
    while (e->passes < target && !e->stopping)
        if (pthread_cond_timedwait(&e->changed, &e->mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&e->mu);
}

int kd_engine_explain(kd_engine *e, int64_t id, int *position, char *reason, size_t n)
{
    kd_wait key, *w;
    int found = 0;
    if (e->ext && e->ext->explain(e, id, reason, n)) {
        *position = 0;   /* the cluster's queue, not ours */
        return 1;
    }
    key.job = id;
    pthread_mutex_lock(&e->mu);
    w = e->nwaits ? bsearch(&key, e->waits, e->nwaits, sizeof(kd_wait), wait_cmp) : NULL;
    if (w) {
        *position = w->position;
        snprintf(reason, n, "%s", w->reason);
        found = 1;
    }
    pthread_mutex_unlock(&e->mu);
    return found;
}

static int position_cmp(const void *a, const void *b)
{
    return ((const kd_wait *)a)->position - ((const kd_wait *)b)->position;
}

kd_wait *kd_engine_queue(kd_engine *e, size_t *n)
{
    kd_wait *copy, *ext = NULL;
    size_t next = 0;
    if (e->ext)
        ext = e->ext->waiting(e, &next);
    pthread_mutex_lock(&e->mu);
    *n = e->nwaits;
    copy = malloc((e->nwaits + next + 1) * sizeof(*copy));
    if (copy && e->nwaits)
        memcpy(copy, e->waits, e->nwaits * sizeof(*copy));
    pthread_mutex_unlock(&e->mu);
    if (copy == NULL) {
        free(ext);
        *n = 0;
        return NULL;
    }
    if (*n > 1)
        qsort(copy, *n, sizeof(*copy), position_cmp);
    if (next)   /* after ours: jobs waiting in an external cluster's queue */
        memcpy(copy + *n, ext, next * sizeof(*copy));
    *n += next;
    free(ext);
    return copy;
}

/* SIGKILL runs whose grace period is over (engine lock held); returns 1 while any run is terminating. */
static int enforce_deadlines(kd_engine *e)
{
    int64_t now = kestrel__now_ms();
    int pending = 0;
    for (kd_run *r = e->runs; r; r = r->next) {
        if (r->term == KD_TERM_NONE)
            continue;
        pending = 1;
        if (r->kill_at_ms && now >= r->kill_at_ms) {
            e->exec->signal(e, r, SIGKILL);
            r->kill_at_ms = 0;
        }
    }
    return pending;
}

/* The repository collector's own thread: once every grace period (at least a minute), collect
 * chunks no version names any more. A walk of a large store never delays a scheduling pass. */
static void *gc_main(void *arg)
{
    kd_engine *e = arg;
    int64_t period_ms = (int64_t)(e->cfg->repo_gc_grace_s > 60 ? e->cfg->repo_gc_grace_s : 60) * 1000;
    struct timespec ts;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        kestrel__store_gc_stats st;
        deadline_ts(&ts, kestrel__now_ms() + period_ms);
        while (!e->stopping && pthread_cond_timedwait(&e->gc_cv, &e->mu, &ts) != ETIMEDOUT)
            ;
        if (e->stopping)
            break;
        pthread_mutex_unlock(&e->mu);
        if (kestrel__store_gc(e->store, e->cfg->repo_gc_grace_s, &st) < 0)
            fprintf(stderr, "kestreld: repository collection: %s\n", kestrel_error_last()->message);
        else if (st.chunks_removed || st.temps_removed)
            fprintf(stderr, "kestreld: repository collection freed %lld bytes (%lld chunks, %lld temp files)\n",
                    (long long)st.bytes_freed, (long long)st.chunks_removed, (long long)st.temps_removed);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void *sched_main(void *arg)
{
    kd_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stopping) {
        int terminating = enforce_deadlines(e);
        if (!e->sched_pending) {
            struct timespec ts;
            pthread_mutex_unlock(&e->mu);
            kd_engine_refresh_gpus(e, 10000);   /* live memory and utilisation of real GPUs */
            pthread_mutex_lock(&e->mu);
            deadline_ts(&ts, kestrel__now_ms() + (terminating ? 100 : 1000));
            pthread_cond_timedwait(&e->sched_cv, &e->mu, &ts);
            continue;
        }
        e->sched_pending = 0;
        e->in_pass = 1;
        pthread_mutex_unlock(&e->mu);
        {
            /* Rest as long as the pass took before the next one: under a burst of submissions the
             * passes coalesce and the scheduler keeps at most half a core; idle, nothing waits. */
            struct timespec t0, t1, rest;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            kd_engine_schedule(e);
            pthread_mutex_lock(&e->mu);
            e->in_pass = 0;
            pthread_mutex_unlock(&e->mu);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            rest.tv_sec = t1.tv_sec - t0.tv_sec;
            rest.tv_nsec = t1.tv_nsec - t0.tv_nsec;
            if (rest.tv_nsec < 0) {
                rest.tv_sec--;
                rest.tv_nsec += 1000000000L;
            }
            if (rest.tv_sec > 0)
                rest = (struct timespec){ 1, 0 };
            nanosleep(&rest, NULL);
        }
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Every committed state change, whoever made it (scheduler, executors, API), counted once. */
static void on_transition(void *ctx, const kd_transition_seen *t)
{
    kd_engine *e = ctx;
    /* a run's log policies start afresh (lines an environment build printed while QUEUED do not
     * count), and a final state ends them whichever way it came (a Slurm job, a cancel) */
    if (t->to == KESTREL_JOB_STATE_RUNNING || kestrel_job_state_is_final(t->to))
        kd_policies_run_end(e, t->id, NULL, 0);
    if (t->to == KESTREL_JOB_STATE_RUNNING) {
        kd_metrics_started(e->metrics, t->priority, (double)(t->now_ms - t->queued_ms) / 1000.0,
                           t->restart_count ? -1.0 : (double)(t->now_ms - t->submit_ms) / 1000.0);
    } else if (t->to == KESTREL_JOB_STATE_PREEMPTED) {
        const char *why = t->reason ? t->reason : "";
        kd_metrics_preempted(e->metrics, t->priority, strstr(why, "Slurm") ? KD_PREEMPT_CLUSTER
                             : strstr(why, "reservation") ? KD_PREEMPT_RESERVATION : KD_PREEMPT_PRIORITY);
    } else {
        kd_metrics_ended(e->metrics, t->priority, t->to);
    }
}

int kd_engine_init(kd_engine *e, const kd_config *cfg, kd_catalog *cat, const kd_executor *exec)
{
    memset(e, 0, sizeof(*e));
    e->cfg = cfg;
    e->cat = cat;
    e->exec = exec;
    if (kd_metrics_new(&e->metrics) < 0)
        return KESTREL_ENOMEM;
    kd_catalog_on_transition(cat, on_transition, e);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->changed, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);   /* CLOCK_REALTIME: deadlines are Unix ms */
        pthread_cond_init(&e->sched_cv, &ca);
        pthread_cond_init(&e->gc_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    return 0;
}

void kd_engine_set_external(kd_engine *e, const kd_executor *ext)
{
    e->ext = e->cfg->nslurm_pools ? ext : NULL;
}

void kd_engine_job_dir(const kd_engine *e, int64_t id, const char *sub, char *buf, size_t n)
{
    snprintf(buf, n, "%s/jobs/%lld%s%s", e->cfg->data_dir, (long long)id, sub ? "/" : "", sub ? sub : "");
}

int kd_engine_pool_external(const kd_engine *e, const char *pool)
{
    if (e->ext == NULL)
        return 0;
    for (size_t i = 0; i < e->cfg->nslurm_pools; i++)
        if (!strcmp(e->cfg->slurm_pools[i], pool))
            return 1;
    return 0;
}

int kd_engine_recover(kd_engine *e)
{
    kd_job_row *rows;
    size_t n;
    int rc = kd_catalog_jobs_in_state(e->cat, KESTREL_JOB_STATE_RUNNING, SIZE_MAX / 2, &rows, &n);
    if (rc < 0)
        return rc;
    kd_cgroup_start(e->cfg->data_dir);   /* and what the jobs of a daemon before left in their cgroups */
    for (size_t i = 0; i < n; i++)
        kd_catalog_token_drop_job(e->cat, rows[i].id);   /* before the runs are seen to end */
    /* what the runs left outlived their daemon: their output went nowhere, stop them (before the
     * jobs are queued again: a run must never meet its own rerun) */
    kd_exec_reap(e->cfg->data_dir, rows, n);
    for (size_t i = 0; i < n; i++) {
        const kd_job_row *r = &rows[i];
        kd_transition t = { kestrel__now_ms(), NULL, 0, 0, NULL, 0 };
        char by[160], why[240];
        if (cancel_asked(e, r->id, by, sizeof(by))) {   /* a cancel always wins, across a crash too */
            snprintf(why, sizeof(why), "cancelled by %s (asked before kestreld stopped)", by);
            t.reason = why;
            rc = kd_catalog_job_transition(e->cat, r->id, KESTREL_JOB_STATE_RUNNING, KESTREL_JOB_STATE_CANCELLED, &t);
        } else if (r->no_retry) {
            t.reason = "daemon restarted";
            rc = kd_catalog_job_transition(e->cat, r->id, KESTREL_JOB_STATE_RUNNING, KESTREL_JOB_STATE_FAILED, &t);
        } else {
            t.reason = "requeued: daemon restarted and the process was lost";
            t.bump_restart = 1;
            rc = kd_catalog_job_transition(e->cat, r->id, KESTREL_JOB_STATE_RUNNING, KESTREL_JOB_STATE_QUEUED, &t);
        }
        if (rc < 0)
            break;
        fprintf(stderr, "kestreld: job %lld: %s\n", (long long)r->id, t.reason);
    }
    free(rows);
    return rc < 0 ? rc : 0;
}

int kd_engine_start(kd_engine *e)
{
    kd_engine_refresh_gpus(e, 0);
    if (kd_policies_init(e) < 0 || kd_alerts_start(e) < 0 || kd_indexer_start(e) < 0 ||
        (e->ext && e->ext->open(e) < 0))
        goto fail;
    if (kd_telemetry_start(e) < 0)
        fprintf(stderr, "kestreld: %s: no per-job GPU telemetry\n", kestrel_error_last()->message);
    if (kd_job_disk_start(e) < 0)
        fprintf(stderr, "kestreld: %s: jobs' files are not measured\n", kestrel_error_last()->message);
    e->sched_pending = 1;
    if (pthread_create(&e->sched_thread, NULL, sched_main, e) != 0) {
        kestrel__error_set(KESTREL_ERROR, "cannot start the scheduler thread");
        kd_telemetry_stop(e);
        kd_job_disk_stop(e);
        if (e->ext)
            e->ext->close(e);
        goto fail;
    }
    if (e->store)
        e->gc_running = pthread_create(&e->gc_thread, NULL, gc_main, e) == 0;
    if (e->store && !e->gc_running)
        fprintf(stderr, "kestreld: no repository collector thread; collect with POST /api/v1/repo/gc\n");
    return 0;
fail:   /* nothing runs on a catalog the caller is about to close */
    kd_indexer_stop(e);
    kd_alerts_stop(e);
    return KESTREL_ERROR;
}

void kd_engine_quiesce(kd_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_broadcast(&e->sched_cv);
    pthread_cond_broadcast(&e->gc_cv);
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->mu);
}

void kd_engine_stop(kd_engine *e)
{
    struct timespec ts;
    kd_engine_quiesce(e);
    kd_telemetry_stop(e);
    kd_job_disk_stop(e);
    pthread_join(e->sched_thread, NULL);
    if (e->gc_running)
        pthread_join(e->gc_thread, NULL);
    if (e->ext)
        e->ext->close(e);   /* its jobs keep running in the cluster; the next start follows them again */

    pthread_mutex_lock(&e->mu);
    for (kd_run *r = e->runs; r; r = r->next)
        kd_engine_terminate_locked(e, r, KD_TERM_SHUTDOWN, "daemon");
    while (e->runs) {
        enforce_deadlines(e);
        deadline_ts(&ts, kestrel__now_ms() + 100);
        pthread_cond_timedwait(&e->changed, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
    kd_cgroup_stop();
    kd_alerts_stop(e);   /* what is not delivered yet goes out after the next start */
    kd_indexer_stop(e);
}

void kd_engine_fini(kd_engine *e)
{
    free(e->waits);
    kd_alerts_free(e);
    kd_policies_free(e);
    kd_metrics_free(e->metrics);
    kestrel_gpu_list_free(e->gpus);
    pthread_cond_destroy(&e->changed);
    pthread_cond_destroy(&e->sched_cv);
    pthread_cond_destroy(&e->gc_cv);
    pthread_mutex_destroy(&e->mu);
}

const char *kd_store_root(const kd_engine *e)
{
    static _Thread_local char root[4200];
    snprintf(root, sizeof(root), "%s/repo", e->cfg->data_dir);
    return root;
}
