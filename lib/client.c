/* lib/client.c - client handles. */
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "options.h"

int kestrel_client_new(kestrel_client **out, const char *url, const kestrel_client_options *opts)
{
    kestrel_client *c;
    const char *token;
    int rc;

    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    if ((rc = kestrel__require_init()) < 0)
        return rc;
    if (url == NULL)
        url = getenv("KESTREL_URL");
    if (url == NULL || *url == '\0')
        return kestrel__error_set(KESTREL_EINVALID, "no server URL given and KESTREL_URL is not set");
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8) && strncmp(url, "file:///", 8))
        return kestrel__error_set(KESTREL_EINVALID,
                                  "unsupported URL '%.200s' (expected http://, https:// or file:///abs/path)", url);
    if (!kestrel__text_is_clean(url, 2048))
        return kestrel__error_set(KESTREL_EINVALID, "URL contains control characters or is too long");
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return kestrel__error_oom();
    if ((rc = kestrel__client_opts_load(&c->opts, opts)) < 0) {
        free(c);
        return rc;
    }
    token = (opts && c->opts.token) ? c->opts.token : getenv("KESTREL_TOKEN");
    c->opts.token = NULL;   /* never keep a pointer into caller memory */
    if (token && *token) {
        if (!kestrel__text_is_clean(token, 1024)) {
            free(c);
            return kestrel__error_set(KESTREL_EINVALID, "token contains control characters or is too long");
        }
        if ((c->auth_header = malloc(strlen(token) + 32)) != NULL)
            sprintf(c->auth_header, "Authorization: Bearer %s", token);
    }
    c->url = kestrel__strdup(url);
    if (!strncmp(url, "file://", 7) && (c->store_root = kestrel__strdup(url + 7)) == NULL) {
        c->magic = KESTREL__MAGIC_CLIENT;
        kestrel_client_free(c);
        return kestrel__error_oom();
    }
    c->curl = curl_easy_init();
    if (c->url == NULL || c->curl == NULL || (token && *token && c->auth_header == NULL)) {
        c->magic = KESTREL__MAGIC_CLIENT;
        kestrel_client_free(c);
        return kestrel__error_oom();
    }
    /* strip trailing slashes so that paths join cleanly */
    for (size_t n = strlen(c->url); n > 0 && c->url[n - 1] == '/'; n--)
        c->url[n - 1] = '\0';
    c->magic = KESTREL__MAGIC_CLIENT;
    *out = c;
    return 0;
}

void kestrel_client_free(kestrel_client *c)
{
    if (c == NULL || c->magic != KESTREL__MAGIC_CLIENT)
        return;
    c->magic = KESTREL__MAGIC_DEAD;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    if (c->auth_header) {
        memset(c->auth_header, 0, strlen(c->auth_header));
        free(c->auth_header);
    }
    free(c->url);
    free(c->store_root);
    free(c);
}

const char *kestrel_client_url(const kestrel_client *c)
{
    return (c && c->magic == KESTREL__MAGIC_CLIENT) ? c->url : NULL;
}

int kestrel_client_ping(kestrel_buf *version_out, kestrel_client *c)
{
    kestrel__request req = { "GET", "/healthz", NULL, &kestrel__v1__health__descriptor, 1, 0 };
    ProtobufCMessage *m;
    int rc;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    if (version_out)
        rc = kestrel__buf_puts(version_out, ((Kestrel__V1__Health *)m)->version);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}
