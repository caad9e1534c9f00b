/* lib/options.h - loaders for versioned options structs. */
#ifndef KESTREL_OPTIONS_H
#define KESTREL_OPTIONS_H
#include "internal.h"
int kestrel__client_opts_load(kestrel_client_options *dst, const kestrel_client_options *src);
int kestrel__list_opts_load(kestrel_job_list_options *dst, const kestrel_job_list_options *src);
int kestrel__logs_opts_load(kestrel_logs_options *dst, const kestrel_logs_options *src);
int kestrel__search_opts_load(kestrel_log_search_options *dst, const kestrel_log_search_options *src);
int kestrel__code_opts_load(kestrel_code_options *dst, const kestrel_code_options *src);
int kestrel__token_opts_load(kestrel_token_options *dst, const kestrel_token_options *src);
#endif
