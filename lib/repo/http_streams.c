/* lib/repo/http_streams.c - the HTTP transport's connection pool (http_streams.h). */
#include <stdio.h>
#include <string.h>
#include "http.h"
#include "http_streams.h"

typedef kestrel__http_transport http;
typedef kestrel__stream stream;
typedef kestrel__stream_start stream_start;
typedef kestrel__stream_end stream_end;
typedef kestrel__stream_release stream_release;

long kestrel__stream_status(const stream *s)
{
    long status = 0;
    curl_easy_getinfo(s->e, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

size_t kestrel__stream_collect(char *data, size_t size, size_t n, void *payload)
{
    stream *s = payload;
    long status = kestrel__stream_status(s);
    size_t cap = s->max;
    if ((status < 200 || status >= 300) && cap < ERROR_MAX)
        cap = ERROR_MAX;
    if (size * n > cap - s->resp.size) {   /* more than asked for: the transfer fails, nothing is kept */
        s->over = status >= 200 && status < 300;
        return 0;
    }
    return kestrel__buf_put(&s->resp, data, size * n) < 0 ? 0 : size * n;
}

int kestrel__stream_open(http *h, stream *s, const char *url, const char *content_type, size_t max, int64_t body_bytes)
{
    s->resp.size = 0;
    s->max = max;
    s->over = 0;
    if ((s->e = curl_easy_init()) == NULL || (s->hdrs = kestrel__http_headers(h->c, KESTREL__CT_PROTOBUF, content_type, body_bytes)) == NULL) {
        if (s->e)
            curl_easy_cleanup(s->e);
        s->e = NULL;
        return kestrel__error_oom();
    }
    curl_easy_setopt(s->e, CURLOPT_URL, url);
    curl_easy_setopt(s->e, CURLOPT_HTTPHEADER, s->hdrs);
    curl_easy_setopt(s->e, CURLOPT_CONNECTTIMEOUT_MS,
                     h->c->opts.connect_timeout_ms ? h->c->opts.connect_timeout_ms : 10000L);
    curl_easy_setopt(s->e, CURLOPT_LOW_SPEED_LIMIT, (long)KESTREL__SLOW_BYTES_S);
    curl_easy_setopt(s->e, CURLOPT_LOW_SPEED_TIME, (long)STALL_S);
    curl_easy_setopt(s->e, CURLOPT_WRITEFUNCTION, kestrel__stream_collect);
    curl_easy_setopt(s->e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->e, CURLOPT_NOSIGNAL, 1L);
    kestrel__http_tls(s->e);
    return 0;
}

int kestrel__stream_result(CURL *e, CURLcode cc, kestrel_buf *resp, const char *what)
{
    long status = 0;
    char *ctype = NULL;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ctype);
    if (cc != CURLE_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s: %s", what, curl_easy_strerror(cc));
        return cc == CURLE_ABORTED_BY_CALLBACK ? kestrel__error_set(KESTREL_EIO, "%s: a file changed while it was pushed", what)
                                               : kestrel__error_set_net((int)cc, msg);
    }
    return (status < 200 || status >= 300) ? kestrel__http_failure(status, ctype, resp) : 0;
}

static void stream_drop(http *h, stream *s, stream_release release)
{
    if (s->e) {
        curl_multi_remove_handle(h->multi, s->e);
        curl_easy_cleanup(s->e);
        if (release && s->job)
            release(s);
    }
    curl_slist_free_all(s->hdrs);
    s->e = NULL;
    s->hdrs = NULL;
    s->job = NULL;
    s->resp.size = 0;
}

int kestrel__http_tick(void *t)
{
    return kestrel__progress_report(((kestrel__transport *)t)->tick, 0);
}

int kestrel__streams_run(http *h, stream_start start, stream_end end, stream_release release, void *ctx)
{
    stream st[STREAMS];
    int rc = 0, more = 1;
    memset(st, 0, sizeof(st));
    for (;;) {
        int active = 0, running = 0, later = 0;
        CURLMsg *msg;
        int left;
        for (int i = 0; i < STREAMS && rc == 0; i++) {
            if (!st[i].e && more && !later) {
                int r = start(ctx, h, &st[i]);
                if (r < 0)
                    rc = r;
                else if (r == 0)
                    more = 0;
                else if (r == 2)
                    later = 1;   /* nothing to start for now */
                else if (curl_multi_add_handle(h->multi, st[i].e) != CURLM_OK) {
                    stream_drop(h, &st[i], release);
                    rc = kestrel__error_oom();
                }
            }
            active += st[i].e != NULL;
        }
        if (rc < 0 || (active == 0 && !later))
            break;
        curl_multi_perform(h->multi, &running);
        while ((msg = curl_multi_info_read(h->multi, &left)) != NULL) {
            int i;
            if (msg->msg != CURLMSG_DONE)
                continue;
            for (i = 0; i < STREAMS && st[i].e != msg->easy_handle; i++)
                ;
            if (i == STREAMS)
                continue;
            if (rc == 0) {
                rc = end(ctx, &st[i], msg->data.result);
                st[i].job = NULL;   /* end has it */
            }
            stream_drop(h, &st[i], release);
        }
        if (rc < 0)
            break;
        if (running || later)   /* later and nothing running: a pack waits to be sent again */
            curl_multi_poll(h->multi, NULL, 0, running ? 100 : 20, NULL);
        if (h->base.tick && (rc = kestrel__http_tick(h)) < 0)   /* stopped, though nothing moved */
            break;
    }
    for (int i = 0; i < STREAMS; i++) {   /* on an error: stop the others */
        stream_drop(h, &st[i], release);
        kestrel_buf_dispose(&st[i].resp);
    }
    return rc;
}
