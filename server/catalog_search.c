/* server/catalog_search.c - log search over every job's lines: the trigram index (log_fts, kept by
 * triggers on logs) finds the lines holding a literal, the exact test (case, regex) runs on those.
 * A regex with no literal of three characters scans the lines instead (the reply says so). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sqlite3.h>
#include "catalog.h"

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

/* The filters both forms share: ?3..?4 key range, ?5 owner, ?6 state, ?7 since, ?8 regex, ?9 exact
 * substring, ?10 icase; ?11 limit. */
#define FILTERS \
    " AND (?5 = 0 OR j.owner_id = ?5) AND (?6 = 0 OR j.state = ?6) AND l.time_ms >= ?7" \
    " AND (?8 IS NULL OR kd_regexp(?8, l.text, ?10)) AND (?9 IS NULL OR instr(l.text, ?9) > 0)"

static const char *const indexed =
    "SELECT f.rowid, l.seq, l.time_ms, l.stream, l.text, j.id, j.name FROM log_fts f"
    " JOIN logs l ON l.job_id = (f.rowid >> 36) AND l.seq = (f.rowid & 68719476735)"
    " JOIN jobs j ON j.id = l.job_id"
    " WHERE log_fts MATCH ?1 AND f.rowid < ?2 AND f.rowid >= ?3 AND f.rowid < ?4" FILTERS
    " ORDER BY f.rowid DESC LIMIT ?11";
static const char *const scanned =
    "SELECT l.job_id * 68719476736 + l.seq AS k, l.seq, l.time_ms, l.stream, l.text, j.id, j.name FROM logs l"
    " JOIN jobs j ON j.id = l.job_id"
    " WHERE (l.job_id < (?2 >> 36) OR (l.job_id = (?2 >> 36) AND l.seq < (?2 & 68719476735)))"
    " AND l.job_id >= (?3 >> 36) AND l.job_id < (?4 >> 36)" FILTERS
    " ORDER BY l.job_id DESC, l.seq DESC LIMIT ?11";

int kd_catalog_log_search(kd_catalog *cat, const kd_log_query *q, Kestrel__V1__LogSearchResult **out)
{
    Kestrel__V1__LogSearchResult *res = calloc(1, sizeof(*res));
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *lit = NULL, *match = NULL;
    struct timespec ts;
    int64_t deadline, last = 0;
    int rc = 0, step, use_index;
    size_t plen = strlen(q->pattern);
    if (res == NULL || (lit = malloc(plen + 1)) == NULL || (match = malloc(2 * plen + 3)) == NULL) {
        rc = kestrel__error_oom();
        goto out;
    }
    kestrel__v1__log_search_result__init(res);
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
    {   /* the literal as an FTS5 string: one phrase of trigrams, i.e. a substring (any case) */
        char *m = match;
        *m++ = '"';
        for (const char *p = lit; *p; p++) {
            if (*p == '"')
                *m++ = '"';
            *m++ = *p;
        }
        *m++ = '"';
        *m = '\0';
    }
    if (sqlite3_open_v2(kd__path(cat), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        kd__register_functions(db) < 0) {
        rc = kestrel__error_set(KESTREL_EIO, "log search: cannot open the catalog: %s", db ? sqlite3_errmsg(db) : "");
        goto out;
    }
    sqlite3_busy_timeout(db, 5000);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    deadline = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + q->timeout_ms;
    sqlite3_progress_handler(db, 4096, past_deadline, &deadline);
    if (sqlite3_prepare_v2(db, use_index ? indexed : scanned, -1, &st, NULL) != SQLITE_OK) {
        rc = kestrel__error_set(KESTREL_EIO, "log search: %s", sqlite3_errmsg(db));
        goto out;
    }
    res->scanned = !use_index;
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
    if ((res->hits = calloc((size_t)q->limit + 1, sizeof(*res->hits))) == NULL) {
        rc = kestrel__error_oom();
        goto out;
    }
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        Kestrel__V1__LogHit *h;
        const unsigned char *name = sqlite3_column_text(st, 6);
        Kestrel__V1__LogLine *l;
        if (res->n_hits == (size_t)q->limit) {
            res->more = 1;
            break;
        }
        if ((h = malloc(sizeof(*h))) == NULL || (l = line_of(st, 1)) == NULL) {
            free(h);
            rc = kestrel__error_oom();
            goto out;
        }
        kestrel__v1__log_hit__init(h);
        res->hits[res->n_hits++] = h;
        last = sqlite3_column_int64(st, 0);
        h->job_id = sqlite3_column_int64(st, 5);
        h->offset = l->offset;
        h->time_ms = l->time_ms;
        h->stream = l->stream;
        h->text = l->text;
        free(l);
        if ((h->job_name = kestrel__strdup(name ? (const char *)name : "")) == NULL) {
            h->job_name = (char *)protobuf_c_empty_string;
            rc = kestrel__error_oom();
            goto out;
        }
    }
    if (step != SQLITE_ROW && step != SQLITE_DONE) {
        rc = step == SQLITE_INTERRUPT
                 ? kestrel__error_set(KESTREL_ETOOLARGE, "the search ran past %d s: narrow it (--job, --since, --state, "
                                      "a longer literal)", q->timeout_ms / 1000)
                 : kestrel__error_set(KESTREL_EIO, "log search: %s", sqlite3_errmsg(db));
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    for (size_t i = 0; i < res->n_hits && q->context > 0 && rc == 0; i++)
        rc = context_of(db, res->hits[i], q->context);
    if (res->more) {
        char cur[32];
        snprintf(cur, sizeof(cur), "%lld", (long long)last);
        if ((res->next_before = kestrel__strdup(cur)) == NULL)
            rc = kestrel__error_oom();
    }
out:
    sqlite3_finalize(st);
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
