/* lib/job/job_placement.c - placement setters of job specs (scheduler constraints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "job_priv.h"

static int short_name(const char *v, const char *what)
{
    if (v && v[0] && (!kestrel__text_is_clean(v, 64) || strchr(v, ' ')))
        return kestrel__error_set(KESTREL_EINVALID, "%s: up to 64 printable bytes without spaces", what);
    return 0;
}

int kestrel_job_spec_set_gpu_type(kestrel_job_spec *s, const char *type)
{
    int rc;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if ((rc = short_name(type, "gpu type")) < 0)
        return rc;
    return kestrel__wire_set_string(&s->pb->gpu_type, type ? type : "");
}

int kestrel_job_spec_set_min_gpu_memory(kestrel_job_spec *s, int64_t mb)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (mb < 0)
        return kestrel__error_set(KESTREL_EINVALID, "GPU memory must not be negative");
    s->pb->min_gpu_memory_mb = mb;
    return 0;
}

int kestrel_job_spec_set_min_compute_capability(kestrel_job_spec *s, int major, int minor)
{
    char cc[16] = "";
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (major < 0 || major > 99 || minor < 0 || minor > 9)
        return kestrel__error_set(KESTREL_EINVALID, "compute capability must be 0..99 . 0..9");
    if (major || minor)
        snprintf(cc, sizeof(cc), "%d.%d", major, minor);
    return kestrel__wire_set_string(&s->pb->min_compute_capability, cc);
}

int kestrel_job_spec_set_pool(kestrel_job_spec *s, const char *pool)
{
    int rc;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if ((rc = short_name(pool, "pool")) < 0)
        return rc;
    return kestrel__wire_set_string(&s->pb->pool, pool ? pool : "");
}

int kestrel_job_spec_add_dependency(kestrel_job_spec *s, int64_t job_id, int kind)
{
    int64_t **arr, *grown;
    size_t *n;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (job_id <= 0 || (kind != KESTREL_AFTER_OK && kind != KESTREL_AFTER_ANY))
        return kestrel__error_set(KESTREL_EINVALID, "a dependency needs a positive job id and KESTREL_AFTER_OK/ANY");
    if (s->pb->n_after_ok + s->pb->n_after_any >= 64)
        return kestrel__error_set(KESTREL_EINVALID, "at most 64 dependencies");
    arr = kind == KESTREL_AFTER_OK ? &s->pb->after_ok : &s->pb->after_any;
    n = kind == KESTREL_AFTER_OK ? &s->pb->n_after_ok : &s->pb->n_after_any;
    if ((grown = realloc(*arr, (*n + 1) * sizeof(*grown))) == NULL)
        return kestrel__error_oom();
    grown[(*n)++] = job_id;
    *arr = grown;
    return 0;
}

int kestrel_job_spec_set_affinity(kestrel_job_spec *s, int64_t job_id, const char *group, int required)
{
    int rc;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (job_id < 0)
        return kestrel__error_set(KESTREL_EINVALID, "affinity: a job id is positive");
    if (job_id && group && group[0])
        return kestrel__error_set(KESTREL_EINVALID, "affinity takes a job id or a group, not both");
    if (!job_id && !(group && group[0]))
        return kestrel__error_set(KESTREL_EINVALID, "affinity takes a job id or a group name (not empty)");
    if ((rc = short_name(group, "affinity group")) < 0)
        return rc;
    if ((rc = kestrel__wire_set_string(&s->pb->affinity_group, group ? group : "")) < 0)
        return rc;
    s->pb->affinity_job = job_id;
    s->pb->affinity_required = required != 0;
    return 0;
}

int kestrel_job_spec_set_group(kestrel_job_spec *s, const char *group)
{
    int rc;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if ((rc = short_name(group, "group")) < 0)
        return rc;
    return kestrel__wire_set_string(&s->pb->group, group ? group : "");
}

int kestrel_job_spec_set_preemptible(kestrel_job_spec *s, int preemptible)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    s->pb->not_preemptible = !preemptible;
    return 0;
}

int kestrel_job_spec_set_grace_period(kestrel_job_spec *s, int seconds)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (seconds < 0 || seconds > 86400)
        return kestrel__error_set(KESTREL_EINVALID, "grace period must be 0..86400 s");
    s->pb->grace_period_s = seconds;
    return 0;
}
