/* server/api_inputs.c - a submitted job's repository inputs (its code, its data), checked and pinned
 * at submit: each ref must name a directory version the submitter may read, and is recorded as the
 * exact "NAME@N" it resolved to, so a rerun (requeue, reproduce) gets the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "api_inputs.h"
#include "envs.h"
#include "exec_util.h"
#include "repo_acl.h"
#include "repo.h"
#include "store.h"

/* Resolve *ref (a "NAME[@REF]") to "NAME@N", replacing the string; want_tree: a directory version
 * only. 0, or -1 with an error set. */
static int pin(kd_req *r, const char *field, char **ref, int want_tree)
{
    char name[256], *exact;
    const char *at = strrchr(*ref, '@');
    Kestrel__V1__Manifest *m = NULL;
    int rc;
    if (strlen(*ref) > 400)
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': the reference is longer than 400 bytes", field);
    snprintf(name, sizeof(name), "%.*s", (int)(at ? at - *ref : (long)strlen(*ref)), *ref);
    if (!kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': bad model name '%.64s'", field, name);
    if (!kd_repo_may_read(r, name) || !kestrel__store_model_exists(r->e->store, name))   /* before the ref: alike */
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': no model '%s'", field, name);
    if ((rc = kestrel__store_resolve(r->e->store, *ref, &m)) < 0) {
        if (!strncmp(kestrel_error_last()->message, "no model", 8))   /* word for word as for one unreadable */
            return kestrel__error_set(KESTREL_EINVALID, "field '%s': no model '%s'", field, name);
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': %s", field, kestrel_error_last()->message);
    }
    if (want_tree && m->n_files == 0) {
        kestrel__manifest_free(m);
        return kestrel__error_set(KESTREL_EINVALID, "field '%s': %s is a file, not a directory version", field, *ref);
    }
    if (asprintf(&exact, "%s@%lld", name, (long long)m->version) < 0) {
        kestrel__manifest_free(m);
        return kestrel__error_oom();
    }
    kestrel__manifest_free(m);
    free(*ref);
    *ref = exact;
    return 0;
}

int kd_inputs_pin(kd_req *r, Kestrel__V1__JobSpec *spec)
{
    if (spec->code[0] && pin(r, "code", &spec->code, 1) < 0)
        return KESTREL_EINVALID;
    for (size_t i = 0; i < spec->n_data; i++)
        if (pin(r, "data", &spec->data[i]->ref, 0) < 0)
            return KESTREL_EINVALID;
    return 0;
}

/* Whether ref still resolves (for rerun's report); the reason into why when not. */
static int still_there(kd_req *r, const char *ref, char *why, size_t n)
{
    Kestrel__V1__Manifest *m = NULL;
    char name[256];
    const char *at = strrchr(ref, '@');
    snprintf(name, sizeof(name), "%.*s", (int)(at ? at - ref : (long)strlen(ref)), ref);
    if (kestrel__repo_name_valid(name) && kd_repo_may_read(r, name) && kestrel__store_resolve(r->e->store, ref, &m) == 0) {
        kestrel__manifest_free(m);
        return 1;
    }
    snprintf(why, n, "%s", ref);
    return 0;
}

int kd_inputs_missing(kd_req *r, const Kestrel__V1__JobSpec *spec, char *msg, size_t n)
{
    size_t used = 0, missing = 0;
    char why[420];
    msg[0] = '\0';
    for (size_t i = 0; i <= spec->n_data; i++) {
        const char *ref = i == 0 ? spec->code : spec->data[i - 1]->ref;
        if (!ref[0] || still_there(r, ref, why, sizeof(why)))
            continue;
        used += (size_t)snprintf(msg + used, used < n ? n - used : 0, "%s%s %s", missing++ ? "; " : "cannot reproduce: ",
                                 i == 0 ? "code" : "dataset", why);
    }
    if (missing && used < n)
        snprintf(msg + used, n - used, " can no longer be found (deleted, or not yours to read)");
    return missing ? -1 : 0;
}

cJSON *kd_inputs_lineage(kd_req *r)
{
    Kestrel__V1__Job *job = NULL;
    int64_t owner = 0;
    cJSON *l, *a;
    const Kestrel__V1__JobSpec *s;
    if (kd_catalog_job_load(r->e->cat, r->who.job_id, 0, &job, &owner) < 0 || job->spec == NULL) {
        if (job)
            protobuf_c_message_free_unpacked(&job->base, NULL);
        return NULL;
    }
    s = job->spec;
    if ((l = cJSON_CreateObject()) == NULL)
        goto out;
    cJSON_AddNumberToObject(l, "job_id", (double)job->id);
    if (s->code[0])
        cJSON_AddStringToObject(l, "code", s->code);
    if (job->environment[0]) {
        cJSON_AddStringToObject(l, "environment", job->environment);
        if (s->environment[0])
            cJSON_AddStringToObject(l, "environment_name", s->environment);
    }
    if (s->git_url[0]) {   /* every reader of the model sees it: its credentials never */
        char shown[KD_GIT_URL_SHOWN_MAX];
        kd_git_url_shown(s->git_url, shown, sizeof(shown));
        cJSON_AddStringToObject(l, "git_url", shown);
        cJSON_AddStringToObject(l, "git_commit", job->git_commit);
    }
    if (s->n_data && (a = cJSON_AddArrayToObject(l, "data")) != NULL)
        for (size_t i = 0; i < s->n_data; i++) {
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "ref", s->data[i]->ref);
            cJSON_AddStringToObject(d, "path", s->data[i]->path);
            cJSON_AddItemToArray(a, d);
        }
    if ((a = cJSON_AddObjectToObject(l, "params")) != NULL)
        for (size_t i = 0; i < s->n_params; i++)
            cJSON_AddStringToObject(a, s->params[i]->key, s->params[i]->value);
    if ((a = cJSON_AddArrayToObject(l, "argv")) != NULL)
        for (size_t i = 0; i < s->n_argv; i++)
            cJSON_AddItemToArray(a, cJSON_CreateString(s->argv[i]));
out:
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return l;
}

enum MHD_Result kd_route_environments(kd_req *r)
{
    Kestrel__V1__EnvironmentList *l;
    if (strcmp(r->method, "GET"))
        return kd_reply_error(r, 405, "method_not_allowed", "use GET on /api/v1/environments");
    if ((l = kd_envs_list(r->e->envs, r->who.is_admin)) == NULL)
        return kd_reply_error(r, 500, "internal", "out of memory");
    return kd_reply_owned(r, 200, &l->base);
}
