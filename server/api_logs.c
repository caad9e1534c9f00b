/* server/api_logs.c - GET /api/v1/logs/search: lines matching a substring or a regex across the
 * jobs the caller may see.
 *
 * Who may use it: any token. An admin's searches every job; a user's only the user's own jobs; a
 * job's token only that job. Query: q (1..1024 bytes, required), regex=1, icase=1, job=ID,
 * state=NAME, since=UNIX_MS, before=CURSOR (next_before of a previous page), limit=1..1000 (100),
 * context=0..20 (0). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "bounded_regex.h"
#include "api.h"
#include "route.h"
#include "job_priv.h"

#define MAX_PATTERN 1024
#define SEARCH_TIMEOUT_MS 20000
#define MAX_RUNNING 4          /* searches at once (each may read for SEARCH_TIMEOUT_MS), one a user; more get 429 */

/* Who runs each search under way (taken): one user's four searches kept every other
 * user's at 429 for as long as they ran (a hostile test). */
static pthread_mutex_t running_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t running[MAX_RUNNING];
static int taken[MAX_RUNNING];

/* A place for user's search: its index, or -1 with why in msg. */
static int take_place(int64_t user, char *msg, size_t n)
{
    int free_at = -1;
    pthread_mutex_lock(&running_mu);
    for (int i = 0; i < MAX_RUNNING && free_at != -2; i++)
        if (taken[i] && running[i] == user)
            free_at = -2;
        else if (!taken[i] && free_at == -1)
            free_at = i;
    if (free_at >= 0) {
        running[free_at] = user;
        taken[free_at] = 1;
    }
    pthread_mutex_unlock(&running_mu);
    if (free_at == -2)
        snprintf(msg, n, "your last log search is still running (one at a time a user): try again when it ends");
    else if (free_at == -1)
        snprintf(msg, n, "too many log searches running (%d at once): try again in a moment", MAX_RUNNING);
    return free_at < 0 ? -1 : free_at;
}

static int flag(kd_req *r, const char *key, int *out)
{
    const char *v = kd_query(r, key);
    *out = v && (!strcmp(v, "1") || !strcmp(v, "true"));
    return v && !*out && strcmp(v, "0") && strcmp(v, "false") ? -1 : 0;
}

static int number(kd_req *r, const char *key, long long lo, long long hi, long long dflt, long long *out)
{
    const char *v = kd_query(r, key);
    *out = dflt;
    return v && kd_parse_int(v, lo, hi, out) < 0 ? -1 : 0;
}

enum MHD_Result kd_route_log_search(kd_req *r)
{
    kd_log_query q;
    Kestrel__V1__LogSearchResult *res = NULL;
    const char *state = kd_query(r, "state");
    long long job, since, before, limit, context;
    char msg[300];
    int rc, place;
    memset(&q, 0, sizeof(q));
    if (strcmp(r->method, "GET"))
        return kd_reply_error(r, 405, "method_not_allowed", "GET /api/v1/logs/search?q=TEXT");
    q.pattern = kd_query(r, "q");
    if (q.pattern == NULL || !q.pattern[0] || strlen(q.pattern) > MAX_PATTERN)
        return kd_reply_error(r, 400, "invalid_argument", "query 'q': the text to find, 1..1024 bytes");
    for (const char *p = q.pattern; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t')
            return kd_reply_error(r, 400, "invalid_argument", "query 'q': no control characters (one line is searched)");
    if (flag(r, "regex", &q.regex) < 0 || flag(r, "icase", &q.icase) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "queries 'regex' and 'icase': 1 or 0");
    if (number(r, "job", 1, INT64_MAX >> 36, 0, &job) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "query 'job': a job id");
    if (number(r, "since", 0, INT64_MAX, 0, &since) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "query 'since': Unix time in milliseconds");
    if (number(r, "before", 1, INT64_MAX, 0, &before) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "query 'before': the next_before of a previous page");
    if (number(r, "limit", 1, 1000, 100, &limit) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "query 'limit': 1..1000 hits");
    if (number(r, "context", 0, 20, 0, &context) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "query 'context': 0..20 lines each side");
    if (state && !(q.state = kd_parse_state(state)))
        return kd_reply_error(r, 400, "invalid_argument", "query 'state': queued, running, succeeded, failed, cancelled "
                              "or preempted");
    if (q.regex && kestrel__regex_bounded(q.pattern) < 0) {
        snprintf(msg, sizeof(msg), "query 'q': %s", kestrel_error_last()->message);
        return kd_reply_error(r, 400, "invalid_argument", msg);
    }
    if (q.regex) {
        char why[200];
        kd_regex *re = kd_regex_new(q.pattern, q.icase, why, sizeof(why));
        if (re == NULL) {
            snprintf(msg, sizeof(msg), "query 'q': not a POSIX extended regular expression: %s", why);
            return kd_reply_error(r, 400, "invalid_argument", msg);
        }
        kd_regex_free(re);
    }
    q.job_id = job;
    q.since_ms = since;
    q.before = before;
    q.limit = (int)limit;
    q.context = (int)context;
    q.timeout_ms = SEARCH_TIMEOUT_MS;
    if (r->who.job_id) {   /* a job's token: its own job's lines, nothing else */
        if (q.job_id && q.job_id != r->who.job_id)
            return kd_reply_error(r, 404, "not_found", "no such job");
        q.job_id = r->who.job_id;
    } else if (!r->who.is_admin) {
        q.owner_id = r->who.user_id;
    }
    if ((place = take_place(r->who.user_id, msg, sizeof(msg))) < 0)
        return kd_reply_error(r, 429, "resource_exhausted", msg);
    rc = kd_catalog_log_search(r->e->cat, &q, &res);
    pthread_mutex_lock(&running_mu);
    taken[place] = 0;
    pthread_mutex_unlock(&running_mu);
    if (rc == KESTREL_ETIMEOUT)
        return kd_reply_error(r, 503, "deadline_exceeded", kestrel_error_last()->message);
    if (rc < 0)
        return kd_reply_failure(r, rc);
    return kd_reply_owned(r, 200, &res->base);
}
