/* lib/repo/get_json.c - kestrel_client_get_json for a file:// client (lib/console.c hands it over):
 * the repository's two listings, /api/v1/models (ModelList) and /api/v1/models/NAME/versions
 * (ManifestList), read from the store and written through the mapper kestreld answers with, the
 * same bytes, so that -o json prints one form whatever the repository. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include "store.h"
#include "transport.h"

/* The names (one a line, as the transport lists them) as the API's ModelList, in JSON. */
static int names_json(kestrel_buf *out, kestrel__transport *t)
{
    Kestrel__V1__ModelList list = KESTREL__V1__MODEL_LIST__INIT;
    kestrel_buf names = KESTREL_BUF_INIT;
    int rc = t->ops->list(t, &names);
    if (rc == 0 && (list.names = calloc(names.size / 2 + 2, sizeof(char *))) == NULL)
        rc = kestrel__error_oom();
    for (char *save = NULL, *n = rc == 0 && names.ptr ? strtok_r(names.ptr, "\n", &save) : NULL; n;
         n = strtok_r(NULL, "\n", &save))
        list.names[list.n_names++] = n;
    if (rc == 0 && (rc = kestrel__wire_encode(out, &list.base, 1)) == 0)
        rc = kestrel__buf_puts(out, "\n");   /* as kestreld's answer ends */
    free(list.names);
    kestrel_buf_dispose(&names);
    return rc;
}

int kestrel__repo_get_json(kestrel_buf *out, kestrel_client *c, const char *path)
{
    static const char models[] = "/api/v1/models", versions[] = "/versions";
    size_t n = strlen(path), mlen = sizeof(models) - 1, vlen = sizeof(versions) - 1;
    kestrel__transport *t = NULL;
    char name[256];
    int rc;
    kestrel_buf_dispose(out);
    if (!strcmp(path, models)) {
        if ((rc = kestrel__transport_open(&t, c)) == 0)
            rc = names_json(out, t);
    } else if (!strncmp(path, models, mlen) && path[mlen] == '/' && n > mlen + 1 + vlen &&
               !strcmp(path + n - vlen, versions) && n - mlen - 1 - vlen < sizeof(name)) {
        Kestrel__V1__ManifestList *l = NULL;
        char *raw = curl_easy_unescape(NULL, path + mlen + 1, (int)(n - mlen - 1 - vlen), NULL);   /* %2F and the like */
        snprintf(name, sizeof(name), "%s", raw ? raw : "");
        curl_free(raw);
        if (!kestrel__repo_name_valid(name))
            rc = kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s': " KESTREL__NAME_RULE, name);
        else if ((rc = kestrel__transport_open(&t, c)) == 0 && (rc = t->ops->versions(t, name, NULL, &l)) == 0)
            rc = kestrel__wire_encode(out, &l->base, 1);
        if (rc == 0)
            rc = kestrel__buf_puts(out, "\n");   /* as kestreld's answer ends */
        if (l)
            protobuf_c_message_free_unpacked(&l->base, NULL);
    } else {
        rc = kestrel__error_set(KESTREL_EUNSUPPORTED, "GET %.200s needs a kestreld (http:// or https://); a file:// "
                                "repository answers only /api/v1/models and /api/v1/models/NAME/versions", path);
    }
    kestrel__transport_close(t);
    return rc;
}
