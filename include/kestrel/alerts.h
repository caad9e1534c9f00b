/* kestrel/alerts.h - kestreld's own alerts: log policies that matched, NaN losses, idle GPUs.
 *
 * Each is an event on a job; kestreld also POSTs it to its --webhook (signed JSON). An admin's
 * token lists every job's alerts, a user's those of the user's own jobs, a job's those of its job. */
#ifndef KESTREL_ALERTS_H
#define KESTREL_ALERTS_H

#include "common.h"
#include "client.h"

KESTREL_BEGIN_DECL

/** One alert. Strings are borrowed from the list it came in. */
typedef struct kestrel_alert {
    unsigned int version;
    int64_t id;
    int64_t time_ms;          /**< Unix ms */
    int64_t job_id;
    const char *job_name;
    const char *owner;
    const char *kind;         /**< "log-policy", "nan-loss", "idle-gpu" */
    const char *severity;     /**< "info", "warning", "critical" */
    const char *message;
    int delivery;             /**< 0 pending, 1 delivered to the webhook, 2 given up, 3 no webhook */
} kestrel_alert;

typedef struct kestrel_alert_list kestrel_alert_list;

/** The newest alerts first, at most limit (1..1000; 0: 100), of one job (job_id > 0) or all visible. */
KESTREL_API int kestrel_alerts_get(kestrel_alert_list **out, kestrel_client *client, int64_t job_id, int limit);
KESTREL_API size_t kestrel_alert_list_count(const kestrel_alert_list *list);
/** Alert i (borrowed from list), or NULL. */
KESTREL_API const kestrel_alert *kestrel_alert_list_at(const kestrel_alert_list *list, size_t i);
KESTREL_API void kestrel_alert_list_free(kestrel_alert_list *list);

KESTREL_END_DECL

#endif
