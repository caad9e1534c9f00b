/* server/catalog_logs.c - job log lines in the catalog. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"

int64_t kd_catalog_log_count(kd_catalog *cat, int64_t job_id)
{
    static const char *const sql = "SELECT COALESCE(MAX(seq) + 1, 0) FROM logs WHERE job_id = ?";
    sqlite3_stmt *st;
    int64_t n = 0;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) != NULL) {
        sqlite3_bind_int64(st, 1, job_id);
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
    }
    kd__unlock(cat);
    return n;
}

/* What a line costs the budget: its bytes with the newline, what its row costs the catalog beyond
 * its text (the key, time and stream, and the search index's size entry: 34 bytes measured for an
 * empty line), and 6 more for each byte past the first of a character outside ASCII (cont: the
 * search index's trigrams of such text are nearly all its own, about 14 bytes a CJK character
 * measured). Counting bytes alone let a job of empty lines store 256 MiB of rows worth 8 GB, and
 * one of CJK text 5.7 times its budget (hostile tests). The figures a reader sees ("N bytes of output
 * dropped") stay bytes of output. catalog.c's migration 7 counts old logs so too. */
#define LINE_COST(len, cont) ((int64_t)(len) + 48 + 6 * (int64_t)(cont))
/* A line's text length in bytes, and its bytes past the first of each character (UTF-8: stored text
 * is valid UTF-8), as SQL reads them. */
#define LEN_SQL "length(CAST(text AS BLOB)), length(CAST(text AS BLOB)) - length(text)"

/* Past max_bytes a job's log keeps its head (the first half of the budget) and its tail: the
 * oldest lines after the head go, and one SYSTEM line where they were says how much is gone.
 * Offsets (seq) never change, so a reader that follows only sees the gap. */
static int cap_log(kd_catalog *cat, int64_t job_id, int64_t max_bytes, int64_t bytes, int *first_drop)
{
    static const char *const stat = "SELECT head_seq, dropped FROM log_stats WHERE job_id = ?";
    static const char *const oldest =
        "SELECT seq, " LEN_SQL " FROM logs WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT 512";
    static const char *const del = "DELETE FROM logs WHERE job_id = ? AND seq > ? AND seq <= ?";
    static const char *const del_one = "DELETE FROM logs WHERE job_id = ? AND seq = ?";
    static const char *const mark = "INSERT OR REPLACE INTO logs(job_id, seq, time_ms, stream, text) VALUES(?, ?, ?, ?, ?)";
    static const char *const save = "UPDATE log_stats SET bytes = ?, head_seq = ?, dropped = ? WHERE job_id = ?";
    sqlite3_stmt *st;
    int64_t head = -1, dropped = 0;
    char text[160];
    if ((st = kd__stmt(cat, stat)) == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, job_id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        head = sqlite3_column_int64(st, 0);
        dropped = sqlite3_column_int64(st, 1);
    }
    if (head < 0) {   /* the head ends with the last line that fits in half the budget (catalog 7
                       * counted older logs as these are, so the stored count holds) */
        int64_t sum = 0, len;
        static const char *const walk = "SELECT seq, " LEN_SQL " FROM logs WHERE job_id = ? ORDER BY seq";
        if ((st = kd__stmt(cat, walk)) == NULL)
            return KESTREL_EIO;
        sqlite3_bind_int64(st, 1, job_id);
        while (sqlite3_step(st) == SQLITE_ROW) {
            len = sqlite3_column_int64(st, 1);
            if ((sum += LINE_COST(len, sqlite3_column_int64(st, 2))) > max_bytes / 2) {   /* head + 1: the */
                bytes -= LINE_COST(len, sqlite3_column_int64(st, 2));                   /* marker's place, */
                dropped += len + 1;                                                      /* dropped below */
                break;
            }
            head = sqlite3_column_int64(st, 0);
        }
        if (sum <= max_bytes / 2) {   /* every line fits after all: the stored count was off; now it is not */
            bytes = sum;
            head = -1;
            goto save;
        }
        *first_drop = 1;
    }
    while (bytes > max_bytes) {   /* drop from just after the marker (head + 1) until under budget */
        int64_t upto = -1, freed = 0, out = 0;
        if ((st = kd__stmt(cat, oldest)) == NULL)
            return KESTREL_EIO;
        sqlite3_bind_int64(st, 1, job_id);
        sqlite3_bind_int64(st, 2, head + 1);
        while (bytes - freed > max_bytes - max_bytes / 16 && sqlite3_step(st) == SQLITE_ROW) {
            upto = sqlite3_column_int64(st, 0);
            freed += LINE_COST(sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2));
            out += sqlite3_column_int64(st, 1) + 1;
        }
        if (upto < 0)
            break;   /* only the head and the marker are left */
        if ((st = kd__stmt(cat, del)) == NULL)
            return KESTREL_EIO;
        sqlite3_bind_int64(st, 1, job_id);
        sqlite3_bind_int64(st, 2, head + 1);
        sqlite3_bind_int64(st, 3, upto);
        if (sqlite3_step(st) != SQLITE_DONE)
            return kd__sql_fail(cat, "drop log lines");
        bytes -= freed;
        dropped += out;
    }
    /* the marker takes the place of the first dropped line (head + 1): deleted first, so that the
     * trigger takes that line out of the search index too (REPLACE would not fire it) */
    if ((st = kd__stmt(cat, del_one)) == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, head + 1);
    if (sqlite3_step(st) != SQLITE_DONE)
        return kd__sql_fail(cat, "drop log line");
    snprintf(text, sizeof(text), "kestrel: %lld bytes of output dropped here (the log keeps its first and last "
             "bytes within --max-log-bytes %lld)", (long long)dropped, (long long)max_bytes);
    if ((st = kd__stmt(cat, mark)) == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, head + 1);
    sqlite3_bind_int64(st, 3, kestrel__now_ms());
    sqlite3_bind_int(st, 4, KESTREL_LOG_SYSTEM);
    sqlite3_bind_text(st, 5, text, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE)
        return kd__sql_fail(cat, "mark dropped log lines");
save:
    if ((st = kd__stmt(cat, save)) == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, bytes);
    sqlite3_bind_int64(st, 2, head);
    sqlite3_bind_int64(st, 3, dropped);
    sqlite3_bind_int64(st, 4, job_id);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : kd__sql_fail(cat, "log stats");
}

int kd_catalog_log_append(kd_catalog *cat, int64_t job_id, const kd_log_line *lines, size_t n, int64_t max_bytes,
                          int src_stream, int64_t src_off, int *first_drop)
{
    static const char *const next = "SELECT COALESCE(MAX(seq) + 1, 0) FROM logs WHERE job_id = ?";
    static const char *const ins = "INSERT INTO logs(job_id, seq, time_ms, stream, text) VALUES(?, ?, ?, ?, ?)";
    static const char *const used = "SELECT bytes FROM log_stats WHERE job_id = ?";
    static const char *const add =
        "INSERT INTO log_stats(job_id, bytes) VALUES(?, ?) ON CONFLICT(job_id) DO UPDATE SET bytes = bytes + ?";
    static const char *const src[2] = { "UPDATE log_stats SET src_out = ? WHERE job_id = ?",
                                        "UPDATE log_stats SET src_err = ? WHERE job_id = ?" };
    sqlite3_stmt *st;
    int64_t seq, bytes = 0, added = 0;
    int rc;
    *first_drop = 0;
    if (n == 0)
        return 0;
    kd__lock(cat);
    if ((rc = kd__exec(cat, "BEGIN IMMEDIATE")) < 0)
        goto out;
    if ((st = kd__stmt(cat, next)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, job_id);
    if (sqlite3_step(st) != SQLITE_ROW)
        goto fail;
    seq = sqlite3_column_int64(st, 0);
    for (size_t i = 0; i < n; i++) {
        if ((st = kd__stmt(cat, ins)) == NULL)
            goto fail;
        sqlite3_bind_int64(st, 1, job_id);
        sqlite3_bind_int64(st, 2, seq + (int64_t)i);
        sqlite3_bind_int64(st, 3, lines[i].time_ms);
        sqlite3_bind_int(st, 4, lines[i].stream);
        sqlite3_bind_text(st, 5, lines[i].text, (int)lines[i].len, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE)
            goto fail;
        {
            size_t cont = 0;
            for (size_t k = 0; k < lines[i].len; k++)
                cont += ((unsigned char)lines[i].text[k] & 0xC0) == 0x80;
            added += LINE_COST(lines[i].len, cont);
        }
    }
    if ((st = kd__stmt(cat, add)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, added);
    sqlite3_bind_int64(st, 3, added);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    if (src_off >= 0) {
        if ((st = kd__stmt(cat, src[src_stream == KESTREL_LOG_STDERR])) == NULL)
            goto fail;
        sqlite3_bind_int64(st, 1, src_off);
        sqlite3_bind_int64(st, 2, job_id);
        if (sqlite3_step(st) != SQLITE_DONE)
            goto fail;
    }
    if ((st = kd__stmt(cat, used)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, job_id);
    if (sqlite3_step(st) == SQLITE_ROW)
        bytes = sqlite3_column_int64(st, 0);
    if (max_bytes > 0 && bytes > max_bytes && cap_log(cat, job_id, max_bytes, bytes, first_drop) < 0)
        goto fail;
    if ((rc = kd__exec(cat, "COMMIT")) == 0)
        goto out;
fail:
    rc = kd__sql_fail(cat, "append log");
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    return rc;
}

int kd_catalog_log_read(kd_catalog *cat, int64_t job_id, int64_t offset, int limit, Kestrel__V1__LogChunk *out)
{
    static const char *const sql =
        "SELECT seq, time_ms, stream, text FROM logs WHERE job_id = ? AND seq >= ? ORDER BY seq LIMIT ?";
    sqlite3_stmt *st;
    int rc = 0;
    out->next_offset = offset;
    if ((out->lines = calloc((size_t)limit, sizeof(*out->lines))) == NULL)
        return kestrel__error_oom();
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
        goto out;
    }
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, offset);
    sqlite3_bind_int(st, 3, limit);
    while (sqlite3_step(st) == SQLITE_ROW) {
        Kestrel__V1__LogLine *l = malloc(sizeof(*l));
        const unsigned char *t = sqlite3_column_text(st, 3);
        if (l == NULL) {
            rc = kestrel__error_oom();
            goto out;
        }
        kestrel__v1__log_line__init(l);
        out->lines[out->n_lines++] = l;
        l->offset = sqlite3_column_int64(st, 0);
        l->time_ms = sqlite3_column_int64(st, 1);
        l->stream = (Kestrel__V1__LogStream)sqlite3_column_int(st, 2);
        if ((l->text = kestrel__strdup(t ? (const char *)t : "")) == NULL) {
            l->text = (char *)protobuf_c_empty_string;
            rc = kestrel__error_oom();
            goto out;
        }
        out->next_offset = l->offset + 1;
    }
out:
    kd__unlock(cat);
    return rc;
}

int64_t kd_catalog_log_bytes(kd_catalog *cat, int64_t job_id, int stream)
{
    static const char *const sql =
        "SELECT COALESCE(SUM(length(CAST(text AS BLOB)) + 1), 0) FROM logs WHERE job_id = ? AND stream = ?";
    sqlite3_stmt *st;
    int64_t n = 0;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) != NULL) {
        sqlite3_bind_int64(st, 1, job_id);
        sqlite3_bind_int(st, 2, stream);
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    kd__unlock(cat);
    return n;
}

int64_t kd_catalog_log_source(kd_catalog *cat, int64_t job_id, int stream)
{
    static const char *const sql[2] = { "SELECT src_out FROM log_stats WHERE job_id = ?",
                                        "SELECT src_err FROM log_stats WHERE job_id = ?" };
    sqlite3_stmt *st;
    int64_t off = -1;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql[stream == KESTREL_LOG_STDERR])) != NULL) {
        sqlite3_bind_int64(st, 1, job_id);
        if (sqlite3_step(st) == SQLITE_ROW)
            off = sqlite3_column_int64(st, 0);
    }
    kd__unlock(cat);
    return off;
}
