/* server/policy.c - log policies (Determined's form: a name, a regex, actions). kestreld's own
 * (--log-policy NAME:ACTIONS=REGEX, repeatable) and the built-ins apply to every job, a job's own
 * (JobSpec.log_policies) to it. Lines are matched as they are stored; each policy acts once a run:
 * label and alert at once, the failure actions (no-retry, exclude-node, retry-larger) when the run
 * ends (engine.c decides the retry). Regexes are POSIX extended, matched in bounded time (bounded_regex.h), compiled once. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bounded_regex.h"
#include "policy.h"
#include "job_priv.h"

#define MAX_OWN 16
#define MAX_GLOBAL 64
/* The matching the own patterns of a user's running jobs may take together: a tenth of a core (100
 * us each ms), up to 2 s saved; past it a line goes unscanned by them (kestreld's own and the
 * built-ins always scan it: a job must not spend them away, a review). 16 patterns of a job's own,
 * each within its budget a line, took a whole core for 3 lines a second, a core more for each such
 * job (a hostile test); a tenth of a core a run still gave a user of ten such jobs a whole core. */
#define SCAN_NS_PER_MS 100000
#define SCAN_SAVED_NS 2000000000LL

typedef struct {
    char name[65];
    char severity[16];
    unsigned actions;
    kd_regex *re;
} policy;

/* A user's matching time (under kd_policies.mu), shared by the user's runs. Kept once made, until
 * kestreld stops (one a user, and only admins make users): freed with a user's last run, the next
 * started with 2 s saved again, and back-to-back short jobs each took that (a hostile test). */
typedef struct {
    char owner[65];
    int64_t scan_ns, scan_ms;  /* matching time left, and when it was last added to */
} budget;

/* One job's run: its own policies and what fired. Held by reference: a slow regex of one job's
 * policies holds up that job's lines only (each job has its own reader thread), never the list. */
typedef struct run_state {
    int64_t job_id;
    int refs, dead, loaded, ended;
    pthread_mutex_t mu;        /* the fields below */
    policy own[MAX_OWN];
    size_t nown;
    uint64_t fired_global;     /* bit i: global policy i matched this run */
    unsigned fired_own;
    unsigned effects;
    char why[400];
    int nan_alerted;
    budget *b;                 /* its owner's, where it has patterns of its own */
    int64_t unscanned;         /* lines left unscanned past it */
    int unscanned_said;
} run_state;

struct kd_policies {
    pthread_mutex_t mu;        /* the list of run states (the global policies never change) */
    policy global[MAX_GLOBAL];
    size_t nglobal;
    run_state **runs;
    size_t nruns, cap;
    budget **budgets;          /* of the users whose running jobs have patterns of their own */
    size_t nbudgets, bcap;
};

/* The defaults of a mature tool: CUDA/cuDNN/XLA out-of-memory messages, ECC and Xid errors of a
 * failing GPU, and a loss printed as NaN (Keras, PyTorch Lightning, plain prints). They scan every
 * line of every job, on no job's budget: none may backtrack (nan-loss's `["' ]*[=:]? *` took 0.5 s of
 * CPU on "loss" and 65,000 spaces, a hostile test; its spaces are bounded now). */
static const struct { const char *name, *actions, *severity, *pattern; } builtins[] = {
    { "cuda-oom", "label,alert,retry-larger", "warning",
      "CUDA out of memory|CUDA_ERROR_OUT_OF_MEMORY|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
      "OutOfMemoryError|RESOURCE_EXHAUSTED: Out of memory|OOM when allocating tensor|out of memory trying to allocate" },
    { "ecc", "label,alert,exclude-node", "critical",
      "uncorrectable ECC error|ECC error encountered|CUDA_ERROR_ECC_UNCORRECTABLE|Xid.{0,40}\\b(48|63|64|94|95)\\b" },
    { "nan-loss", "label,alert,no-retry", "warning",
      "[Ll]oss[\"']? {0,8}[=:]? {0,8}[\"']?-?(nan|NaN)\\b|NaN loss|[Ll]oss is NaN|loss became NaN" },
};

static unsigned parse_actions(const char *s, char *bad, size_t badlen)
{
    static const char *const names[] = { "label", "alert", "no-retry", "exclude-node", "retry-larger" };
    unsigned mask = 0;
    char buf[200], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *a = strtok_r(buf, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        unsigned bit = 0;
        for (int i = 0; i < 5; i++)
            if (!strcmp(a, names[i]))
                bit = 1u << i;
        if (!bit) {
            snprintf(bad, badlen, "%s", a);
            return 0;
        }
        mask |= bit;
    }
    return mask;
}

static int compile(policy *p, const char *name, const char *actions, const char *pattern, const char *severity)
{
    char bad[64] = "", why[160];
    snprintf(p->name, sizeof(p->name), "%s", name);
    snprintf(p->severity, sizeof(p->severity), "%s", severity);
    if ((p->actions = parse_actions(actions, bad, sizeof(bad))) == 0)
        return kestrel__error_set(KESTREL_EINVALID, "log policy %s: unknown action '%s' (label, alert, no-retry, "
                                  "exclude-node, retry-larger)", name, bad);
    if (kestrel__regex_bounded(pattern) < 0)
        return kestrel__error_set(KESTREL_EINVALID, "log policy %s: %s", name, kestrel_error_last()->message);
    if ((p->re = kd_regex_new(pattern, 0, why, sizeof(why))) == NULL)
        return kestrel__error_set(KESTREL_EINVALID, "log policy %s: not a POSIX extended regex: %s", name, why);
    return 0;
}

/* "NAME:ACTIONS=REGEX" into its three parts (in buf). */
static int split(const char *arg, char *buf, size_t n, char **name, char **actions, char **pattern)
{
    char *colon, *eq;
    if (strlen(arg) >= n)
        return kestrel__error_set(KESTREL_EINVALID, "--log-policy: at most %zu bytes", n - 1);
    snprintf(buf, n, "%s", arg);
    if ((colon = strchr(buf, ':')) == NULL || (eq = strchr(colon, '=')) == NULL || colon == buf || eq == colon + 1 ||
        !eq[1])
        return kestrel__error_set(KESTREL_EINVALID, "--log-policy NAME:ACTION[,ACTION...]=REGEX, e.g. "
                                  "oom:label,no-retry=Killed process, not '%.80s'", arg);
    *colon = *eq = '\0';
    *name = buf;
    *actions = colon + 1;
    *pattern = eq + 1;
    return 0;
}

int kd_policy_parse_check(const char *arg)
{
    char buf[1200], *name, *actions, *pattern;
    policy p;
    if (split(arg, buf, sizeof(buf), &name, &actions, &pattern) < 0 || compile(&p, name, actions, pattern, "") < 0)
        return KESTREL_EINVALID;
    kd_regex_free(p.re);
    return 0;
}

int kd_policies_spec_check(const Kestrel__V1__JobSpec *spec)
{
    for (size_t i = 0; i < spec->n_log_policies; i++) {
        char why[200];
        kd_regex *re = kd_regex_new(spec->log_policies[i]->pattern, 0, why, sizeof(why));
        if (re == NULL)   /* one POSIX takes and kestreld could not match: said at the submit, not dropped at the start */
            return kestrel__error_set(KESTREL_EINVALID, "field 'log_policies': %s: %s", spec->log_policies[i]->name, why);
        kd_regex_free(re);
    }
    return 0;
}

int kd_policies_init(kd_engine *e)
{
    struct kd_policies *ps = calloc(1, sizeof(*ps));
    if (ps == NULL)
        return kestrel__error_oom();
    pthread_mutex_init(&ps->mu, NULL);
    e->policies = ps;
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
        if (compile(&ps->global[ps->nglobal++], builtins[i].name, builtins[i].actions, builtins[i].pattern,
                    builtins[i].severity) < 0)
            return KESTREL_ERROR;
    for (size_t i = 0; i < e->cfg->nlog_policies; i++) {
        char buf[1200], *name, *actions, *pattern;
        if (ps->nglobal == MAX_GLOBAL)
            return kestrel__error_set(KESTREL_EINVALID, "--log-policy: at most %d", MAX_GLOBAL - 3);
        if (split(e->cfg->log_policies[i], buf, sizeof(buf), &name, &actions, &pattern) < 0)
            return KESTREL_EINVALID;
        for (size_t k = 0; k < ps->nglobal; k++)   /* the same name replaces a built-in */
            if (!strcmp(ps->global[k].name, name)) {
                kd_regex_free(ps->global[k].re);
                ps->global[k] = ps->global[--ps->nglobal];
                break;
            }
        if (compile(&ps->global[ps->nglobal], name, actions, pattern, "warning") < 0)
            return KESTREL_EINVALID;
        ps->nglobal++;
    }
    return 0;
}

/* owner's budget, made the first time (under ps->mu); NULL when out of memory. */
static budget *budget_of(struct kd_policies *ps, const char *owner)
{
    budget *b = NULL;
    for (size_t i = 0; i < ps->nbudgets && !b; i++)
        if (!strcmp(ps->budgets[i]->owner, owner))
            b = ps->budgets[i];
    if (b == NULL && kestrel__array_grow(&ps->budgets, &ps->bcap, ps->nbudgets + 1, sizeof(*ps->budgets)) == 0 &&
        (b = calloc(1, sizeof(*b))) != NULL) {
        snprintf(b->owner, sizeof(b->owner), "%s", owner);
        b->scan_ns = SCAN_SAVED_NS;
        b->scan_ms = kestrel__mono_ms();
        ps->budgets[ps->nbudgets++] = b;
    }
    return b;
}

/* Whether b has matching time left now (under ps->mu): what passed since it was last added to is. */
static int budget_left(budget *b, int64_t now)
{
    if (now > b->scan_ms) {
        b->scan_ns += (now - b->scan_ms) * SCAN_NS_PER_MS;
        if (b->scan_ns > SCAN_SAVED_NS)
            b->scan_ns = SCAN_SAVED_NS;
        b->scan_ms = now;
    }
    return b->scan_ns > 0;
}

static void state_free(run_state *rs)
{
    for (size_t k = 0; k < rs->nown; k++)
        kd_regex_free(rs->own[k].re);
    pthread_mutex_destroy(&rs->mu);
    free(rs);
}

void kd_policies_free(kd_engine *e)
{
    struct kd_policies *ps = e->policies;
    if (ps == NULL)
        return;
    for (size_t i = 0; i < ps->nglobal; i++)
        kd_regex_free(ps->global[i].re);
    for (size_t r = 0; r < ps->nruns; r++)
        state_free(ps->runs[r]);
    free(ps->runs);
    for (size_t i = 0; i < ps->nbudgets; i++)
        free(ps->budgets[i]);
    free(ps->budgets);
    pthread_mutex_destroy(&ps->mu);
    free(ps);
    e->policies = NULL;
}

static void release(struct kd_policies *ps, run_state *rs);

/* A job's run state, referenced (release it), made on first use; its own policies come from the
 * job's spec in the catalog, read without the list's lock. NULL on no memory. */
static run_state *acquire(kd_engine *e, int64_t job_id)
{
    struct kd_policies *ps = e->policies;
    run_state *rs = NULL;
    pthread_mutex_lock(&ps->mu);
    for (size_t i = 0; i < ps->nruns && !rs; i++)
        if (ps->runs[i]->job_id == job_id)
            rs = ps->runs[i];
    if (rs == NULL && kestrel__array_grow(&ps->runs, &ps->cap, ps->nruns + 1, sizeof(*ps->runs)) == 0 &&
        (rs = calloc(1, sizeof(*rs))) != NULL) {
        rs->job_id = job_id;
        pthread_mutex_init(&rs->mu, NULL);
        ps->runs[ps->nruns++] = rs;
    }
    if (rs)
        rs->refs++;
    pthread_mutex_unlock(&ps->mu);
    if (rs == NULL)
        return NULL;
    pthread_mutex_lock(&rs->mu);
    if (!rs->loaded) {
        Kestrel__V1__Job *job = NULL;
        rs->loaded = 1;
        if (kd_catalog_job_load(e->cat, job_id, 0, &job, NULL) < 0 || kestrel_job_state_is_final(job->state))
            rs->ended = 1;   /* lines or metrics after its end (a build's, a late report): nothing to do */
        else if (job->spec) {
            for (size_t i = 0; i < job->spec->n_log_policies && rs->nown < MAX_OWN; i++) {
                const Kestrel__V1__LogPolicy *p = job->spec->log_policies[i];
                char acts[200] = "";
                for (size_t k = 0; k < p->n_actions && strlen(acts) + strlen(p->actions[k]) + 2 < sizeof(acts); k++)
                    snprintf(acts + strlen(acts), sizeof(acts) - strlen(acts), "%s%s", k ? "," : "", p->actions[k]);
                if (compile(&rs->own[rs->nown], p->name, acts, p->pattern, "warning") == 0)
                    rs->nown++;
            }
            if (rs->nown) {
                pthread_mutex_lock(&ps->mu);
                rs->b = budget_of(ps, job->owner);
                pthread_mutex_unlock(&ps->mu);
            }
        }
        if (job)
            protobuf_c_message_free_unpacked(&job->base, NULL);
    }
    pthread_mutex_unlock(&rs->mu);
    if (rs->ended) {   /* set once, under rs->mu, before any reader: forget it again */
        release(ps, rs);
        kd_policies_run_end(e, job_id, NULL, 0);
        return NULL;
    }
    return rs;
}

static void release(struct kd_policies *ps, run_state *rs)
{
    int gone;
    pthread_mutex_lock(&ps->mu);
    gone = --rs->refs == 0 && rs->dead;
    pthread_mutex_unlock(&ps->mu);
    if (gone)
        state_free(rs);
}

typedef struct {
    char name[65], severity[16];
    unsigned actions;
    char line[300];
} fired;

/* s cut to at most n - 1 bytes without splitting a UTF-8 character. */
static void utf8_cut(char *dst, size_t n, const char *s)
{
    size_t len = strlen(s);
    if (len >= n) {
        len = n - 1;
        while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
            len--;
    }
    memcpy(dst, s, len);
    dst[len] = '\0';
}

static void act(kd_engine *e, int64_t job_id, const fired *f)
{
    char msg[512], key[100];
    if (f->actions & KD_POLICY_LABEL) {
        snprintf(key, sizeof(key), "log-policy/%s", f->name);
        kd_catalog_job_label_set(e->cat, job_id, key, "matched");
    }
    snprintf(msg, sizeof(msg), "log policy %s matched: %s", f->name, f->line);
    kd_catalog_job_note(e->cat, job_id, kestrel__now_ms(), msg);
    if (f->actions & KD_POLICY_ALERT)
        kd_engine_alert(e, job_id, "log-policy", f->severity, msg);
}

static void note_effect(run_state *rs, const policy *p)
{
    unsigned fx = p->actions & (KD_POLICY_NO_RETRY | KD_POLICY_EXCLUDE_NODE | KD_POLICY_RETRY_LARGER);
    if (fx && strlen(rs->why) + strlen(p->name) + 3 < sizeof(rs->why))
        snprintf(rs->why + strlen(rs->why), sizeof(rs->why) - strlen(rs->why), "%s%s", rs->why[0] ? ", " : "", p->name);
    rs->effects |= fx;
}

/* Match policy p (the job's own i-th, or kestreld's i-th) against a line once a run; what fired
 * goes to f (8 at most a call). */
static void consider(run_state *rs, const policy *p, int own, size_t i, const char *text, fired *f, size_t *nf)
{
    int done = own ? (rs->fired_own >> i) & 1 : (int)((rs->fired_global >> i) & 1);
    if (done || !kd_regex_match(p->re, text, strlen(text)))
        return;
    if (own)
        rs->fired_own |= 1u << i;
    else
        rs->fired_global |= 1ull << i;
    note_effect(rs, p);
    if (*nf < 8) {
        snprintf(f[*nf].name, sizeof(f[*nf].name), "%s", p->name);
        snprintf(f[*nf].severity, sizeof(f[*nf].severity), "%s", p->severity);
        f[*nf].actions = p->actions;
        utf8_cut(f[*nf].line, sizeof(f[*nf].line), text);
        (*nf)++;
    }
}

void kd_policies_scan(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t n)
{
    struct kd_policies *ps = e->policies;
    fired f[8];
    size_t nf = 0;
    char *text;
    run_state *rs;
    int say;
    if (ps == NULL || n == 0 || (text = malloc(65537)) == NULL)
        return;
    if ((rs = acquire(e, job_id)) == NULL) {
        free(text);
        return;
    }
    pthread_mutex_lock(&rs->mu);
    for (size_t l = 0; l < n; l++) {
        size_t len = lines[l].len < 65536 ? lines[l].len : 65536;
        struct timespec t0, t1;
        int left;
        memcpy(text, lines[l].text, len);
        text[len] = '\0';
        for (size_t i = 0; i < ps->nglobal; i++)   /* kestreld's own and the built-ins: always */
            consider(rs, &ps->global[i], 0, i, text, f, &nf);
        if (rs->nown == 0)
            continue;
        pthread_mutex_lock(&ps->mu);
        left = rs->b && budget_left(rs->b, kestrel__mono_ms());
        pthread_mutex_unlock(&ps->mu);
        if (!left) {
            rs->unscanned++;
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (size_t i = 0; i < rs->nown; i++)   /* the job's own, on its owner's budget */
            consider(rs, &rs->own[i], 1, i, text, f, &nf);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_mutex_lock(&ps->mu);
        rs->b->scan_ns -= (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
        pthread_mutex_unlock(&ps->mu);
    }
    say = rs->unscanned && !rs->unscanned_said;
    rs->unscanned_said |= say;
    pthread_mutex_unlock(&rs->mu);
    release(ps, rs);
    free(text);
    for (size_t i = 0; i < nf; i++)   /* catalog writes and the webhook off every policy lock */
        act(e, job_id, &f[i]);
    if (say)   /* once a run: its lines are stored and searchable, only the policies miss them */
        kd_catalog_job_note(e->cat, job_id, kestrel__now_ms(), "log policies: lines go unscanned by the job's own "
                            "patterns while those of its owner's running jobs take more than a tenth of a core "
                            "together (too costly for their lines); kestreld's own still scan every line");
}

void kd_policies_metric(kd_engine *e, int64_t job_id, const char *name, double value)
{
    struct kd_policies *ps = e->policies;
    size_t n = strlen(name);
    run_state *rs;
    int alert = 0;
    if (ps == NULL || !isnan(value) || n < 4 || strcmp(name + n - 4, "loss") || (rs = acquire(e, job_id)) == NULL)
        return;
    pthread_mutex_lock(&rs->mu);
    if (!rs->nan_alerted) {
        rs->nan_alerted = alert = 1;
        rs->effects |= KD_POLICY_NO_RETRY;   /* a retry would diverge the same way */
        snprintf(rs->why + strlen(rs->why), sizeof(rs->why) - strlen(rs->why), "%snan-loss", rs->why[0] ? ", " : "");
    }
    pthread_mutex_unlock(&rs->mu);
    release(ps, rs);
    if (alert) {
        char msg[400], cut[300];
        utf8_cut(cut, sizeof(cut), name);
        snprintf(msg, sizeof(msg), "metric %s is NaN: the training diverged", cut);
        kd_catalog_job_note(e->cat, job_id, kestrel__now_ms(), msg);
        kd_engine_alert(e, job_id, "nan-loss", "warning", msg);
    }
}

unsigned kd_policies_run_end(kd_engine *e, int64_t job_id, char *why, size_t whylen)
{
    struct kd_policies *ps = e->policies;
    run_state *rs = NULL;
    unsigned fx = 0;
    if (whylen)
        why[0] = '\0';
    if (ps == NULL)
        return 0;
    pthread_mutex_lock(&ps->mu);
    for (size_t i = 0; i < ps->nruns && !rs; i++)
        if (ps->runs[i]->job_id == job_id) {
            rs = ps->runs[i];
            ps->runs[i] = ps->runs[--ps->nruns];
            rs->dead = 1;     /* freed by its last release, */
            rs->refs++;       /* ours below at the latest */
        }
    pthread_mutex_unlock(&ps->mu);
    if (rs == NULL)
        return 0;
    pthread_mutex_lock(&rs->mu);
    fx = rs->effects;
    if (whylen)
        snprintf(why, whylen, "%s", rs->why);
    pthread_mutex_unlock(&rs->mu);
    release(ps, rs);
    return fx;
}
