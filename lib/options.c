/* lib/options.c - versioned options structs: read at most the caller's version. */
#include <string.h>
#include "options.h"

#define END_OF(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* index = struct version; a v2 appends its size here */
static const size_t client_sizes[] = { 0, END_OF(kestrel_client_options, retry_backoff_ms) };
static const size_t list_sizes[] = { 0, END_OF(kestrel_job_list_options, page_token),
                                     END_OF(kestrel_job_list_options, param) };
static const size_t logs_sizes[] = { 0, END_OF(kestrel_logs_options, timeout_ms) };
static const size_t search_sizes[] = { 0, END_OF(kestrel_log_search_options, limit) };
static const size_t token_sizes[] = { 0, END_OF(kestrel_token_options, name) };
static const size_t code_sizes[] = { 0, END_OF(kestrel_code_options, progress_payload) };

static int load(void *dst, size_t dst_size, const void *src, const size_t *sizes, size_t nsizes,
                unsigned int current, const char *what)
{
    unsigned int v;
    memset(dst, 0, dst_size);
    *(unsigned int *)dst = current;
    if (src == NULL)
        return 0;
    v = *(const unsigned int *)src;
    if (v == 0 || v >= nsizes)
        return kestrel__error_set(KESTREL_EMISUSE, "invalid %s version %u (this library knows 1..%u)",
                                  what, v, (unsigned)(nsizes - 1));
    memcpy(dst, src, sizes[v]);
    *(unsigned int *)dst = current;
    return 0;
}

static int init(void *opts, size_t size, unsigned int version, size_t nsizes, const char *what)
{
    if (opts == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "%s is NULL", what);
    if (version == 0 || version >= nsizes)
        return kestrel__error_set(KESTREL_EMISUSE, "invalid %s version %u", what, version);
    memset(opts, 0, size);
    *(unsigned int *)opts = version;
    return 0;
}

int kestrel__client_opts_load(kestrel_client_options *dst, const kestrel_client_options *src)
{
    return load(dst, sizeof(*dst), src, client_sizes, KESTREL__ARRAY_SIZE(client_sizes),
                KESTREL_CLIENT_OPTIONS_VERSION, "kestrel_client_options");
}

int kestrel__list_opts_load(kestrel_job_list_options *dst, const kestrel_job_list_options *src)
{
    return load(dst, sizeof(*dst), src, list_sizes, KESTREL__ARRAY_SIZE(list_sizes),
                KESTREL_JOB_LIST_OPTIONS_VERSION, "kestrel_job_list_options");
}

int kestrel__logs_opts_load(kestrel_logs_options *dst, const kestrel_logs_options *src)
{
    return load(dst, sizeof(*dst), src, logs_sizes, KESTREL__ARRAY_SIZE(logs_sizes),
                KESTREL_LOGS_OPTIONS_VERSION, "kestrel_logs_options");
}

int kestrel__search_opts_load(kestrel_log_search_options *dst, const kestrel_log_search_options *src)
{
    return load(dst, sizeof(*dst), src, search_sizes, KESTREL__ARRAY_SIZE(search_sizes),
                KESTREL_LOG_SEARCH_OPTIONS_VERSION, "kestrel_log_search_options");
}

int kestrel_log_search_options_init(kestrel_log_search_options *opts, unsigned int version)
{
    return init(opts, sizeof(*opts), version, KESTREL__ARRAY_SIZE(search_sizes), "kestrel_log_search_options");
}

int kestrel_client_options_init(kestrel_client_options *opts, unsigned int version)
{
    return init(opts, sizeof(*opts), version, KESTREL__ARRAY_SIZE(client_sizes), "kestrel_client_options");
}

int kestrel_job_list_options_init(kestrel_job_list_options *opts, unsigned int version)
{
    return init(opts, sizeof(*opts), version, KESTREL__ARRAY_SIZE(list_sizes), "kestrel_job_list_options");
}

int kestrel_logs_options_init(kestrel_logs_options *opts, unsigned int version)
{
    return init(opts, sizeof(*opts), version, KESTREL__ARRAY_SIZE(logs_sizes), "kestrel_logs_options");
}

int kestrel__token_opts_load(kestrel_token_options *dst, const kestrel_token_options *src)
{
    return load(dst, sizeof(*dst), src, token_sizes, KESTREL__ARRAY_SIZE(token_sizes),
                KESTREL_TOKEN_OPTIONS_VERSION, "kestrel_token_options");
}

int kestrel_token_options_init(kestrel_token_options *opts, unsigned int version)
{
    return init(opts, sizeof(*opts), version, KESTREL__ARRAY_SIZE(token_sizes), "kestrel_token_options");
}

int kestrel__code_opts_load(kestrel_code_options *dst, const kestrel_code_options *src)
{
    return load(dst, sizeof(*dst), src, code_sizes, KESTREL__ARRAY_SIZE(code_sizes), KESTREL_CODE_OPTIONS_VERSION,
                "kestrel_code_options");
}

int kestrel_code_options_init(kestrel_code_options *opts, unsigned int version)
{
    return init(opts, sizeof(*opts), version, KESTREL__ARRAY_SIZE(code_sizes), "kestrel_code_options");
}
