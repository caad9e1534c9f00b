/* server/alerts.c - kestreld's own alerts: recorded on the job (GET /api/v1/alerts, kestrel
 * alerts) and POSTed to --webhook as the Alert message's JSON, signed with HMAC-SHA256:
 *   X-Kestrel-Signature: t=UNIX_SECONDS,v1=HEX(HMAC(secret, "UNIX_SECONDS." + body))
 * (the timestamp is signed too, so a receiver can refuse replays). A delivery thread retries a
 * failed POST (no answer, or a status other than 2xx) with backoff, 1 s doubling to 5 minutes, 12
 * tries in all; the state is in the catalog, so a restart goes on where it stopped. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "alerts.h"
#include "store.h"
#include "wire.h"
#include "worker.h"

#define MAX_TRIES 12
#define BACKOFF_MAX_MS 300000
#define SECRET_MAX 256

struct kd_alerts {
    kd_engine *e;
    kd_worker w;
    atomic_int quit;           /* stopping: no new POST (a tick in progress ends after the current one) */
    char url[2048];
    unsigned char secret[SECRET_MAX];
    size_t secret_len;
};

void kd_engine_alert(kd_engine *e, int64_t job_id, const char *kind, const char *severity, const char *message)
{
    struct kd_alerts *a = e->alerts;
    if (kd_catalog_alert_add(e->cat, job_id, kestrel__now_ms(), kind, severity, message, a ? 0 : 3) < 0) {
        fprintf(stderr, "kestreld: job %lld: alert: %s\n", (long long)job_id, kestrel_error_last()->message);
        return;
    }
    {   /* the message quotes a job's line: an operator's `tail -f` of this log must not obey it */
        char *shown = kestrel__strdup(message);
        for (unsigned char *p = (unsigned char *)shown; p && *p; p++)
            if (*p < 0x20 || *p == 0x7f)
                *p = '?';
            else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {   /* C1: both its bytes */
                p[0] = p[1] = '?';
                p++;
            }
        fprintf(stderr, "kestreld: job %lld: alert %s (%s): %s\n", (long long)job_id, kind, severity,
                shown ? shown : "");
        free(shown);
    }
    if (a)
        kd_worker_kick(&a->w);
}

static size_t discard(char *p, size_t size, size_t n, void *u)
{
    (void)p; (void)u;
    return size * n;
}

/* One POST: 1 on a 2xx answer. */
static int post(struct kd_alerts *a, const Kestrel__V1__Alert *al)
{
    kestrel_buf body = KESTREL_BUF_INIT;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    char sig[64 + 2 * EVP_MAX_MD_SIZE + 32], ts[32];
    struct curl_slist *h = NULL;
    CURL *c;
    long status = 0;
    int ok = 0;
    if (kestrel__wire_encode(&body, &al->base, 1) < 0)
        return 0;
    snprintf(ts, sizeof(ts), "%lld", (long long)(kestrel__now_ms() / 1000));
    {
        kestrel_buf signed_ = KESTREL_BUF_INIT;
        if (kestrel__buf_printf(&signed_, "%s.", ts) == 0 && kestrel__buf_put(&signed_, body.ptr, body.size) == 0)
            HMAC(EVP_sha256(), a->secret, (int)a->secret_len, (const unsigned char *)signed_.ptr, signed_.size, mac,
                 &maclen);
        kestrel_buf_dispose(&signed_);
    }
    snprintf(sig, sizeof(sig), "X-Kestrel-Signature: t=%s,v1=", ts);
    kestrel__hex(mac, maclen, sig + strlen(sig));   /* sig has room for EVP_MAX_MD_SIZE bytes in hex */
    if ((c = curl_easy_init()) != NULL) {
        h = curl_slist_append(h, "Content-Type: application/json");
        h = curl_slist_append(h, sig);
        curl_easy_setopt(c, CURLOPT_URL, a->url);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.ptr ? body.ptr : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body.size);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);   /* a stop waits for at most one */
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
        if (curl_easy_perform(c) == CURLE_OK && curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK)
            ok = status >= 200 && status < 300;
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
    }
    kestrel_buf_dispose(&body);
    return ok;
}

static void deliver_due(void *ctx)
{
    struct kd_alerts *a = ctx;
    Kestrel__V1__AlertList *l = NULL;
    int64_t now = kestrel__now_ms();
    if (kd_catalog_alerts_due(a->e->cat, now, 32, &l) < 0)
        return;
    for (size_t i = 0; i < l->n_alerts && !atomic_load(&a->quit); i++) {
        const Kestrel__V1__Alert *al = l->alerts[i];
        int tries = 0;
        if (post(a, al)) {
            kd_catalog_alert_delivery(a->e->cat, al->id, 1, 0);
            continue;
        }
        kd__alert_tries(a->e->cat, al->id, &tries);
        if (tries + 1 >= MAX_TRIES) {
            fprintf(stderr, "kestreld: alert %lld: the webhook refused it %d times: given up\n", (long long)al->id,
                    MAX_TRIES);
            kd_catalog_alert_delivery(a->e->cat, al->id, 2, 0);
        } else {
            int64_t wait = 1000LL << (tries < 20 ? tries : 20);
            /* from the failure, not the batch's start: a slow batch made them due before newer ones */
            kd_catalog_alert_delivery(a->e->cat, al->id, 0,
                                      kestrel__now_ms() + (wait > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : wait));
        }
    }
    protobuf_c_message_free_unpacked(&l->base, NULL);
}

/* The secret: the file's bytes (trailing newline dropped), or a new random one written to
 * DATA/webhook.secret (0600) when the file is not given. */
static int load_secret(struct kd_alerts *a, const kd_config *cfg)
{
    char path[4200];
    int fd;
    ssize_t n;
    if (cfg->webhook_secret_file)
        snprintf(path, sizeof(path), "%s", cfg->webhook_secret_file);
    else
        snprintf(path, sizeof(path), "%s/webhook.secret", cfg->data_dir);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 && errno == ENOENT && !cfg->webhook_secret_file) {
        unsigned char raw[32];
        char hex[65];
        if (RAND_bytes(raw, sizeof(raw)) != 1)
            return kestrel__error_set(KESTREL_ERROR, "--webhook: no random bytes for a secret");
        kestrel__hex(raw, 32, hex);
        if (kestrel__write_file_atomic(path, hex, 64, 0600) < 0)
            return KESTREL_EIO;
        fprintf(stderr, "kestreld: --webhook: signing with a new secret in %s (give it to the receiver)\n", path);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return kestrel__error_set(KESTREL_EINVALID, "--webhook-secret-file %s: %s", path, strerror(errno));
    n = read(fd, a->secret, sizeof(a->secret));
    close(fd);
    while (n > 0 && (a->secret[n - 1] == '\n' || a->secret[n - 1] == '\r'))
        n--;
    if (n < 16 || n >= SECRET_MAX)
        return kestrel__error_set(KESTREL_EINVALID, "--webhook-secret-file %s: 16..255 bytes", path);
    a->secret_len = (size_t)n;
    return 0;
}

int kd_alerts_start(kd_engine *e)
{
    struct kd_alerts *a;
    const kd_config *cfg = e->cfg;
    if (cfg->webhook_url == NULL)
        return 0;
    if (strlen(cfg->webhook_url) >= sizeof(((struct kd_alerts *)0)->url))
        return kestrel__error_set(KESTREL_EINVALID, "--webhook: at most %zu bytes",
                                  sizeof(((struct kd_alerts *)0)->url) - 1);
    if (strncmp(cfg->webhook_url, "http://", 7) && strncmp(cfg->webhook_url, "https://", 8))
        return kestrel__error_set(KESTREL_EINVALID, "--webhook: an http:// or https:// URL, not '%s'", cfg->webhook_url);
    if ((a = calloc(1, sizeof(*a))) == NULL)
        return kestrel__error_oom();
    a->e = e;
    snprintf(a->url, sizeof(a->url), "%s", cfg->webhook_url);
    if (load_secret(a, cfg) < 0) {
        free(a);
        return KESTREL_EINVALID;
    }
    if (kd_worker_start(&a->w, 1000, deliver_due, a, "webhook") < 0) {
        free(a);
        return KESTREL_ERROR;
    }
    e->alerts = a;
    return 0;
}

void kd_alerts_stop(kd_engine *e)
{
    struct kd_alerts *a = e->alerts;
    if (a == NULL)
        return;
    atomic_store(&a->quit, 1);
    kd_worker_stop(&a->w);   /* alerts raised after this stay pending: sent after the next start */
}

void kd_alerts_free(kd_engine *e)
{
    struct kd_alerts *a = e->alerts;
    if (a == NULL)
        return;
    kd_worker_fini(&a->w);
    OPENSSL_cleanse(a->secret, sizeof(a->secret));
    free(a);
    e->alerts = NULL;
}
