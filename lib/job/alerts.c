/* lib/job/alerts.c - kestreld's own alerts (GET /api/v1/alerts). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "client.h"
#include "http.h"

struct kestrel_alert_list {
    uint32_t magic;
    Kestrel__V1__AlertList *pb;
    kestrel_alert *items;
};

int kestrel_alerts_get(kestrel_alert_list **out, kestrel_client *c, int64_t job_id, int limit)
{
    char path[128];
    kestrel__request req = { "GET", path, NULL, &kestrel__v1__alert_list__descriptor, 1, 0 };
    ProtobufCMessage *m = NULL;
    kestrel_alert_list *l;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (job_id < 0 || limit < 0 || limit > 1000)
        return kestrel__error_set(KESTREL_EINVALID, "job_id >= 0 and limit 0..1000");
    if (job_id)
        snprintf(path, sizeof(path), "/api/v1/alerts?limit=%d&job=%" PRId64, limit ? limit : 100, job_id);
    else
        snprintf(path, sizeof(path), "/api/v1/alerts?limit=%d", limit ? limit : 100);
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    if ((l = calloc(1, sizeof(*l))) == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_oom();
    }
    l->pb = (Kestrel__V1__AlertList *)m;
    if ((l->items = calloc(l->pb->n_alerts + 1, sizeof(*l->items))) == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        free(l);
        return kestrel__error_oom();
    }
    for (size_t i = 0; i < l->pb->n_alerts; i++) {
        const Kestrel__V1__Alert *a = l->pb->alerts[i];
        l->items[i] = (kestrel_alert){ 1, a->id, a->time_ms, a->job_id, a->job_name, a->owner, a->kind, a->severity,
                                       a->message, a->delivery };
    }
    l->magic = KESTREL__MAGIC_ALERTS;
    *out = l;
    return 0;
}

#define LIST_OK(l) ((l) && (l)->magic == KESTREL__MAGIC_ALERTS)

size_t kestrel_alert_list_count(const kestrel_alert_list *l) { return LIST_OK(l) ? l->pb->n_alerts : 0; }

const kestrel_alert *kestrel_alert_list_at(const kestrel_alert_list *l, size_t i)
{
    return LIST_OK(l) && i < l->pb->n_alerts ? &l->items[i] : NULL;
}

void kestrel_alert_list_free(kestrel_alert_list *l)
{
    if (!LIST_OK(l))
        return;
    l->magic = KESTREL__MAGIC_DEAD;
    protobuf_c_message_free_unpacked(&l->pb->base, NULL);
    free(l->items);
    free(l);
}
