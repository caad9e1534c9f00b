/* server/slurm_parse.c - reads Slurm's command output: `squeue --json` (every job Slurm holds, as
 * JSON), `scontrol show job -o` (Key=Value words, one job per line: where Slurm has no JSON) and
 * `sacct -P` (|-separated). Pure functions, unit-tested. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "slurm.h"

/* Copy the value of Key= in line (up to the next space) into out; 1 when present. */
static int field(const char *line, const char *key, char *out, size_t n)
{
    size_t klen = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p += klen) {
        size_t len;
        if ((p != line && p[-1] != ' ') || p[klen] != '=')
            continue;
        p += klen + 1;
        len = strcspn(p, " \n");
        if (len >= n)
            len = n - 1;
        memcpy(out, p, len);
        out[len] = '\0';
        return 1;
    }
    return 0;
}

/* "2:0" -> code 2, signal 0 */
static void exit_pair(const char *s, int *code, int *sig)
{
    *code = atoi(s);
    *sig = strchr(s, ':') ? atoi(strchr(s, ':') + 1) : 0;
}

int kd_slurm_parse_scontrol(const char *text, kd_sview **out, size_t *n)
{
    size_t cap = 0, k = 0;
    kd_sview *v = NULL;
    const char *line = text;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char *copy = strndup(line, len), tmp[64];
        kd_sview *x;
        line = nl ? nl + 1 : NULL;
        if (copy == NULL) {
            free(v);
            return kestrel__error_oom();
        }
        if (!field(copy, "JobId", tmp, sizeof(tmp)) || kestrel__array_grow(&v, &cap, k + 1, sizeof(*v)) < 0) {
            free(copy);
            continue;
        }
        x = &v[k++];
        memset(x, 0, sizeof(*x));
        snprintf(x->id, sizeof(x->id), "%s", tmp);
        field(copy, "JobState", x->state, sizeof(x->state));
        field(copy, "Reason", x->reason, sizeof(x->reason));
        if (!field(copy, "BatchHost", x->node, sizeof(x->node)) || !strcmp(x->node, "(null)"))
            field(copy, "NodeList", x->node, sizeof(x->node));
        if (!strcmp(x->node, "(null)"))
            x->node[0] = '\0';
        if (!strcmp(x->reason, "None"))
            x->reason[0] = '\0';
        for (char *c = x->reason; *c; c++)
            if (*c == '_')
                *c = ' ';
        x->restarts = field(copy, "Restarts", tmp, sizeof(tmp)) ? atoi(tmp) : 0;
        if (field(copy, "ExitCode", tmp, sizeof(tmp)))
            exit_pair(tmp, &x->exit_code, &x->exit_signal);
        free(copy);
    }
    *out = v;
    *n = k;
    return 0;
}

/* A number of squeue's JSON: a number, or (later Slurm) {"set": true, "number": N}; def without one,
 * or past what an int holds (Slurm's NO_VAL and INFINITE are). */
static double jnum(const cJSON *j, double def)
{
    const cJSON *n = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "number") : j;
    const cJSON *set = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "set") : NULL;
    return cJSON_IsNumber(n) && !cJSON_IsFalse(set) && n->valuedouble >= -2147483647.0 &&
                   n->valuedouble <= 2147483647.0
               ? n->valuedouble
               : def;
}

/* A string of it, or the first of an array of them (later Slurm's job_state: ["RUNNING", flags]). */
static const char *jstr(const cJSON *j)
{
    if (cJSON_IsArray(j))
        j = cJSON_GetArrayItem(j, 0);
    return cJSON_IsString(j) ? j->valuestring : "";
}

/* One job of squeue --json into x: 0, or -1 without a job id. */
static int json_job(const cJSON *job, kd_sview *x)
{
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(job, "exit_code");
    double id = jnum(cJSON_GetObjectItemCaseSensitive(job, "job_id"), -1);
    memset(x, 0, sizeof(*x));
    if (id < 1)
        return -1;
    snprintf(x->id, sizeof(x->id), "%.0f", id);
    snprintf(x->state, sizeof(x->state), "%s", jstr(cJSON_GetObjectItemCaseSensitive(job, "job_state")));
    snprintf(x->reason, sizeof(x->reason), "%s", jstr(cJSON_GetObjectItemCaseSensitive(job, "state_reason")));
    snprintf(x->node, sizeof(x->node), "%s", jstr(cJSON_GetObjectItemCaseSensitive(job, "batch_host")));
    if (!x->node[0])
        snprintf(x->node, sizeof(x->node), "%s", jstr(cJSON_GetObjectItemCaseSensitive(job, "nodes")));
    x->restarts = (int)jnum(cJSON_GetObjectItemCaseSensitive(job, "restart_cnt"), 0);
    if (cJSON_IsObject(ec)) {   /* later Slurm: {"return_code": N, "signal": {"id": N}} */
        const cJSON *sig = cJSON_GetObjectItemCaseSensitive(ec, "signal"), *sid = NULL;
        if (cJSON_IsObject(sig) && (sid = cJSON_GetObjectItemCaseSensitive(sig, "id")) == NULL)
            sid = cJSON_GetObjectItemCaseSensitive(sig, "signal_id");   /* 23.02's name */
        x->exit_code = (int)jnum(cJSON_GetObjectItemCaseSensitive(ec, "return_code"), 0);
        x->exit_signal = (int)jnum(sid, 0);
    } else {   /* 22.05: the wait status */
        int st = (int)jnum(ec, 0);
        x->exit_code = (st >> 8) & 0xff;
        x->exit_signal = st & 0x7f;
    }
    return 0;
}

int kd_slurm_parse_squeue_json(const char *text, kd_sview **out, size_t *n)
{
    /* the document starts a line (a warning squeue writes on stderr, in the same pipe, may come
     * before or after it: never inside it, a job's strings being JSON's own) */
    const char *start = *text == '{' ? text : strstr(text, "\n{");
    cJSON *doc = start ? cJSON_ParseWithOpts(start + (*start == '\n'), NULL, 0) : NULL;
    cJSON *jobs = cJSON_GetObjectItemCaseSensitive(doc, "jobs"), *errs = cJSON_GetObjectItemCaseSensitive(doc, "errors");
    cJSON *job;
    size_t cap = 0, k = 0;
    kd_sview *v = NULL;
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(jobs) || cJSON_GetArraySize(errs) > 0) {   /* Slurm's own errors: no view of it */
        cJSON_Delete(doc);
        return kestrel__error_set(KESTREL_EPROTO, "squeue --json: %s", jobs ? "errors" : "no \"jobs\" list");
    }
    cJSON_ArrayForEach(job, jobs) {
        if (kestrel__array_grow(&v, &cap, k + 1, sizeof(*v)) < 0) {
            free(v);
            cJSON_Delete(doc);
            return kestrel__error_oom();
        }
        if (json_job(job, &v[k]) == 0)
            k++;
    }
    cJSON_Delete(doc);
    for (size_t i = 0; i < k; i++) {   /* as scontrol's words are read */
        if (!strcmp(v[i].node, "(null)"))
            v[i].node[0] = '\0';
        if (!strcmp(v[i].reason, "None"))
            v[i].reason[0] = '\0';
        for (char *c = v[i].reason; *c; c++)
            if (*c == '_')
                *c = ' ';
    }
    *out = v;
    *n = k;
    return 0;
}

int kd_slurm_parse_sacct(const char *line, kd_sview *v)
{
    char buf[512], *f[4], *save = NULL;
    int k = 0;
    memset(v, 0, sizeof(*v));
    snprintf(buf, sizeof(buf), "%s", line);
    buf[strcspn(buf, "\n")] = '\0';
    for (char *p = strtok_r(buf, "|", &save); p && k < 4; p = strtok_r(NULL, "|", &save))
        f[k++] = p;
    if (k < 3)
        return -1;
    snprintf(v->id, sizeof(v->id), "%s", f[0]);
    /* "CANCELLED by 0" -> "CANCELLED" */
    snprintf(v->state, sizeof(v->state), "%.*s", (int)strcspn(f[1], " "), f[1]);
    exit_pair(f[2], &v->exit_code, &v->exit_signal);
    if (k > 3 && strcmp(f[3], "None assigned"))
        snprintf(v->node, sizeof(v->node), "%s", f[3]);
    return 0;
}

static int in(const char *st, const char *const *names)
{
    for (; *names; names++)
        if (!strcmp(st, *names))
            return 1;
    return 0;
}

int kd_slurm_state_pending(const char *st)
{
    static const char *const p[] = { "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING",
                                     "RESV_DEL_HOLD", "SPECIAL_EXIT", "PREEMPTED", NULL };
    return in(st, p);
}

int kd_slurm_state_running(const char *st)
{
    static const char *const r[] = { "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                                     "RESIZING", NULL };
    return in(st, r);
}

int kd_slurm_state_final(const char *st)
{
    static const char *const f[] = { "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                                     "BOOT_FAIL", "DEADLINE", "REVOKED", NULL };
    return in(st, f);
}

int kd_slurm_follow(int *kstate, int *restarts, int *ending, const kd_sview *v)
{
    int completing = !strcmp(v->state, "COMPLETING"), final = kd_slurm_state_final(v->state);
    int more = *restarts >= 0 && v->restarts > *restarts;   /* requeued since the last poll */
    int what = 0;
    if (!completing)
        *ending = 0;
    else if (*restarts < 0 && *kstate == KESTREL_JOB_STATE_QUEUED && v->restarts > 0)
        *ending = 1;   /* followed again while a requeued run ends (a run that ends says so when final) */
    if (*kstate == KESTREL_JOB_STATE_RUNNING) {
        if (kd_slurm_state_pending(v->state) || more) {
            what = KD_SLURM_REQUEUED;
            *ending = completing;
        }
    } else if (more && !final) {   /* it ran and was requeued between two polls: the start first */
        *kstate = KESTREL_JOB_STATE_RUNNING;
        return KD_SLURM_STARTED;
    } else if ((kd_slurm_state_running(v->state) && !(completing && *ending)) ||
               (final && v->node[0] && strcmp(v->state, "CANCELLED"))) {
        what = KD_SLURM_STARTED;
    }
    if (what)
        *kstate = what == KD_SLURM_REQUEUED ? KESTREL_JOB_STATE_QUEUED : KESTREL_JOB_STATE_RUNNING;
    *restarts = v->restarts;
    return what;
}
