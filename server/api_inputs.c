/* server/api_inputs.c - a submitted job's repository inputs (its code, its data), checked and pinned
 * at submit: each ref must name a directory version the submitter may read, and is recorded as the
 * exact "NAME@N" it resolved to, so a rerun (requeue, reproduce) gets the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "api_inputs.h"
#include "repo_acl.h"
#include "store.h"

/* Resolve *ref (a "NAME[@REF]") to "NAME@N", replacing the string. 0, or -1 with an error set. */
static int pin(kd_req *r, const char *field, char **ref)
{
    char name[256], *exact;
    const char *at = strrchr(*ref, '@');
    cJSON *m = NULL, *v;
    int rc;
    if (strlen(*ref) > 400)
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': the reference is longer than 400 bytes", field);
    snprintf(name, sizeof(name), "%.*s", (int)(at ? at - *ref : (long)strlen(*ref)), *ref);
    if (!kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': bad model name '%.64s'", field, name);
    if (!kd_repo_may_read(r, name))
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': no model '%s'", field, name);
    if ((rc = kestrel__store_resolve(r->e->store, *ref, &m)) < 0)
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': %s", field, kestrel_error_last()->message);
    v = cJSON_GetObjectItemCaseSensitive(m, "version");
    if (!cJSON_IsNumber(v) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "files"))) {
        cJSON_Delete(m);
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': %s is a file, not a directory version", field, *ref);
    }
    if (asprintf(&exact, "%s@%lld", name, (long long)v->valuedouble) < 0) {
        cJSON_Delete(m);
        return kestrel__error_oom();
    }
    cJSON_Delete(m);
    free(*ref);
    *ref = exact;
    return 0;
}

int kd_inputs_pin(kd_req *r, Kestrel__V1__JobSpec *spec)
{
    if (spec->code[0] && pin(r, "code", &spec->code) < 0)
        return KESTREL_EINVALID;
    return 0;
}
