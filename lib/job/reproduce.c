/* lib/job/reproduce.c - kestrel_job_reproduce: from a model version to the job that pushed it (the
 * lineage kestreld stored with the version), run again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "job_priv.h"
#include "store.h"

/* The version of name that ref's part after '@' names (a number, an alias, none: the newest). */
static const kestrel_model_version *pick(const kestrel_model_versions *vs, const char *at)
{
    size_t n = kestrel_model_versions_count(vs);
    if (at == NULL || !strcmp(at, "latest"))
        return n ? kestrel_model_versions_at(vs, n - 1) : NULL;
    for (size_t i = 0; i < n; i++) {
        const kestrel_model_version *v = kestrel_model_versions_at(vs, i);
        char num[32];
        const char *a = v->aliases;
        size_t len = strlen(at);
        snprintf(num, sizeof(num), "%lld", (long long)v->version);
        if (!strcmp(num, at))
            return v;
        for (; a && *a; a += strcspn(a, ",") + (a[strcspn(a, ",")] ? 1 : 0))
            if (!strncmp(a, at, len) && (a[len] == ',' || a[len] == '\0'))
                return v;
    }
    return NULL;
}

int kestrel_job_reproduce(kestrel_job **out, kestrel_client *c, const char *ref)
{
    kestrel_model_versions *vs = NULL;
    const kestrel_model_version *v;
    char name[256];
    const char *at;
    cJSON *meta = NULL, *job;
    int64_t id = 0;
    int rc;
    if (out == NULL || ref == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out or ref is NULL");
    *out = NULL;
    at = strrchr(ref, '@');
    snprintf(name, sizeof(name), "%.*s", (int)(at ? at - ref : (long)strlen(ref)), ref);
    if (!kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s'", name);
    if ((rc = kestrel_model_versions_get(&vs, c, name)) < 0)
        return rc;
    if ((v = pick(vs, at ? at + 1 : NULL)) == NULL) {
        rc = kestrel__error_set(KESTREL_ENOTFOUND, "no version %s", ref);
        goto out;
    }
    meta = cJSON_Parse(v->metadata_json ? v->metadata_json : "{}");
    job = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(meta, "lineage"), "job_id");
    if (!cJSON_IsNumber(job) || (id = (int64_t)job->valuedouble) <= 0) {
        rc = kestrel__error_set(KESTREL_ENOTFOUND, "%s@%lld was not pushed by a job: it has no lineage to rerun",
                                name, (long long)v->version);
        goto out;
    }
    rc = kestrel_job_rerun(out, c, id);
out:
    cJSON_Delete(meta);
    kestrel_model_versions_free(vs);
    return rc;
}
