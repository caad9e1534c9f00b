/* server/exec_slurm.c - the Slurm executor: pools whose jobs a Slurm cluster places and preempts.
 * kestreld hands each queued job over (slurm_submit.c), then one follower thread reads Slurm's view
 * of all of them every poll (`squeue --json`, `sacct` for jobs Slurm has forgotten), records
 * what changed in the catalog (RUNNING, PREEMPTED then QUEUED, the end with its exit code), and
 * copies the jobs' output files (on the shared data dir) into the catalog as they grow. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include "exec_util.h"
#include "slurm.h"

#define LOG_CHUNK 65536

static kd_slurm *state(kd_engine *e) { return e->ext_state; }

/* scancel one Slurm job: 0, or an error with scancel's words. */
static int scancel(const char *sid)
{
    char *argv[] = { "scancel", (char *)sid, NULL };
    kestrel_buf out = KESTREL_BUF_INIT;
    int rc = kd_exec_run(argv, NULL, &out, NULL) == 0 ? 0
             : kestrel__error_set(KESTREL_ERROR, "scancel %s: %s", sid, out.ptr ? out.ptr : "failed");
    kestrel_buf_dispose(&out);
    return rc;
}

static kd_sjob *find(kd_slurm *s, int64_t id)
{
    for (kd_sjob *j = s->jobs; j; j = j->next)
        if (j->id == id)
            return j;
    return NULL;
}

static void drop(kd_slurm *s, kd_sjob *gone)
{
    for (kd_sjob **pp = &s->jobs; *pp; pp = &(*pp)->next) {
        if (*pp == gone) {
            *pp = gone->next;
            free(gone);
            return;
        }
    }
}

static void wake(kd_slurm *s)
{
    s->wake = 1;
    pthread_cond_signal(&s->cv);
}

static void slurm_hand_over(kd_engine *e, int64_t id)
{
    kd_slurm *s = state(e);
    pthread_mutex_lock(&s->mu);
    if (find(s, id) == NULL) {
        kd_sjob *j = calloc(1, sizeof(*j));
        if (j) {
            j->id = id;
            j->kstate = KESTREL_JOB_STATE_QUEUED;
            j->restarts = -1;
            snprintf(j->reason, sizeof(j->reason), "being handed to Slurm");
            j->next = s->jobs;
            s->jobs = j;
            wake(s);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

static int slurm_cancel(kd_engine *e, int64_t id, const char *by)
{
    kd_slurm *s = state(e);
    char sid[32] = "", reason[200];
    int kstate = 0, was;   /* was: cancelled already (by whom it says) */
    kd_sjob *j;
    pthread_mutex_lock(&s->mu);
    if ((j = find(s, id)) == NULL) {
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    was = j->cancelled;
    j->cancelled = 1;
    j->cancels_trying++;
    if (!was)
        snprintf(j->cancelled_by, sizeof(j->cancelled_by), "%s", by);
    snprintf(sid, sizeof(sid), "%s", j->slurm_id);
    kstate = j->kstate;
    pthread_mutex_unlock(&s->mu);
    if (sid[0]) {
        int rc = scancel(sid);
        pthread_mutex_lock(&s->mu);
        if ((j = find(s, id)) != NULL) {
            j->cancels_trying--;
            j->cancel_sent |= rc == 0;
            /* none sent, and none still trying: an end Slurm records later is not this user's cancel (a
             * hostile test); one cancel that failed never undoes another's that worked (a review) */
            if (rc < 0 && !j->cancel_sent && !j->cancels_trying) {
                j->cancelled = 0;
                j->cancelled_by[0] = '\0';
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (rc < 0)
            return rc;
    } else {
        pthread_mutex_lock(&s->mu);
        if ((j = find(s, id)) != NULL)
            j->cancels_trying--;
        pthread_mutex_unlock(&s->mu);
    }
    if (kstate == KESTREL_JOB_STATE_QUEUED) {
        /* nothing runs: the job ends now (a running one ends when Slurm has stopped it) */
        kd_transition t = { kestrel__now_ms(), reason, 0, 0, NULL, 0, NULL };
        snprintf(reason, sizeof(reason), "cancelled by %s", by);
        kd_catalog_token_drop_job(e->cat, id);   /* dead before anyone can see the job ended */
        kd_catalog_job_transition(e->cat, id, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_CANCELLED, &t);
        kd_engine_changed(e);
    }
    pthread_mutex_lock(&s->mu);
    wake(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int wait_by_id(const void *a, const void *b)
{
    int64_t x = ((const kd_wait *)a)->job, y = ((const kd_wait *)b)->job;
    return (x > y) - (x < y);
}

/* Why a queued job waits, in Slurm's words (s->mu held). */
static void why_waiting(const kd_sjob *j, char *reason, size_t n)
{
    if (!j->slurm_id[0])
        snprintf(reason, n, "%s", j->reason);
    else if (!strcmp(j->sstate, "CONFIGURING"))
        snprintf(reason, n, "Slurm job %s: node %s is powering up", j->slurm_id, j->node);
    else
        snprintf(reason, n, "Slurm job %s is %s%s%s", j->slurm_id, j->sstate[0] ? j->sstate : "PENDING",
                 j->reason[0] ? ": " : "", j->reason);
}

static int slurm_explain(kd_engine *e, int64_t id, char *reason, size_t n)
{
    kd_slurm *s = state(e);
    kd_sjob *j;
    int found = 0;
    pthread_mutex_lock(&s->mu);
    if ((j = find(s, id)) != NULL && j->kstate == KESTREL_JOB_STATE_QUEUED) {
        found = 1;
        why_waiting(j, reason, n);
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

static int slurm_set_priority(kd_engine *e, int64_t id, int priority)
{
    kd_slurm *s = state(e);
    char sid[32] = "", qos[96];
    kd_sjob *j;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if ((j = find(s, id)) == NULL) {
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    snprintf(sid, sizeof(sid), "%s", j->slurm_id);
    pthread_mutex_unlock(&s->mu);
    if (sid[0]) {   /* a pending Slurm job takes a new QOS; one not submitted yet reads it at submission */
        char job[64];
        char *argv[] = { "scontrol", "update", job, qos, NULL };
        kestrel_buf out = KESTREL_BUF_INIT;
        snprintf(job, sizeof(job), "JobId=%s", sid);
        snprintf(qos, sizeof(qos), "QOS=%s", kd_slurm_qos(e, priority));
        if (kd_exec_run(argv, NULL, &out, NULL) != 0)
            rc = kestrel__error_set(KESTREL_EEXISTS, "Slurm refused the new class of job %s: %.200s", sid,
                                    out.ptr ? out.ptr : "no output");
        kestrel_buf_dispose(&out);
    }
    if (rc == 0) {
        pthread_mutex_lock(&s->mu);
        if ((j = find(s, id)) != NULL)
            j->priority = priority;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

static kd_wait *slurm_waiting(kd_engine *e, size_t *n)
{
    kd_slurm *s = state(e);
    kd_wait *w = NULL;
    size_t k = 0, total = 0;
    pthread_mutex_lock(&s->mu);
    for (kd_sjob *j = s->jobs; j; j = j->next)
        total += j->kstate == KESTREL_JOB_STATE_QUEUED;
    if (total && (w = calloc(total, sizeof(*w))) != NULL) {
        for (kd_sjob *j = s->jobs; j; j = j->next) {
            if (j->kstate != KESTREL_JOB_STATE_QUEUED)
                continue;
            w[k].job = j->id;
            why_waiting(j, w[k].reason, sizeof(w[k].reason));   /* the same words as explain */
            k++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (k > 1)
        qsort(w, k, sizeof(*w), wait_by_id);
    *n = k;
    return w;
}

/* A gang's line as srun --label wrote it ("  1: text") as the local executor's ("[rank 1] text"),
 * in a copy (*owned; freed by the caller). Other lines are left as they are. */
static void relabel(kd_log_line *l, char **owned)
{
    size_t i = 0, d;
    char *copy;
    *owned = NULL;
    while (i < l->len && l->text[i] == ' ')
        i++;
    for (d = i; d < l->len && d - i < 3 && l->text[d] >= '0' && l->text[d] <= '9'; d++)
        ;
    if (d == i || d + 1 >= l->len || l->text[d] != ':' || l->text[d + 1] != ' ')
        return;
    if ((copy = malloc(l->len + 16)) == NULL)
        return;
    l->len = (size_t)snprintf(copy, l->len + 16, "[rank %.*s] %.*s", (int)(d - i), l->text + i,
                              (int)(l->len - d - 2), l->text + d + 2);
    l->text = copy;
    *owned = copy;
}

/* Log lines[0..n) (a gang's relabelled) and free the copies; they were read from the file of their
 * stream up to offset off, kept with them for a restart (the lines' length is not the file's: a
 * secret masked, a rank relabelled, a hole skipped, lines dropped past --max-log-bytes). */
static void log_lines(kd_engine *e, int64_t id, int gang, kd_log_line *lines, size_t n, int64_t off)
{
    char *owned[256] = { NULL };
    for (size_t i = 0; gang && i < n && i < 256; i++)
        relabel(&lines[i], &owned[i]);
    kd_engine_log_from(e, id, lines, n, lines[0].stream, off);
    for (size_t i = 0; gang && i < n && i < 256; i++)
        free(owned[i]);
}

/* What one poll reads of a running job's output file, at most: the rest waits for the next poll, so
 * that one job's output does not hold the follower (every other job's state and output, and the
 * submissions) for minutes. */
#define LOG_POLL_BYTES (8 * LOG_CHUNK * 16)
/* And lines: each one is a row of the catalog, and short ones cost it more than their bytes (a hostile
 * test: `yes ""` held the follower, every other user's job with it, for minutes). At the job's end,
 * LOG_FINAL_LINES: what is past them is left unread, and its log says so. */
#define LOG_POLL_LINES 16384
#define LOG_FINAL_LINES (16 * LOG_POLL_LINES)

/* The job owns its output file: a hole (a sparse 8 GiB file, one truncate) is no output and is
 * skipped, not read as zeros (a hostile test: 3 minutes of the follower, 259 MB of catalog); and
 * before the last max_log bytes, which is all the catalog keeps of a log, nothing is read. *off moved
 * past both; the bytes of data from there before the next hole (at most want), returned. */
static size_t data_ahead(int fd, int64_t *off, int64_t max_log, size_t want)
{
    struct stat st;
    off_t data, hole;
    if (fstat(fd, &st) < 0)
        return want;
    if (max_log > 0 && (int64_t)st.st_size - *off > max_log)
        *off = (int64_t)st.st_size - max_log;
    if ((data = lseek(fd, (off_t)*off, SEEK_DATA)) < 0)
        *off = errno == ENXIO ? (int64_t)st.st_size : *off;   /* ENXIO: holes to the end */
    else if (data > (off_t)*off)
        *off = (int64_t)data;
    hole = lseek(fd, (off_t)*off, SEEK_HOLE);
    return hole > (off_t)*off && (uint64_t)(hole - (off_t)*off) < want ? (size_t)(hole - (off_t)*off) : want;
}

/* Copy what the job's output files gained since the last call into the catalog; at the end the
 * last line without a newline too (and at most LOG_POLL_BYTES a file before it). */
static void pump_logs(kd_engine *e, kd_sjob *j, int final)
{
    static const char *const names[2] = { "slurm.out", "slurm.err" };
    Kestrel__V1__Job *job = NULL;   /* loaded once there is output: its secret values are masked */
    for (int k = 0; k < 2; k++) {
        char path[PATH_MAX], *buf;
        int fd, lines_left;
        ssize_t r;
        kd_engine_job_dir(e, j->id, names[k], path, sizeof(path));
        /* the job's identity owns the folder: never follow a link it put there, nor read a non-file */
        if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)) < 0)
            continue;
        {
            struct stat st;
            if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
                close(fd);
                continue;
            }
        }
        if ((buf = malloc(LOG_CHUNK + 1)) == NULL) {
            close(fd);
            continue;
        }
        lines_left = final ? LOG_FINAL_LINES : LOG_POLL_LINES;
        for (int64_t budget = final ? INT64_MAX : LOG_POLL_BYTES; budget > 0 && lines_left; budget -= r) {
            kd_log_line lines[256];
            size_t nl = 0, start = 0, len, want = data_ahead(fd, &j->off[k], e->cfg->max_log_bytes, LOG_CHUNK);
            int64_t now = kestrel__now_ms();
            if ((r = pread(fd, buf, want, j->off[k])) <= 0)
                break;
            len = (size_t)r;
            if (job == NULL && kd_catalog_job_load(e->cat, j->id, 0, &job, NULL) < 0)
                job = NULL;
            for (size_t i = 0; i < len; i++) {
                size_t l = i - start;
                if (buf[i] != '\n')
                    continue;
                if (job)
                    kd_exec_mask(job->spec, buf + start, &l);
                kd_exec_sanitize(buf + start, l);
                lines[nl++] = (kd_log_line){ now, k ? KESTREL_LOG_STDERR : KESTREL_LOG_STDOUT, buf + start, l };
                start = i + 1;
                if (nl == KESTREL__ARRAY_SIZE(lines)) {
                    log_lines(e, j->id, job && job->spec->replicas > 1, lines, nl, j->off[k] + (int64_t)start);
                    nl = 0;
                }
                if (--lines_left == 0)
                    break;
            }
            if (start == 0 && (len == LOG_CHUNK || final)) {   /* an over-long line, or the last one */
                size_t l = len < LOG_CHUNK || !job ? len : kd_exec_mask_cut(job->spec, buf, len);   /* no secret split */
                start = l;
                if (job)
                    kd_exec_mask(job->spec, buf, &l);
                kd_exec_sanitize(buf, l);
                lines[nl++] = (kd_log_line){ now, k ? KESTREL_LOG_STDERR : KESTREL_LOG_STDOUT, buf, l };
            }
            if (nl)
                log_lines(e, j->id, job && job->spec->replicas > 1, lines, nl, j->off[k] + (int64_t)start);
            j->off[k] += (int64_t)start;
            if (start == 0 || (len < want && lines_left))   /* a line not yet whole, or the end (a run cut by a
                                                             * hole goes on) */
                break;
        }
        if (final && !lines_left && pread(fd, buf, 1, j->off[k]) > 0)
            kd_exec_log(e, j->id, "%s past %d lines at the job's end left unread (kestreld reads so many at most)",
                        names[k], LOG_FINAL_LINES);
        free(buf);
        close(fd);
    }
    if (job)
        protobuf_c_message_free_unpacked(&job->base, NULL);
}

/* The job Slurm preempted this one for: one of ours of a higher class, started on the victim's node
 * or still waiting (for the victim to leave); the newest such job. 0 when none. */
static int64_t preemptor(kd_slurm *s, const kd_sjob *victim)
{
    int64_t best = 0;
    int best_score = 0;
    for (kd_sjob *j = s->jobs; j; j = j->next) {
        int score;
        if (j == victim || j->priority <= victim->priority || !j->slurm_id[0])
            continue;
        score = !strcmp(j->node, victim->node) ? 2 : j->kstate == KESTREL_JOB_STATE_QUEUED ? 1 : 0;
        if (score > best_score || (score == best_score && score && j->id > best)) {
            best = j->id;
            best_score = score;
        }
    }
    return best;
}

/* How the run before a requeue ended, from Slurm's accounting of every run of the job (sacct -D):
 * NODE_FAIL, PREEMPTED, REQUEUED... Accounting is written asynchronously: a few short tries. */
static void previous_run(const char *sid, char *state, size_t n)
{
    char *argv[] = { "sacct", "-D", "-X", "-n", "-P", "-j", (char *)sid, "-o", "JobID,State,ExitCode,NodeList", NULL };
    state[0] = '\0';
    for (int tries = 0; tries < 4 && !state[0]; tries++) {
        kestrel_buf out = KESTREL_BUF_INIT;
        if (tries) {
            struct timespec ts = { 0, 250000000L };
            nanosleep(&ts, NULL);
        }
        if (kd_exec_run(argv, NULL, &out, NULL) == 0 && out.ptr) {
            for (char *line = out.ptr, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                kd_sview v;
                nl = strchr(line, '\n');
                if (nl)
                    *nl = '\0';
                if (kd_slurm_parse_sacct(line, &v) == 0 && !kd_slurm_state_running(v.state) &&
                    strcmp(v.state, "PENDING"))
                    snprintf(state, n, "%s", v.state);   /* the last ended run */
            }
        }
        kestrel_buf_dispose(&out);
    }
}

/* Record what Slurm now says about j. The catalog calls happen with s->mu released. */
static int apply(kd_slurm *s, kd_sjob *j, const kd_sview *v)
{
    kd_engine *e = s->e;
    char reason[400];
    kd_transition t = { kestrel__now_ms(), reason, 0, 0, NULL, 0, NULL };
    int final = kd_slurm_state_final(v->state);
    int what = kd_slurm_follow(&j->kstate, &j->restarts, &j->ending, v);
    int requeued = what == KD_SLURM_REQUEUED, started = what == KD_SLURM_STARTED;
    int64_t by = 0;
    kd_sjob snap;
    char why[64];

    snprintf(j->sstate, sizeof(j->sstate), "%s", v->state);
    snprintf(j->reason, sizeof(j->reason), "%s", v->reason);
    if (v->node[0])
        snprintf(j->node, sizeof(j->node), "%s", v->node);
    if (requeued)
        by = preemptor(s, j);
    snap = *j;
    pthread_mutex_unlock(&s->mu);

    if (requeued) {
        pump_logs(e, &snap, 0);
        if (by)
            snprintf(reason, sizeof(reason), "preempted by job %lld through Slurm (job %s requeued on %s)",
                     (long long)by, snap.slurm_id, snap.node);
        else {
            previous_run(snap.slurm_id, why, sizeof(why));
            if (!strcmp(why, "NODE_FAIL"))
                snprintf(reason, sizeof(reason), "requeued by Slurm after node %s failed (job %s)", snap.node,
                         snap.slurm_id);
            else if (!strcmp(why, "PREEMPTED"))
                snprintf(reason, sizeof(reason), "preempted through Slurm (job %s requeued on %s)", snap.slurm_id,
                         snap.node);
            else
                snprintf(reason, sizeof(reason), "requeued by Slurm%s%s (job %s on %s)", why[0] ? ": " : "", why,
                         snap.slurm_id, snap.node);
        }
        kd_catalog_job_transition(e->cat, j->id, KESTREL_JOB_STATE_RUNNING, KESTREL_JOB_STATE_PREEMPTED, &t);
        if (by) {
            char note[200];
            snprintf(note, sizeof(note), "preempting job %lld on node %s (Slurm)", (long long)j->id, snap.node);
            kd_catalog_job_note(e->cat, by, t.now_ms, note);
        }
        snprintf(reason, sizeof(reason), "requeued by Slurm, keeps its submit time");
        t.bump_restart = 1;
        kd_catalog_job_transition(e->cat, j->id, KESTREL_JOB_STATE_PREEMPTED, KESTREL_JOB_STATE_QUEUED, &t);
        kd_engine_changed(e);
    } else if (started) {
        t.node = snap.node;
        t.devices = "";
        if (snap.restarts > 0)   /* the count the follower kept (a run requeued unseen is started first) */
            snprintf(reason, sizeof(reason), "resumed on node %s by Slurm (job %s, run %d)", snap.node,
                     snap.slurm_id, snap.restarts + 1);
        else
            snprintf(reason, sizeof(reason), "started on node %s by Slurm (job %s)", snap.node, snap.slurm_id);
        kd_catalog_job_transition(e->cat, j->id, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_RUNNING, &t);
        kd_engine_changed(e);
    }
    if (kd_slurm_state_running(v->state) || final)
        pump_logs(e, &snap, final);
    if (!snap.dep_failed && !final && strstr(v->reason, "DependencyNeverSatisfied")) {
        /* Slurm would keep it pending forever; Kestrel fails a job whose after_ok dependency failed */
        scancel(snap.slurm_id);
        snap.dep_failed = 1;
    }
    pthread_mutex_lock(&s->mu);
    memcpy(j->off, snap.off, sizeof(j->off));
    j->dep_failed |= snap.dep_failed;
    if (!final)
        return 0;

    pthread_mutex_unlock(&s->mu);
    kd_catalog_token_drop_job(e->cat, j->id);   /* dead before anyone can see the job ended */
    t.set_exit = 1;
    t.exit_code = v->exit_signal ? 128 + v->exit_signal : v->exit_code;
    if (!strcmp(v->state, "COMPLETED")) {
        snprintf(reason, sizeof(reason), "exit code 0 (Slurm job %s)", snap.slurm_id);
        t.exit_code = 0;
        kd_catalog_job_transition(e->cat, j->id, -1, KESTREL_JOB_STATE_SUCCEEDED, &t);
    } else if (!strcmp(v->state, "CANCELLED") && snap.dep_failed) {
        snprintf(reason, sizeof(reason), "a dependency did not succeed (Slurm job %s: DependencyNeverSatisfied)",
                 snap.slurm_id);
        kd_catalog_job_transition(e->cat, j->id, -1, KESTREL_JOB_STATE_FAILED, &t);
    } else if (!strcmp(v->state, "CANCELLED")) {
        if (snap.cancelled)
            snprintf(reason, sizeof(reason), "cancelled by %s", snap.cancelled_by);
        else
            snprintf(reason, sizeof(reason), "cancelled in Slurm (job %s)", snap.slurm_id);
        kd_catalog_job_transition(e->cat, j->id, -1, KESTREL_JOB_STATE_CANCELLED, &t);
    } else {
        if (!strcmp(v->state, "FAILED") && v->exit_signal)
            snprintf(reason, sizeof(reason), "killed by signal %d (%s) (Slurm job %s)", v->exit_signal,
                     strsignal(v->exit_signal), snap.slurm_id);
        else if (!strcmp(v->state, "FAILED"))
            snprintf(reason, sizeof(reason), "exit code %d (Slurm job %s)", v->exit_code, snap.slurm_id);
        else if (!strcmp(v->state, "NODE_FAIL"))
            snprintf(reason, sizeof(reason), "node %s failed (Slurm job %s)", snap.node, snap.slurm_id);
        else if (!strcmp(v->state, "TIMEOUT"))
            snprintf(reason, sizeof(reason), "Slurm's time limit (job %s)", snap.slurm_id);
        else
            snprintf(reason, sizeof(reason), "Slurm ended job %s: %s%s%s", snap.slurm_id, v->state,
                     v->reason[0] ? ", " : "", v->reason);
        kd_catalog_job_transition(e->cat, j->id, -1, KESTREL_JOB_STATE_FAILED, &t);
    }
    kd_engine_changed(e);
    kd_engine_kick(e);   /* dependents in local pools */
    pthread_mutex_lock(&s->mu);
    return 1;
}

/* Submit what was handed over and is not submitted yet. Called with s->mu held; drops it per job. */
static int id_order(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Submit what was handed over and is not submitted yet, oldest first (Slurm orders a class by
 * submission). Called with s->mu held; drops it per job. */
static void submit_pending(kd_slurm *s)
{
    int64_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (kd_sjob *j = s->jobs, *next; j; j = next) {
        next = j->next;
        if (j->cancelled && !j->slurm_id[0])
            drop(s, j);   /* cancelled before it reached Slurm */
        else if (!j->slurm_id[0] && kestrel__array_grow(&ids, &cap, n + 1, sizeof(*ids)) == 0)
            ids[n++] = j->id;
    }
    if (n > 1)
        qsort(ids, n, sizeof(*ids), id_order);
    for (size_t i = 0; i < n && !s->stop; i++) {
        char why[600] = "";
        kd_sjob copy, *j = find(s, ids[i]);
        int rc;
        if (j == NULL || j->slurm_id[0] || j->cancelled)
            continue;
        copy = *j;
        pthread_mutex_unlock(&s->mu);
        rc = kd_slurm_submit(s, &copy, why, sizeof(why));
        if (rc == 0 && kd_catalog_job_set_ext(s->e->cat, copy.id, copy.slurm_id) != 0) {
            /* cancelled while sbatch ran */
            scancel(copy.slurm_id);
            rc = -3;
        } else if (rc == -1) {
            kd_transition t = { kestrel__now_ms(), why, 0, 0, NULL, 0, NULL };
            kd_catalog_job_transition(s->e->cat, copy.id, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_FAILED, &t);
            kd_engine_changed(s->e);
        }
        pthread_mutex_lock(&s->mu);
        if ((j = find(s, ids[i])) == NULL)   /* only this thread drops jobs: still there */
            continue;
        j->priority = copy.priority;
        if (rc == 0) {
            snprintf(j->slurm_id, sizeof(j->slurm_id), "%s", copy.slurm_id);
            snprintf(j->sstate, sizeof(j->sstate), "PENDING");
            j->reason[0] = '\0';
            j->restarts = 0;
        } else if (rc == 1 || rc == -2) {
            snprintf(j->reason, sizeof(j->reason), "%s", rc == 1 ? copy.reason : why);
            if (rc == 1 && why[0])
                snprintf(j->reason, sizeof(j->reason), "%s", why);
        } else {
            drop(s, j);
        }
    }
    free(ids);
}

/* Slurm no longer lists a job (past MinJobAge, or a cluster restarted without state): ask sacct. */
static int from_sacct(const char *sid, kd_sview *v)
{
    char *argv[] = { "sacct", "-X", "-n", "-P", "-j", (char *)sid, "-o", "JobID,State,ExitCode,NodeList", NULL };
    kestrel_buf out = KESTREL_BUF_INIT;
    int rc = kd_exec_run(argv, NULL, &out, NULL);
    rc = rc == 0 && out.ptr && kd_slurm_parse_sacct(out.ptr, v) == 0 ? 0 : -1;
    kestrel_buf_dispose(&out);
    return rc;
}

/* One poll: Slurm's view of every submitted job, applied. Called with s->mu held. */
static void poll_slurm(kd_slurm *s)
{
    char *json[] = { "squeue", "--json", "--states=all", NULL }, *text[] = { "scontrol", "show", "job", "-o", NULL };
    kd_exec_as whole = { .whole_up_to = 256u << 20 };   /* a document: read whole (1,000s of jobs: MiBs) */
    kestrel_buf out = KESTREL_BUF_INIT;
    kd_sview *v = NULL;
    size_t nv = 0;
    int any = 0, rc, no_json;
    for (kd_sjob *j = s->jobs; j && !any; j = j->next)
        any = j->slurm_id[0] != '\0';
    if (!any)
        return;
    no_json = s->no_json;
    pthread_mutex_unlock(&s->mu);
    if (!no_json) {
        rc = kd_exec_run(json, NULL, &out, &whole);
        if (rc == 0 && kd_slurm_parse_squeue_json(out.ptr ? out.ptr : "", &v, &nv) < 0)
            rc = -1;   /* a poll that failed, not a Slurm without JSON: tried again */
        else if (rc != 0 && out.ptr && !strchr(out.ptr, '{') &&
                 (strstr(out.ptr, "unrecognized option") || strstr(out.ptr, "serializer"))) {
            /* a Slurm without JSON (too old, or its serializer plugin missing): what squeue says of its
             * own options, never a job's words (a review: any "json" in the output switched), and
             * scontrol's words from then on, said once */
            fprintf(stderr, "kestreld: slurm: squeue --json: %.200s: reading `scontrol show job -o` instead, where "
                    "a job's name can forge another job's state: install Slurm's JSON serializer\n", out.ptr);
            no_json = 1;
        }
    }
    if (no_json) {
        kestrel_buf_dispose(&out);
        rc = kd_exec_run(text, NULL, &out, &whole);
        if (rc == 0 && out.ptr)
            kd_slurm_parse_scontrol(out.ptr, &v, &nv);
    }
    pthread_mutex_lock(&s->mu);
    s->no_json = no_json;
    if (rc != 0) {
        if (!s->ctl_down)
            fprintf(stderr, "kestreld: slurm: %s failed (%.200s); retrying\n", no_json ? "scontrol" : "squeue",
                    out.ptr ? out.ptr : "no output");
        s->ctl_down = 1;
        kestrel_buf_dispose(&out);
        return;
    }
    s->ctl_down = 0;
    kestrel_buf_dispose(&out);
    {
        /* views first, then apply: requeues before ends, so that a preemptor that started and ended
         * within one poll is still known when its victim's requeue is recorded */
        size_t nj = 0, k = 0;
        struct { kd_sjob *j; kd_sview v; } *todo;
        for (kd_sjob *j = s->jobs; j; j = j->next)
            nj++;
        if ((todo = calloc(nj + 1, sizeof(*todo))) == NULL) {
            free(v);
            return;
        }
        for (kd_sjob *j = s->jobs; j; j = j->next) {
            const kd_sview *x = NULL;
            if (!j->slurm_id[0])
                continue;
            for (size_t i = 0; i < nv && !x; i++)
                if (!strcmp(v[i].id, j->slurm_id))
                    x = &v[i];
            if (x == NULL) {
                char sid[32];
                if (++j->missing < 3)
                    continue;
                snprintf(sid, sizeof(sid), "%s", j->slurm_id);
                pthread_mutex_unlock(&s->mu);
                rc = from_sacct(sid, &todo[k].v);
                pthread_mutex_lock(&s->mu);
                if (rc < 0 || !kd_slurm_state_final(todo[k].v.state)) {
                    if (j->missing == 3)
                        fprintf(stderr, "kestreld: slurm: job %s is not listed by Slurm nor ended in sacct\n", sid);
                    continue;
                }
            } else {
                todo[k].v = *x;
            }
            j->missing = 0;
            todo[k++].j = j;
        }
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < k; i++)
                if (kd_slurm_state_final(todo[i].v.state) == pass && apply(s, todo[i].j, &todo[i].v))
                    drop(s, todo[i].j);
        free(todo);
    }
    free(v);
}

static void *follower(void *arg)
{
    kd_slurm *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec ts;
        int64_t at = kestrel__now_ms() + s->e->cfg->slurm_poll_ms;
        s->wake = 0;
        submit_pending(s);
        poll_slurm(s);
        ts.tv_sec = (time_t)(at / 1000);
        ts.tv_nsec = (long)(at % 1000) * 1000000L;
        while (!s->stop && !s->wake && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Byte offsets of the output already copied: as kept with the lines, or for a job of an older
 * kestreld the catalog's lines of each stream plus newlines. */
static void resume_offsets(kd_engine *e, kd_sjob *j)
{
    static const int streams[2] = { KESTREL_LOG_STDOUT, KESTREL_LOG_STDERR };
    for (int k = 0; k < 2; k++)
        if ((j->off[k] = kd_catalog_log_source(e->cat, j->id, streams[k])) < 0)
            j->off[k] = kd_catalog_log_bytes(e->cat, j->id, streams[k]);
}

static int slurm_open(kd_engine *e)
{
    kd_slurm *s = calloc(1, sizeof(*s));
    kd_ext_row *rows = NULL;
    size_t n = 0;
    pthread_condattr_t ca;
    if (s == NULL)
        return kestrel__error_oom();
    s->e = e;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_init(&ca);   /* CLOCK_REALTIME: deadlines are Unix ms */
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    e->ext_state = s;
    if (kd_slurm_write_wrapper(s) < 0 || kd_catalog_ext_jobs(e->cat, &rows, &n) < 0)
        return KESTREL_EIO;
    for (size_t i = 0; i < n; i++) {
        kd_sjob *j = calloc(1, sizeof(*j));
        if (j == NULL)
            break;
        j->id = rows[i].id;
        snprintf(j->slurm_id, sizeof(j->slurm_id), "%s", rows[i].ext_id);
        j->priority = rows[i].priority;
        j->restarts = -1;   /* Slurm's count is read on the first poll */
        j->kstate = rows[i].state == KESTREL_JOB_STATE_RUNNING ? KESTREL_JOB_STATE_RUNNING : KESTREL_JOB_STATE_QUEUED;
        if (rows[i].state == KESTREL_JOB_STATE_PREEMPTED) {   /* stopped between the two transitions */
            kd_transition t = { kestrel__now_ms(), "requeued by Slurm, keeps its submit time", 0, 0, NULL, 1, NULL };
            kd_catalog_job_transition(e->cat, j->id, KESTREL_JOB_STATE_PREEMPTED, KESTREL_JOB_STATE_QUEUED, &t);
        }
        resume_offsets(e, j);
        j->next = s->jobs;
        s->jobs = j;
    }
    if (n)
        fprintf(stderr, "kestreld: slurm: following %zu job%s already handed to Slurm\n", n, n == 1 ? "" : "s");
    free(rows);
    if (pthread_create(&s->thread, NULL, follower, s) != 0)
        return kestrel__error_set(KESTREL_ERROR, "cannot start the Slurm follower thread");
    s->running = 1;
    return 0;
}

static void slurm_close(kd_engine *e)
{
    kd_slurm *s = state(e);
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->running)
        pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->clones)   /* a clone thread still uses s */
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    while (s->jobs)
        drop(s, s->jobs);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    e->ext_state = NULL;
}

const kd_executor kd_exec_slurm = { "slurm", NULL, NULL, slurm_open, slurm_close, slurm_hand_over, slurm_cancel,
                                    slurm_explain, slurm_set_priority, slurm_waiting };
