/* lib/job/job_list.c - listing jobs with filters and pagination. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "job_priv.h"
#include "options.h"

struct kestrel_job_page {
    uint32_t magic;
    Kestrel__V1__JobList *pb;
    struct kestrel_job *jobs;
};

void kestrel_job_page_free(kestrel_job_page *l)
{
    if (l == NULL || l->magic != KESTREL__MAGIC_LIST)
        return;
    l->magic = KESTREL__MAGIC_DEAD;
    for (size_t i = 0; l->jobs && i < l->pb->n_jobs; i++)
        kestrel__job_fini(&l->jobs[i]);
    free(l->jobs);
    protobuf_c_message_free_unpacked(&l->pb->base, NULL);
    free(l);
}

int kestrel_job_list(kestrel_job_page **out, kestrel_client *c, const kestrel_job_list_options *in)
{
    kestrel_job_list_options o;
    kestrel_buf path = KESTREL_BUF_INIT;
    kestrel__request req = { "GET", NULL, NULL, &kestrel__v1__job_list__descriptor, 1, 0 };
    ProtobufCMessage *m = NULL;
    kestrel_job_page *l;
    int rc;

    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__list_opts_load(&o, in)) < 0)
        return rc;
    if (o.page_size < 0 || o.page_size > 1000)
        return kestrel__error_set(KESTREL_EINVALID, "page_size must be 0..1000");
    rc = kestrel__buf_puts(&path, "/api/v1/jobs");
    if (rc == 0 && o.state)
        rc = kestrel__query_add(&path, "state", kestrel_job_state_name(o.state));
    if (rc == 0 && o.name)
        rc = kestrel__query_add(&path, "name", o.name);
    if (rc == 0 && o.label)
        rc = kestrel__query_add(&path, "label", o.label);
    if (rc == 0 && o.param)
        rc = kestrel__query_add(&path, "param", o.param);
    if (rc == 0 && o.page_token && *o.page_token)
        rc = kestrel__query_add(&path, "page_token", o.page_token);
    if (rc == 0 && o.page_size) {
        char n[16];
        snprintf(n, sizeof(n), "%d", o.page_size);
        rc = kestrel__query_add(&path, "page_size", n);
    }
    req.path = path.ptr;
    if (rc == 0)
        rc = kestrel__http_call(&m, c, &req);
    kestrel_buf_dispose(&path);
    if (rc < 0)
        return rc;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        goto oom;
    l->pb = (Kestrel__V1__JobList *)m;
    if (l->pb->n_jobs && (l->jobs = calloc(l->pb->n_jobs, sizeof(*l->jobs))) == NULL)
        goto oom;
    l->magic = KESTREL__MAGIC_LIST;
    for (size_t i = 0; i < l->pb->n_jobs; i++) {
        if ((rc = kestrel__job_init(&l->jobs[i], l->pb->jobs[i], 0)) < 0) {
            kestrel_job_page_free(l);
            return rc;
        }
    }
    *out = l;
    return 0;
oom:
    free(l);
    protobuf_c_message_free_unpacked(m, NULL);
    return kestrel__error_oom();
}

size_t kestrel_job_page_count(const kestrel_job_page *l)
{
    return (l && l->magic == KESTREL__MAGIC_LIST) ? l->pb->n_jobs : 0;
}

const kestrel_job *kestrel_job_page_at(const kestrel_job_page *l, size_t i)
{
    return (l && l->magic == KESTREL__MAGIC_LIST && i < l->pb->n_jobs) ? &l->jobs[i] : NULL;
}

const char *kestrel_job_page_next_token(const kestrel_job_page *l)
{
    return (l && l->magic == KESTREL__MAGIC_LIST) ? l->pb->next_page_token : "";
}
