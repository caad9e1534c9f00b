/* lib/repo/model_settings.c - a model's settings on a kestreld (who may read it). */
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "store.h"

int kestrel_model_set_visibility(kestrel_client *c, const char *name, const char *visibility)
{
    Kestrel__V1__ModelSettings m = KESTREL__V1__MODEL_SETTINGS__INIT;
    kestrel__request r = { "POST", NULL, &m.base, NULL, 1, 0 };
    kestrel_buf path = KESTREL_BUF_INIT;
    int rc;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (name == NULL || !kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%s'", name ? name : "");
    if (visibility == NULL || (strcmp(visibility, "all") && strcmp(visibility, "team") && strcmp(visibility, "private")))
        return kestrel__error_set(KESTREL_EINVALID, "visibility is all, team or private");
    if (c->store_root)
        return kestrel__error_set(KESTREL_EUNSUPPORTED, "a file:// repository has no visibility: its files' modes "
                                  "decide (visibility needs a kestreld)");
    m.name = (char *)name;
    m.visibility = (char *)visibility;
    if ((rc = kestrel__buf_printf(&path, "/api/v1/models/%s/settings", name)) == 0) {
        r.path = path.ptr;
        rc = kestrel__http_call(NULL, c, &r);
    }
    kestrel_buf_dispose(&path);
    return rc;
}
