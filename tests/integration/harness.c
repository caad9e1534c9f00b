/* tests/integration/harness.c - process control for the real kestreld, and raw HTTP. */
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int read_line(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    if (!fgets(out, (int)n, f)) {
        fclose(f);
        return -1;
    }
    fclose(f);
    out[strcspn(out, "\r\n")] = '\0';
    return 0;
}

int kd_daemon_start(kd_daemon *d, const char *dir, const char *const *extra)
{
    char portfile[256], tokfile[256], portbuf[32];
    const char *argv[32];
    int n = 0;
    if (dir) {
        if (dir != d->dir)
            snprintf(d->dir, sizeof(d->dir), "%s", dir);
    } else {
        snprintf(d->dir, sizeof(d->dir), "/tmp/kestrel-it-XXXXXX");
        if (mkdtemp(d->dir) == NULL)
            return -1;
        chmod(d->dir, 0711);   /* kestreld as root runs jobs as other accounts: they pass through to DATA/jobs */
    }
    snprintf(portfile, sizeof(portfile), "%s/port", d->dir);
    snprintf(tokfile, sizeof(tokfile), "%s/data/admin.token", d->dir);
    unlink(portfile);
    argv[n++] = KESTRELD_PATH;
    argv[n++] = "--port=0";
    argv[n++] = "--data-dir";
    argv[n++] = NULL;   /* filled below */
    argv[n++] = "--port-file";
    argv[n++] = portfile;
    for (size_t i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    {
        char data[200];
        snprintf(data, sizeof(data), "%s/data", d->dir);
        argv[3] = data;
        d->pid = fork();
        if (d->pid == 0) {
            char log[256];
            FILE *f;
            snprintf(log, sizeof(log), "%s/kestreld.log", d->dir);
            f = fopen(log, "a");
            if (f) {
                dup2(fileno(f), 2);
                fclose(f);
            }
            execv(argv[0], (char *const *)argv);
            _exit(127);
        }
    }
    if (d->pid < 0)
        return -1;
    for (int i = 0; i < 500; i++) {   /* up to 10 s (sanitizer builds start slowly) */
        int status;
        if (read_line(portfile, portbuf, sizeof(portbuf)) == 0 && read_line(tokfile, d->token, sizeof(d->token)) == 0) {
            d->port = atoi(portbuf);
            snprintf(d->url, sizeof(d->url), "http://127.0.0.1:%d", d->port);
            return 0;
        }
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "kestreld exited early (status %d); see %s/kestreld.log\n", status, d->dir);
            return -1;
        }
        sleep_ms(20);
    }
    return -1;
}

int kd_daemon_stop(kd_daemon *d, int sig, long timeout_ms)
{
    int status;
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    for (long waited = 0; waited <= timeout_ms; waited += 20) {
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return status;
        }
        sleep_ms(20);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &status, 0);
    d->pid = 0;
    return -1;
}

void kd_daemon_cleanup(kd_daemon *d)
{
    char cmd[200];
    if (d->pid > 0)
        kd_daemon_stop(d, SIGKILL, 5000);
    if (getenv("KESTREL_KEEP_TEST_DIRS") == NULL && d->dir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", d->dir);
    }
}

kestrel_client *kd_client(const kd_daemon *d, const char *token)
{
    kestrel_client_options o = KESTREL_CLIENT_OPTIONS_INIT;
    kestrel_client *c = NULL;
    o.token = token ? token : d->token;
    if (kestrel_client_new(&c, d->url, &o) < 0)
        return NULL;
    return c;
}

static size_t collect(char *p, size_t size, size_t n, void *user)
{
    char **body = user;
    size_t old = *body ? strlen(*body) : 0;
    char *nb = realloc(*body, old + size * n + 1);
    if (nb == NULL)
        return 0;
    memcpy(nb + old, p, size * n);
    nb[old + size * n] = '\0';
    *body = nb;
    return size * n;
}

long kd_http(const kd_daemon *d, const char *method, const char *path, const char *token, const char *ctype,
             const void *data, size_t len, char **body)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char url[512], auth[256], ct[128];
    char *sink = NULL;
    long status = -1;
    snprintf(url, sizeof(url), "%s%s", d->url, path);
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    if (ctype) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
        hdrs = curl_slist_append(hdrs, ct);
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (data) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, data);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body ? body : &sink);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    free(sink);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return status;
}

int kd_make_user(const kd_daemon *d, const char *user, char *token, size_t n)
{
    char req[128], *body = NULL, *p, *e;
    long st;
    snprintf(req, sizeof(req), "{\"user\":\"%s\"}", user);
    st = kd_http(d, "POST", "/api/v1/tokens", d->token, "application/json", req, strlen(req), &body);
    if (st != 201 || body == NULL || (p = strstr(body, "\"token\":\"")) == NULL) {
        free(body);
        return -1;
    }
    p += 9;
    e = strchr(p, '"');
    snprintf(token, n, "%.*s", (int)(e - p), p);
    free(body);
    return 0;
}

int kd_count_jobs(const kd_daemon *d)
{
    char *body = NULL;
    int count = 0;
    long st = kd_http(d, "GET", "/api/v1/jobs?page_size=1000", d->token, NULL, NULL, 0, &body);
    if (st != 200) {
        free(body);
        return -1;
    }
    for (char *p = body; (p = strstr(p, "\"argv\":")) != NULL; p++)
        count++;
    free(body);
    return count;
}
