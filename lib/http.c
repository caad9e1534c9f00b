/* lib/http.c - requests to kestreld: protobuf bodies, retries, error mapping. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "client.h"
#include "http.h"

int kestrel__http_status_code(long status)
{
    switch (status) {
    case 400: case 422: return KESTREL_EINVALID;
    case 401: case 403: return KESTREL_EAUTH;
    case 404: return KESTREL_ENOTFOUND;
    case 409: return KESTREL_EEXISTS;
    case 408: case 504: return KESTREL_ETIMEOUT;
    case 413: return KESTREL_ETOOLARGE;
    case 507: return KESTREL_EIO;   /* kestreld's disk is full or at its floor: as a file:// store's write says */
    default: return KESTREL_EHTTP;
    }
}

int kestrel__query_add(kestrel_buf *path, const char *key, const char *value)
{
    char *esc = curl_easy_escape(NULL, value, 0);
    int rc;
    if (esc == NULL)
        return kestrel__error_oom();
    rc = kestrel__buf_printf(path, "%c%s=%s", strchr(path->ptr ? path->ptr : "", '?') ? '&' : '?', key, esc);
    curl_free(esc);
    return rc;
}

/* Where an answer goes: memory, or (a 2xx one, when the request says so) a file. */
/* The most an answer may hold: an input has a bound. In memory, far above any kestreld gives there
 * (a listing, a job's log page); into a file (a pull's manifest), kestreld's largest --max-manifest
 * (4 GiB) and what it adds to a manifest it answers. */
#define ANSWER_MAX (1ull << 30)
#define ANSWER_FILE_MAX ((4ull << 30) + (64ull << 20))
/* What decoding an answer may allocate: 64 MiB and 8 times its bytes. kestreld's answers take at most
 * about 4 times theirs (a page of jobs, a dataset's manifest); a hostile 16 MiB list of empty jobs
 * took 2 GB (128 times), and a 1 GiB one would have taken 128 GB (a hostile test). */
#define DECODE_BASE (64ull << 20)
#define DECODE_TIMES 8

#define ERROR_ANSWER_MAX (64u << 10)   /* what an error answer may bring */

typedef struct {
    uint64_t len;
    const char *what;
    int refused;
} charge_ctx;

static int answer_charge(void *ctx, uint64_t cost)
{
    charge_ctx *c = ctx;
    if (cost <= DECODE_BASE + DECODE_TIMES * c->len)
        return 0;
    c->refused = 1;
    return kestrel__error_set(KESTREL_EPROTO, "oversized %s from server: its %llu bytes would take %llu MiB to "
                              "decode, past the %llu MiB this client gives an answer of that size: refused", c->what,
                              (unsigned long long)c->len, (unsigned long long)(cost >> 20),
                              (unsigned long long)((DECODE_BASE + DECODE_TIMES * c->len) >> 20));
}

typedef struct {
    kestrel_buf *resp;
    CURL *h;
    int fd;          /* -1: memory */
    int64_t at;      /* the file's bytes so far */
    int err;         /* errno of a failed write */
    uint64_t over;   /* the bound it went past (its Content-Length said so, or its bytes did) */
} answer;

/* 1 (a->over set) when the answer would go past its bound with `more` bytes. */
static int answer_too_big(answer *a, int to_file, size_t more)
{
    uint64_t max = to_file ? ANSWER_FILE_MAX : ANSWER_MAX, have = to_file ? (uint64_t)a->at : a->resp->size;
    curl_off_t said = -1;
    curl_easy_getinfo(a->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &said);
    if ((said > 0 && (uint64_t)said > max) || have + more > max)
        a->over = max;
    return a->over != 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *payload)
{
    answer *a = payload;
    long status = 0;
    int to_file;
    curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300) {   /* an error's words: its first ERROR_ANSWER_MAX bytes, the rest let go (a review:
                            * a hostile 4xx of 1 GiB was decoded whole, past the charge below) */
        size_t room = a->resp->size < ERROR_ANSWER_MAX ? ERROR_ANSWER_MAX - a->resp->size : 0;
        if (room && kestrel__buf_put(a->resp, data, size * n < room ? size * n : room) < 0)
            return 0;
        return size * n;
    }
    to_file = a->fd >= 0 && status >= 200 && status < 300;
    if (answer_too_big(a, to_file, size * n))
        return 0;
    if (!to_file)
        return kestrel__buf_put(a->resp, data, size * n) < 0 ? 0 : size * n;
    if (kestrel__pwrite_all(a->fd, data, size * n, a->at) < 0) {
        a->err = errno;
        return 0;
    }
    a->at += (int64_t)(size * n);
    return size * n;
}

/* A body sent as it is read: the packed message, then the request's tail. */
typedef struct {
    const kestrel_buf *head;
    const kestrel__request *req;
    int64_t at;
    int rc;   /* the tail's failure */
} body_reader;

static size_t on_read(char *buf, size_t size, size_t n, void *payload)
{
    body_reader *r = payload;
    int64_t total = (int64_t)r->head->size + r->req->tail_size, got;
    size_t want = size * n;
    if (r->at >= total)
        return 0;
    if (r->at < (int64_t)r->head->size) {
        got = (int64_t)r->head->size - r->at < (int64_t)want ? (int64_t)r->head->size - r->at : (int64_t)want;
        memcpy(buf, r->head->ptr + r->at, (size_t)got);
    } else {
        int64_t left = total - r->at;
        got = r->req->tail(r->req->tail_ctx, r->at - (int64_t)r->head->size, buf,
                           left < (int64_t)want ? (size_t)left : want);
        if (got <= 0) {   /* failed, or shorter than it said */
            r->rc = got < 0 ? (int)got : kestrel__error_set(KESTREL_EIO, "the body of %s %s ended early",
                                                            r->req->method, r->req->path);
            return CURL_READFUNC_ABORT;
        }
    }
    r->at += got;
    return (size_t)got;
}

static int on_seek(void *payload, curl_off_t offset, int origin)
{
    body_reader *r = payload;
    if (origin != SEEK_SET || offset < 0)
        return CURL_SEEKFUNC_CANTSEEK;
    r->at = (int64_t)offset;
    return CURL_SEEKFUNC_OK;
}

/* A request's stop hook, asked by curl as the request goes (its progress function). */
typedef struct {
    const kestrel__request *req;
    int rc;   /* what stop said */
} stopping;

static int on_progress(void *payload, curl_off_t dl_total, curl_off_t dl_now, curl_off_t ul_total, curl_off_t ul_now)
{
    stopping *st = payload;
    (void)dl_total;
    (void)dl_now;
    (void)ul_total;
    (void)ul_now;
    if (st->rc == 0)
        st->rc = st->req->stop(st->req->stop_ctx);
    return st->rc < 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

int kestrel__http_busy(long status, const kestrel_buf *body)
{
    return status == 503 && body->ptr && memmem(body->ptr, body->size, "unavailable", 11) != NULL;
}

/* Turn a non-2xx answer into an error record; the server's Error message wins. */
int kestrel__http_failure(long status, const char *ctype, const kestrel_buf *body)
{
    ProtobufCMessage *m = NULL;
    int code = kestrel__http_status_code(status);
    char msg[512];
    if (body->size && kestrel__wire_decode(&m, &kestrel__v1__error__descriptor, ctype, body->ptr, body->size) == 0) {
        const Kestrel__V1__Error *e = (const Kestrel__V1__Error *)m;
        snprintf(msg, sizeof(msg), "%s (HTTP %ld)", e->message[0] ? e->message : "server error", status);
        if (status >= 500 && !strcmp(e->code, "io_error"))   /* kestreld's own files or catalog failed (a
                                                              * stored manifest unreadable): as a file:// store's */
            code = KESTREL_EIO;
        protobuf_c_message_free_unpacked(m, NULL);
    } else {
        snprintf(msg, sizeof(msg), "server answered HTTP %ld", status);
    }
    return kestrel__error_set_http(code, (int)status, msg);
}

void kestrel__http_tls(void *handle)
{
    CURL *h = handle;
    const char *ca = getenv("KESTREL_CA_FILE");
    /* libcurl verifies peer and host name by default; never turned off here */
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca && *ca)
        curl_easy_setopt(h, CURLOPT_CAINFO, ca);
}

/* A body of at least this many bytes goes with "Expect: 100-continue" (kestrel__http_headers). */
#define EXPECT_MIN (64 << 10)

struct curl_slist *kestrel__http_headers(struct kestrel_client *c, const char *accept, const char *content_type,
                                         int64_t body_bytes)
{
    struct curl_slist *h = NULL;
    char ct[128];
    snprintf(ct, sizeof(ct), "Accept: %s", accept);
    h = curl_slist_append(h, ct);
    if (content_type) {   /* none for a GET (it sent "Content-Type: (null)", glibc's word for NULL) */
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        h = curl_slist_append(h, ct);
    }
    h = curl_slist_append(h, body_bytes >= EXPECT_MIN ? "Expect: 100-continue" : "Expect:");
    if (c->auth_header)
        h = curl_slist_append(h, c->auth_header);
    return h;
}

#define BUSY_RETRIES 8   /* after 0.1 s, 0.2 s, ... 12.8 s with the default backoff */

int kestrel__http_call(ProtobufCMessage **out, struct kestrel_client *c, const kestrel__request *req)
{
    kestrel_buf url = KESTREL_BUF_INIT, body = KESTREL_BUF_INIT, resp = KESTREL_BUF_INIT;
    struct curl_slist *hdrs = NULL;
    int retries = c->opts.max_retries == 0 ? 3 : (c->opts.max_retries < 0 ? 0 : c->opts.max_retries);
    long backoff = c->opts.retry_backoff_ms ? c->opts.retry_backoff_ms : 100;
    long most = backoff > 0 && backoff <= LONG_MAX / 128 ? backoff * 128 : backoff;   /* never overflows */
    int busied = 0, failed = 0;   /* tries answered busy, and failed otherwise: each kind has its own
                                   * count (a review: a reset after three busy answers was the last
                                   * of a chunk query's tries, as a pack's was in CI) */
    long timeout = (c->opts.timeout_ms ? c->opts.timeout_ms : 60000) + req->extra_timeout_ms;
    int rc, unknown = 0;   /* a try may have been done by the server, its answer lost */
    int timed_out = 0;
    int64_t body_bytes;   /* the packed message and the tail */

    if (out)
        *out = NULL;
    if (req->outcome_unknown)
        *req->outcome_unknown = 0;
    if (c->store_root)
        return kestrel__error_set(KESTREL_EUNSUPPORTED, "%s needs a kestreld (http:// or https://), not a file:// repository",
                                  req->path);
    if ((rc = kestrel__buf_printf(&url, "%s%s", c->url, req->path)) < 0 ||
        (req->body && (rc = kestrel__wire_pack(&body, req->body)) < 0))
        goto done;
    body_bytes = (int64_t)body.size + (req->tail ? req->tail_size : 0);
    if ((hdrs = kestrel__http_headers(c, req->raw_json ? KESTREL__CT_JSON : KESTREL__CT_PROTOBUF, KESTREL__CT_PROTOBUF,
                                      body_bytes)) == NULL) {
        rc = kestrel__error_oom();
        goto done;
    }

    for (;;) {
        CURL *h = c->curl;
        stopping st = { req, 0 };
        body_reader rd = { &body, req, 0, 0 };
        answer ans = { &resp, h, req->to_fd ? *req->to_fd : -1, 0, 0, 0 };
        int limit = retries, sent, *tried = &failed;
        CURLcode cc;
        long status = 0;
        char *ctype = NULL;

        resp.size = 0;
        if (ans.fd >= 0 && ftruncate(ans.fd, 0) < 0) {
            rc = kestrel__error_set(KESTREL_EIO, "cannot empty the file for the answer to %s: %s", req->path, strerror(errno));
            goto done;
        }
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, url.ptr);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
        if (!strcmp(req->method, "POST") || req->body) {
            curl_easy_setopt(h, CURLOPT_POST, 1L);
            if (req->tail) {
                curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
                curl_easy_setopt(h, CURLOPT_READDATA, &rd);
                curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
                curl_easy_setopt(h, CURLOPT_SEEKDATA, &rd);
            } else
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.ptr ? body.ptr : "");
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_bytes);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &ans);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->opts.connect_timeout_ms ? c->opts.connect_timeout_ms : 10000L);
        if (ans.fd >= 0) {   /* a manifest, up to 4 GiB: a total of 60 s cut 108 MB at 1 MB/s (a hostile test) */
            curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, (long)KESTREL__SLOW_BYTES_S);
            curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, timeout / 1000 > 1 ? timeout / 1000 : 1L);
        } else {
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
        }
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
        if (req->outcome_unknown)   /* never sent again by libcurl itself, its counts reset (http.h) */
            curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(h, CURLOPT_USERAGENT, "libkestrel/" KESTREL_VERSION_STRING);
        kestrel__http_tls(h);
        if (req->stop) {
            curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
            curl_easy_setopt(h, CURLOPT_XFERINFODATA, &st);
            curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        }

        cc = curl_easy_perform(h);
        {   /* the whole request went out: the server may have acted on it, whatever came back */
            curl_off_t up = 0;
            long head = 0;
            curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &head);
            curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &up);
            sent = head > 0 && up >= (curl_off_t)body_bytes;
        }
        if (st.rc < 0 || rd.rc < 0) {   /* the caller's stop, or its body's failure: that error stands */
            rc = st.rc < 0 ? st.rc : rd.rc;
            unknown |= st.rc < 0 && sent;   /* stopped while the server had it */
            goto done;
        }
        if (ans.err) {
            rc = kestrel__error_set(KESTREL_EIO, "cannot write the answer to %s: %s", req->path, strerror(ans.err));
            goto done;
        }
        if (ans.over) {   /* a server's fault, or not a repository: never sent again */
            rc = kestrel__error_set(KESTREL_EPROTO, "the answer to %s %s is larger than %llu MiB, more than any "
                                    "kestreld sends: refused", req->method, req->path,
                                    (unsigned long long)(ans.over >> 20));
            goto done;
        }
        if (cc == CURLE_OK) {
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
            curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
            if (status >= 200 && status < 300) {
                if (req->raw_json) {
                    kestrel_buf_dispose(req->raw_json);
                    rc = kestrel__buf_put(req->raw_json, resp.ptr ? resp.ptr : "", resp.size);
                    goto done;
                }
                if (ans.fd >= 0) {   /* the caller reads it */
                    rc = ctype && strstr(ctype, "protobuf")
                             ? 0 : kestrel__error_set(KESTREL_EPROTO, "%s answered %s, not protobuf", req->path,
                                                      ctype ? ctype : "no content type");
                    goto done;
                }
                charge_ctx charge = { resp.size, req->response ? req->response->short_name : "", 0 };
                if (req->response && out)
                    rc = kestrel__wire_decode_charged(out, req->response, ctype, resp.ptr ? resp.ptr : "", resp.size,
                                                      answer_charge, &charge);
                else
                    rc = 0;
                if (rc < 0) {
                    if (!charge.refused)   /* the charge's own words stand as they are */
                        rc = kestrel__error_set(KESTREL_EPROTO, "malformed %s from server: %s",
                                                req->response->short_name, kestrel_error_last()->message);
                    unknown = 1;   /* done, its answer unreadable */
                }
                goto done;
            }
            rc = kestrel__http_failure(status, ctype, &resp);
            /* kestreld's 503 "unavailable" (its memory for requests spent) did nothing: any request
             * goes again, for about 25 s (a push's commit failed at once while its packs waited);
             * another 502, 503 or 504 (a proxy's may follow a forwarded request) only an idempotent one */
            if (kestrel__http_busy(status, &resp) && retries > 0) {
                limit = retries > BUSY_RETRIES ? retries : BUSY_RETRIES;
                tried = &busied;
            } else if (status == 502 || status == 503 || status == 504) {
                unknown |= sent;   /* a proxy's: it may have forwarded the request */
                if (!req->idempotent)
                    goto done;
            } else {   /* refused (4xx: a try before it may still have been done), or failed partway (5xx) */
                unknown |= status >= 500 && sent;
                goto done;
            }
        } else if (cc == CURLE_OPERATION_TIMEDOUT) {
            rc = kestrel__error_set(KESTREL_ETIMEOUT, "%s %s: %s", req->method, req->path, curl_easy_strerror(cc));
            unknown |= sent;
            /* once: against a hung server a commit waits twice its timeout and the busy tries, not more */
            if (!(req->idempotent && req->patient) || timed_out++)
                goto done;
        } else {
            char msg[300];
            snprintf(msg, sizeof(msg), "%s %s: %s", req->method, c->url, curl_easy_strerror(cc));
            rc = kestrel__error_set_net((int)cc, msg);
            unknown |= sent;
            /* a request that never reached the server may always be retried */
            if (!req->idempotent && cc != CURLE_COULDNT_CONNECT && cc != CURLE_COULDNT_RESOLVE_HOST)
                goto done;
        }
        if (req->patient && retries > 0 && limit < BUSY_RETRIES)
            limit = BUSY_RETRIES;   /* about 25 s: a kestreld restarting, a proxy's blip */
        if (++*tried > limit)
            goto done;
        for (long left = backoff; left > 0; left -= 100) {   /* a stop is seen within 0.1 s: not retried */
            int r;
            sleep_ms(left < 100 ? left : 100);
            if (req->stop && (r = req->stop(req->stop_ctx)) < 0) {
                rc = r;
                goto done;
            }
        }
        if (backoff < most)   /* 12.8 s at most with the default, however many tries of both kinds */
            backoff *= 2;
    }
done:
    if (req->outcome_unknown)
        *req->outcome_unknown = rc < 0 && unknown;
    curl_slist_free_all(hdrs);
    kestrel_buf_dispose(&url);
    kestrel_buf_dispose(&body);
    kestrel_buf_dispose(&resp);
    return rc;
}
