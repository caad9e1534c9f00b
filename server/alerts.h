/* server/alerts.h - kestreld's own alerts and their webhook (alerts.c). */
#ifndef KD_ALERTS_H
#define KD_ALERTS_H

#include "engine.h"

/* Start the webhook delivery thread when --webhook is set (0 and nothing otherwise). */
int kd_alerts_start(kd_engine *e);
/* Stop sending (kd_engine_alert still records, as pending); free at kd_engine_fini. */
void kd_alerts_stop(kd_engine *e);
void kd_alerts_free(kd_engine *e);

#endif
