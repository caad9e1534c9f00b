/* lib/job/logs.c - reading and following a job's log. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "job_priv.h"
#include "options.h"

/* How long one follow request may be held by the server. */
#define FOLLOW_POLL_MS 20000L

int kestrel_job_logs(int64_t *next_out, kestrel_client *c, int64_t id, const kestrel_logs_options *in,
                     kestrel_log_line_cb cb, void *payload)
{
    kestrel_logs_options o;
    int64_t offset, deadline;
    int rc;

    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__logs_opts_load(&o, in)) < 0)
        return rc;
    if (id <= 0 || o.offset < 0)
        return kestrel__error_set(KESTREL_EINVALID, "job id must be positive and offset non-negative");
    offset = o.offset;
    deadline = o.timeout_ms > 0 ? kestrel__now_ms() + o.timeout_ms : INT64_MAX;
    for (long pause = 0;;) {
        char path[160];
        long wait = 0;
        kestrel__request req = { "GET", path, NULL, &kestrel__v1__log_chunk__descriptor, 1, 0 };
        ProtobufCMessage *m;
        const Kestrel__V1__LogChunk *chunk;
        int64_t started = kestrel__now_ms();
        int eof;
        size_t n;

        if (o.follow) {
            int64_t left = deadline - started;
            wait = left > FOLLOW_POLL_MS ? FOLLOW_POLL_MS : (long)(left < 0 ? 0 : left);
        }
        snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/logs?offset=%" PRId64 "&wait_ms=%ld", id, offset, wait);
        req.extra_timeout_ms = wait;
        if ((rc = kestrel__http_call(&m, c, &req)) < 0)
            break;
        chunk = (const Kestrel__V1__LogChunk *)m;
        for (size_t i = 0; i < chunk->n_lines && rc == 0; i++) {
            const Kestrel__V1__LogLine *l = chunk->lines[i];
            kestrel_log_line line = { 1, l->offset, l->time_ms, (int)l->stream, l->text, strlen(l->text) };
            int r;
            if (l->offset < offset || l->offset == INT64_MAX) {   /* each line once, the log only ever forward */
                rc = kestrel__error_set(KESTREL_EPROTO, "the server sent log line %" PRId64 " where line %" PRId64
                                        " or later was asked for", l->offset, offset);
                break;
            }
            r = cb ? cb(&line, payload) : 0;
            if (r == KESTREL_EUSER)
                rc = KESTREL_EUSER;
            else if (r != 0)
                rc = kestrel__error_set(KESTREL_ECANCELLED, "log callback stopped the transfer");
            else
                offset = l->offset + 1;
        }
        if (rc == 0 && chunk->next_offset > offset && chunk->next_offset < INT64_MAX)
            offset = chunk->next_offset;
        eof = chunk->eof;
        n = chunk->n_lines;
        protobuf_c_message_free_unpacked(m, NULL);
        if (rc < 0)
            break;
        if (!o.follow ? n == 0 : eof)
            break;
        /* while lines keep coming too: a caller that gave a timeout gets control back within it */
        if (o.follow && kestrel__now_ms() >= deadline) {
            rc = kestrel__error_set(KESTREL_ETIMEOUT, "job %" PRId64 " still running after %ld ms", id, o.timeout_ms);
            break;
        }
        if (o.follow)
            kestrel__poll_pace(started, wait, n == 0, &pause, deadline);
    }
    if (next_out)
        *next_out = offset;
    return rc;
}
