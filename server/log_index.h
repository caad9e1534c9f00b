/* server/log_index.h - the thread that fills the log search index (log_index.c). */
#ifndef KD_LOG_INDEX_H
#define KD_LOG_INDEX_H

#include "engine.h"

int kd_indexer_start(kd_engine *e);
/* Stop the thread, then index what is queued (for at most a few seconds). */
void kd_indexer_stop(kd_engine *e);

#endif
