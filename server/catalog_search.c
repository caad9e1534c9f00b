/* server/catalog_search.c - log search over every job's lines: the trigram index (log_fts, kept by
 * triggers on logs) finds the lines holding a literal, the exact test (case, regex) runs on those.
 * A regex with no literal of three characters scans the lines instead (the reply says so). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sqlite3.h>
#include "catalog.h"

#define REPLY_MAX (8u << 20)          /* a reply's lines, about: past it the rest is the next page */
#define KEY_SHIFT 36                   /* a line's key: job_id << 36 | seq (the index's rowid) */
#define SEQ_MASK ((1LL << KEY_SHIFT) - 1)

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Drop the last (UTF-8) character of cur[0..*n). */
static void drop_last(char *cur, size_t *n)
{
    while (*n && ((unsigned char)cur[*n - 1] & 0xC0) == 0x80)
        (*n)--;
    if (*n)
        (*n)--;
}

static void flush(char *cur, size_t *n, char *best, size_t bestsz)
{
    cur[*n] = '\0';
    if (utf8_chars(cur) > utf8_chars(best) && *n < bestsz)
        memcpy(best, cur, *n + 1);
    *n = 0;
}

int kd_regex_literal(const char *re, char *out, size_t outsz)
{
    size_t len = strlen(re), n = 0;
    char *cur = malloc(len + 1);
    int depth = 0;
    if (cur == NULL)
        return kestrel__error_oom();
    if (outsz)
        out[0] = '\0';
    for (size_t i = 0; i < len; i++) {
        char c = re[i];
        if (c == '[') {   /* a bracket expression: one character of a set; skip to its end */
            size_t j = i + 1;
            flush(cur, &n, out, outsz);
            if (re[j] == '^')
                j++;
            if (re[j] == ']')
                j++;
            while (j < len && re[j] != ']') {
                if (re[j] == '[' && (re[j + 1] == ':' || re[j + 1] == '.' || re[j + 1] == '=')) {
                    const char *end = strstr(re + j + 2, (char[]){ re[j + 1], ']', 0 });
                    j = end ? (size_t)(end - re) + 2 : len;
                } else {
                    j++;
                }
            }
            i = j < len ? j : len;
            continue;
        }
        if (depth > 0) {   /* inside a group: nothing there is required (it may be optional) */
            if (c == '\\' && i + 1 < len)
                i++;
            else if (c == '(')
                depth++;
            else if (c == ')')
                depth--;
            continue;
        }
        switch (c) {
        case '|':
            free(cur);
            if (outsz)
                out[0] = '\0';
            return 0;
        case '(':
            flush(cur, &n, out, outsz);
            depth++;
            break;
        case '.': case '^': case '$': case ')':
            flush(cur, &n, out, outsz);
            break;
        case '*': case '?':
            drop_last(cur, &n);
            flush(cur, &n, out, outsz);
            break;
        case '{':
            if (re[i + 1] == '0' || re[i + 1] == ',')
                drop_last(cur, &n);
            flush(cur, &n, out, outsz);
            while (i < len && re[i] != '}')
                i++;
            break;
        case '+':
            flush(cur, &n, out, outsz);
            break;
        case '\\':
            if (i + 1 < len && !((re[i + 1] >= '0' && re[i + 1] <= '9') || (re[i + 1] >= 'a' && re[i + 1] <= 'z') ||
                                 (re[i + 1] >= 'A' && re[i + 1] <= 'Z') || re[i + 1] == '<' || re[i + 1] == '>' ||
                                 re[i + 1] == '`' || re[i + 1] == '\'')) {
                cur[n++] = re[++i];
            } else {
                flush(cur, &n, out, outsz);   /* \w \d \b \1 ...: not a literal */
                i++;
            }
            break;
        default:
            cur[n++] = c;
        }
    }
    flush(cur, &n, out, outsz);
    free(cur);
    return 0;
}

/* The index is of trigrams without positions (detail=none: smaller, faster to fill): a line
 * holding lit holds each of its trigrams, so the query is an AND of some of them, and every
 * candidate is then checked against the line itself. Few are enough to be selective and each one
 * more costs a walk of its list (a common one's is long): MAX_TRIGRAMS, spread over lit from its
 * first to its last (measured on 2 M lines: 4 took 34 ms where 24 took 185, same candidates). */
#define MAX_TRIGRAMS 4

static void trigram_query(const char *lit, char *out)
{
    size_t starts[1100], n = 0, len = strlen(lit), ntri, k;
    char *o = out;
    for (size_t i = 0; lit[i] && n < 1100; i++)
        if (((unsigned char)lit[i] & 0xC0) != 0x80)
            starts[n++] = i;
    ntri = n - 2;   /* n >= 3 here */
    k = ntri < MAX_TRIGRAMS ? ntri : MAX_TRIGRAMS;
    for (size_t j = 0; j < k; j++) {
        size_t t = k > 1 ? (j * (ntri - 1) + (k - 1) / 2) / (k - 1) : 0;
        size_t a = starts[t], b = t + 3 < n ? starts[t + 3] : len;
        if (o != out)
            o += sprintf(o, " AND ");
        *o++ = '"';
        for (size_t i = a; i < b; i++) {
            if (lit[i] == '"')
                *o++ = '"';
            *o++ = lit[i];
        }
        *o++ = '"';
    }
    *o = '\0';
}

static int past_deadline(void *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 > *(int64_t *)p;
}

static Kestrel__V1__LogLine *line_of(sqlite3_stmt *st, int c)
{
    Kestrel__V1__LogLine *l = malloc(sizeof(*l));
    const unsigned char *t = sqlite3_column_text(st, c + 3);
    if (l == NULL)
        return NULL;
    kestrel__v1__log_line__init(l);
    l->offset = sqlite3_column_int64(st, c);
    l->time_ms = sqlite3_column_int64(st, c + 1);
    l->stream = (Kestrel__V1__LogStream)sqlite3_column_int(st, c + 2);
    if ((l->text = kestrel__strdup(t ? (const char *)t : "")) == NULL) {
        free(l);
        return NULL;
    }
    return l;
}

/* Up to q->context lines on each side of a hit. */
static int context_of(sqlite3 *db, Kestrel__V1__LogHit *h, int context)
{
    static const char *const sql[2] = {
        "SELECT seq, time_ms, stream, text FROM logs WHERE job_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
        "SELECT seq, time_ms, stream, text FROM logs WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
    };
    for (int side = 0; side < 2; side++) {
        sqlite3_stmt *st;
        Kestrel__V1__LogLine ***v = side ? &h->after : &h->before;
        size_t *nv = side ? &h->n_after : &h->n_before;
        if (sqlite3_prepare_v2(db, sql[side], -1, &st, NULL) != SQLITE_OK)
            return kestrel__error_set(KESTREL_EIO, "log search: %s", sqlite3_errmsg(db));
        sqlite3_bind_int64(st, 1, h->job_id);
        sqlite3_bind_int64(st, 2, h->offset);
        sqlite3_bind_int(st, 3, context);
        if ((*v = calloc((size_t)context, sizeof(**v))) == NULL) {
            sqlite3_finalize(st);
            return kestrel__error_oom();
        }
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (((*v)[*nv] = line_of(st, 0)) == NULL) {
                sqlite3_finalize(st);
                return kestrel__error_oom();
            }
            (*nv)++;
        }
        sqlite3_finalize(st);
        for (size_t i = 0; !side && i < *nv / 2; i++) {   /* oldest first */
            Kestrel__V1__LogLine *t = (*v)[i];
            (*v)[i] = (*v)[*nv - 1 - i];
            (*v)[*nv - 1 - i] = t;
        }
    }
    return 0;
}

/* The filters every form shares: ?3..?4 key range, ?5 owner, ?6 state, ?7 since, ?8 regex, ?9 exact
 * substring, ?10 icase (of the regex), ?12 substring in any case; ?11 limit. */
#define FILTERS \
    " AND (?5 = 0 OR j.owner_id = ?5) AND (?6 = 0 OR j.state = ?6) AND l.time_ms >= ?7" \
    " AND (?8 IS NULL OR kd_regexp(?8, l.text, ?10)) AND (?9 IS NULL OR instr(l.text, ?9) > 0)" \
    " AND (?12 IS NULL OR kd_icontains(l.text, ?12))"
#define HIT_COLUMNS " l.seq, l.time_ms, l.stream, l.text, j.id, j.name"

/* the index's candidates, newest first */
static const char *const indexed =
    "SELECT f.rowid," HIT_COLUMNS " FROM log_fts f"
    " JOIN logs l ON l.job_id = (f.rowid >> 36) AND l.seq = (f.rowid & 68719476735)"
    " JOIN jobs j ON j.id = l.job_id"
    " WHERE log_fts MATCH ?1 AND f.rowid < ?2 AND f.rowid >= ?3 AND f.rowid < ?4" FILTERS
    " ORDER BY f.rowid DESC LIMIT ?11";
/* the lines the indexer has not reached yet (a second or so of output) */
static const char *const pending =
    "SELECT p.k," HIT_COLUMNS " FROM log_pending p"
    " JOIN logs l ON l.job_id = (p.k >> 36) AND l.seq = (p.k & 68719476735)"
    " JOIN jobs j ON j.id = l.job_id"
    " WHERE p.k < ?2 AND p.k >= ?3 AND p.k < ?4" FILTERS
    " ORDER BY p.k DESC LIMIT ?11";
/* a regex without a literal: every line */
static const char *const scanned =
    "SELECT l.job_id * 68719476736 + l.seq AS k," HIT_COLUMNS " FROM logs l"
    " JOIN jobs j ON j.id = l.job_id"
    " WHERE (l.job_id < (?2 >> 36) OR (l.job_id = (?2 >> 36) AND l.seq < (?2 & 68719476735)))"
    " AND l.job_id >= (?3 >> 36) AND l.job_id < (?4 >> 36)" FILTERS
    " ORDER BY l.job_id DESC, l.seq DESC LIMIT ?11";

typedef struct {
    Kestrel__V1__LogHit **hits;
    int64_t *keys;
    size_t n;
} found;

/* Up to limit + 1 hits of one form, newest first. */
static int collect(sqlite3 *db, const char *sql, const kd_log_query *q, const char *match, found *f)
{
    sqlite3_stmt *st;
    int step, rc = 0;
    if ((f->hits = calloc((size_t)q->limit + 1, sizeof(*f->hits))) == NULL ||
        (f->keys = calloc((size_t)q->limit + 1, sizeof(*f->keys))) == NULL)
        return kestrel__error_oom();
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return kestrel__error_set(KESTREL_EIO, "log search: %s", sqlite3_errmsg(db));
    if (match)
        sqlite3_bind_text(st, 1, match, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, q->before > 0 ? q->before : INT64_MAX);
    sqlite3_bind_int64(st, 3, q->job_id ? q->job_id << KEY_SHIFT : 0);
    sqlite3_bind_int64(st, 4, q->job_id ? (q->job_id + 1) << KEY_SHIFT : INT64_MAX);
    sqlite3_bind_int64(st, 5, q->owner_id);
    sqlite3_bind_int(st, 6, q->state);
    sqlite3_bind_int64(st, 7, q->since_ms);
    if (q->regex)
        sqlite3_bind_text(st, 8, q->pattern, -1, SQLITE_STATIC);
    if (!q->regex && !q->icase)
        sqlite3_bind_text(st, 9, q->pattern, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 10, q->icase);
    sqlite3_bind_int(st, 11, q->limit + 1);
    if (!q->regex && q->icase)
        sqlite3_bind_text(st, 12, q->pattern, -1, SQLITE_STATIC);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        Kestrel__V1__LogHit *h = malloc(sizeof(*h));
        const unsigned char *name = sqlite3_column_text(st, 6);
        Kestrel__V1__LogLine *l = h ? line_of(st, 1) : NULL;
        if (l == NULL) {
            free(h);
            rc = kestrel__error_oom();
            break;
        }
        kestrel__v1__log_hit__init(h);
        f->keys[f->n] = sqlite3_column_int64(st, 0);
        f->hits[f->n++] = h;
        h->job_id = sqlite3_column_int64(st, 5);
        h->offset = l->offset;
        h->time_ms = l->time_ms;
        h->stream = l->stream;
        h->text = l->text;
        free(l);
        if ((h->job_name = kestrel__strdup(name ? (const char *)name : "")) == NULL) {
            h->job_name = (char *)protobuf_c_empty_string;
            rc = kestrel__error_oom();
            break;
        }
    }
    if (rc == 0 && step != SQLITE_ROW && step != SQLITE_DONE)
        rc = step == SQLITE_INTERRUPT
                 ? kestrel__error_set(KESTREL_ETIMEOUT, "the search ran past %d s: narrow it (--job, --since, --state, "
                                      "a longer literal)", q->timeout_ms / 1000)
                 : kestrel__error_set(KESTREL_EIO, "log search: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

int kd_catalog_log_search(kd_catalog *cat, const kd_log_query *q, Kestrel__V1__LogSearchResult **out)
{
    Kestrel__V1__LogSearchResult *res = calloc(1, sizeof(*res));
    sqlite3 *db = NULL;
    char *lit = NULL, *match = NULL;
    found a = { 0 }, b = { 0 };
    struct timespec ts;
    int64_t deadline, last = 0;
    size_t bytes = 0;
    int rc = 0, use_index;
    size_t plen = strlen(q->pattern), ia = 0, ib = 0;
    if (res == NULL)
        return kestrel__error_oom();
    kestrel__v1__log_search_result__init(res);
    if ((lit = malloc(plen + 1)) == NULL || (match = malloc(12 * plen + 16)) == NULL) {
        rc = kestrel__error_oom();
        goto out;
    }
    if (q->regex) {
        if ((rc = kd_regex_literal(q->pattern, lit, plen + 1)) < 0)
            goto out;
    } else {
        memcpy(lit, q->pattern, plen + 1);
    }
    use_index = utf8_chars(lit) >= 3;
    if (!use_index && !q->regex) {
        rc = kestrel__error_set(KESTREL_EINVALID, "a substring search needs at least 3 characters (the index is of "
                                "trigrams); use --regex to scan for shorter text");
        goto out;
    }
    if (use_index)
        trigram_query(lit, match);
    if (sqlite3_open_v2(kd__path(cat), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        kd__register_functions(db) < 0) {
        rc = kestrel__error_set(KESTREL_EIO, "log search: cannot open the catalog: %s", db ? sqlite3_errmsg(db) : "");
        goto out;
    }
    sqlite3_busy_timeout(db, 5000);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    deadline = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + q->timeout_ms;
    sqlite3_progress_handler(db, 4096, past_deadline, &deadline);
    res->scanned = !use_index;
    /* one read transaction: the indexer moving lines from the queue into the index between the
     * two reads could otherwise hide them from both */
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if ((rc = collect(db, use_index ? indexed : scanned, q, use_index ? match : NULL, &a)) < 0 ||
        (use_index && (rc = collect(db, pending, q, NULL, &b)) < 0))
        goto out;
    if ((res->hits = calloc((size_t)q->limit + 1, sizeof(*res->hits))) == NULL) {
        rc = kestrel__error_oom();
        goto out;
    }
    while ((ia < a.n || ib < b.n) && res->n_hits < (size_t)q->limit && bytes < REPLY_MAX) {   /* merge, newest first */
        int from_a = ib == b.n || (ia < a.n && a.keys[ia] > b.keys[ib]);
        found *f = from_a ? &a : &b;
        size_t *i = from_a ? &ia : &ib;
        Kestrel__V1__LogHit *h = f->hits[*i];
        if (q->context > 0 && (rc = context_of(db, h, q->context)) < 0) {
            protobuf_c_message_free_unpacked(&h->base, NULL);
            f->hits[*i] = NULL;
            goto out;
        }
        bytes += strlen(h->text) + 64;
        for (size_t c = 0; c < h->n_before; c++)
            bytes += strlen(h->before[c]->text) + 32;
        for (size_t c = 0; c < h->n_after; c++)
            bytes += strlen(h->after[c]->text) + 32;
        last = f->keys[*i];
        res->hits[res->n_hits++] = h;
        f->hits[(*i)++] = NULL;
    }
    res->more = ia < a.n || ib < b.n;   /* past the limit, or past REPLY_MAX bytes: the next page */
    if (rc == 0 && res->more) {
        char cur[32];
        snprintf(cur, sizeof(cur), "%lld", (long long)last);
        if ((res->next_before = kestrel__strdup(cur)) == NULL)
            rc = kestrel__error_oom();
    }
out:
    for (size_t i = 0; i < a.n; i++)   /* what the merge did not take */
        if (a.hits && a.hits[i])
            protobuf_c_message_free_unpacked(&a.hits[i]->base, NULL);
    for (size_t i = 0; i < b.n; i++)
        if (b.hits && b.hits[i])
            protobuf_c_message_free_unpacked(&b.hits[i]->base, NULL);
    free(a.hits);
    free(a.keys);
    free(b.hits);
    free(b.keys);
    sqlite3_close(db);
    free(lit);
    free(match);
    if (rc < 0 && res) {
        if (res->next_before == NULL)
            res->next_before = (char *)protobuf_c_empty_string;
        protobuf_c_message_free_unpacked(&res->base, NULL);
    } else {
        *out = res;
    }
    return rc;
}

int kd_catalog_log_index(kd_catalog *cat, int batch)
{
    static const char *const move =
        "INSERT INTO log_fts(rowid, text) SELECT p.k, l.text FROM (SELECT k FROM log_pending ORDER BY k LIMIT ?) p"
        " JOIN logs l ON l.job_id = (p.k >> 36) AND l.seq = (p.k & 68719476735)";
    static const char *const drop = "DELETE FROM log_pending WHERE k IN (SELECT k FROM log_pending ORDER BY k LIMIT ?)";
    sqlite3_stmt *st;
    int rc, n = 0;
    kd__lock(cat);
    if ((rc = kd__exec(cat, "BEGIN IMMEDIATE")) < 0)
        goto out;
    if ((st = kd__stmt(cat, move)) == NULL)
        goto fail;
    sqlite3_bind_int(st, 1, batch);
    if (sqlite3_step(st) != SQLITE_DONE || (st = kd__stmt(cat, drop)) == NULL)
        goto fail;
    sqlite3_bind_int(st, 1, batch);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    n = sqlite3_changes(kd__db(cat));
    if ((rc = kd__exec(cat, "COMMIT")) == 0)
        goto out;
fail:
    rc = kd__sql_fail(cat, "index log lines");
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    return rc < 0 ? rc : n;
}
