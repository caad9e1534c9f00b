/* lib/job/job_spec.c - job spec handles and their validation (shared with kestreld). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "job_priv.h"
#include "repo.h"

#define ARG_STRING_MAX 131072   /* Linux's MAX_ARG_STRLEN: one argv or environment string, its NUL counted */

/* A relative path that cannot climb out of the job's directory. */
static int workdir_ok(const char *w)
{
    size_t n = strlen(w);
    return kestrel__text_is_clean(w, 1024) && w[0] != '/' && strcmp(w, "..") && strncmp(w, "../", 3) &&
           !strstr(w, "/../") && !(n >= 3 && !strcmp(w + n - 3, "/.."));
}

/* "8.0" style compute capability, or "". */
static int cc_ok(const char *s)
{
    int maj, min, n = 0;
    return !s[0] || (sscanf(s, "%2d.%1d%n", &maj, &min, &n) == 2 && s[n] == '\0' && maj >= 0 && min >= 0);
}

/* A parameter key: 1..64 bytes of [A-Za-z0-9_.-]. */
static int param_key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= '0' && k[i] <= '9') ||
              k[i] == '_' || k[i] == '.' || k[i] == '-'))
            return 0;
    return 1;
}

static int validate_params(const Kestrel__V1__JobSpec *s)
{
    size_t bytes = 2;
    if (s->n_params > KESTREL__PARAMS_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "field 'params': %zu parameters, at most %d", s->n_params,
                                  KESTREL__PARAMS_MAX);
    for (size_t i = 0; i < s->n_params; i++) {   /* KESTREL_PARAMS is one environment string: Linux takes 128 KiB */
        const char *v = s->params[i]->value;
        bytes += strlen(s->params[i]->key) + strlen(v) + 6;   /* "k":"v", (control characters are refused) */
        for (; *v; v++)
            bytes += *v == '"' || *v == '\\';
    }
    if (bytes > KESTREL__PARAMS_BYTES)
        return kestrel__error_set(KESTREL_ETOOLARGE, "field 'params': %zu bytes as KESTREL_PARAMS, at most %d: pass "
                                  "big values in a file (--data)", bytes, KESTREL__PARAMS_BYTES);
    for (size_t i = 0; i < s->n_params; i++) {
        const char *k = s->params[i]->key, *v = s->params[i]->value;
        if (!param_key_ok(k))
            return kestrel__error_set(KESTREL_EINVALID, "field 'params': bad key '%.64s' (1..64 of A-Z a-z 0-9 _ . -)", k);
        if (!kestrel__text_is_clean(v, KESTREL__PARAM_VALUE_MAX))
            return kestrel__error_set(KESTREL_EINVALID, "field 'params': the value of %s must be printable UTF-8, "
                                      "at most %d bytes", k, KESTREL__PARAM_VALUE_MAX);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->params[j]->key, k))
                return kestrel__error_set(KESTREL_EINVALID, "field 'params': %s given twice", k);
    }
    return 0;
}

static int short_name_ok(const char *s)
{
    return !s[0] || (kestrel__text_is_clean(s, 64) && !strchr(s, ' '));
}

/* A GPU type: letters, digits, '_', '.', '-'. On a Slurm pool it becomes --gres=gpu:TYPE:N, where a ':'
 * or ',' in it asked for other GRES (a hostile test: "a100:2,gpu:a100" left the job pending for good). */
static int gpu_type_ok(const char *s)
{
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == strlen(s);
}

static int validate_placement(const Kestrel__V1__JobSpec *s)
{
    if (!gpu_type_ok(s->gpu_type))
        return kestrel__error_set(KESTREL_EINVALID, "field 'gpu_type': letters, digits, '_', '.' and '-' only");
    if (!short_name_ok(s->gpu_type) || !short_name_ok(s->pool) || !short_name_ok(s->group) ||
        !short_name_ok(s->affinity_group))
        return kestrel__error_set(KESTREL_EINVALID,
                                  "fields 'gpu_type', 'pool', 'group', 'affinity_group': up to 64 printable bytes, no spaces");
    if (!cc_ok(s->min_compute_capability))
        return kestrel__error_set(KESTREL_EINVALID, "field 'min_compute_capability': expected MAJOR.MINOR such as 8.0");
    if (s->min_gpu_memory_mb < 0)
        return kestrel__error_set(KESTREL_EINVALID, "field 'min_gpu_memory_mb': must not be negative");
    if (s->n_after_ok + s->n_after_any > 64)
        return kestrel__error_set(KESTREL_EINVALID, "fields 'after_ok', 'after_any': at most 64 dependencies");
    for (size_t i = 0; i < s->n_after_ok + s->n_after_any; i++)
        if ((i < s->n_after_ok ? s->after_ok[i] : s->after_any[i - s->n_after_ok]) <= 0)
            return kestrel__error_set(KESTREL_EINVALID, "fields 'after_ok', 'after_any': job ids are positive");
    if (s->affinity_job < 0 || (s->affinity_job && s->affinity_group[0]))
        return kestrel__error_set(KESTREL_EINVALID, "fields 'affinity_job', 'affinity_group': at most one, ids positive");
    if (s->affinity_required && !s->affinity_job && !s->affinity_group[0])
        return kestrel__error_set(KESTREL_EINVALID, "field 'affinity_required': needs affinity_job or affinity_group");
    if (s->grace_period_s < 0 || s->grace_period_s > 86400)
        return kestrel__error_set(KESTREL_EINVALID, "field 'grace_period_s': must be 0..86400");
    return 0;
}

int kestrel__job_spec_validate(const Kestrel__V1__JobSpec *s)
{
    int failure_rc = kestrel__job_spec_validate_failure(s);
    if (failure_rc < 0)
        return failure_rc;
    if (s->n_argv == 0 || s->argv[0][0] == '\0')
        return kestrel__error_set(KESTREL_EINVALID, "field 'argv': at least a program name is required");
    if (s->n_argv > 4096)
        return kestrel__error_set(KESTREL_EINVALID, "field 'argv': more than 4096 arguments");
    if (s->name[0] && !kestrel__text_is_clean(s->name, KESTREL__NAME_MAX))
        return kestrel__error_set(KESTREL_EINVALID,
                                  "field 'name': must be printable UTF-8 without control characters, at most %d bytes",
                                  KESTREL__NAME_MAX);
    for (size_t i = 0; i < s->n_env; i++) {
        const char *k = s->env[i]->key;
        if (!k[0] || strchr(k, '=') || !kestrel__text_is_clean(k, KESTREL__NAME_MAX))
            return kestrel__error_set(KESTREL_EINVALID, "field 'env': bad variable name '%.64s'", k);
        if (!strncmp(k, "KESTREL_", 8) || !strcmp(k, "CUDA_VISIBLE_DEVICES"))
            return kestrel__error_set(KESTREL_EINVALID, "field 'env': %s is set by kestreld", k);
    }
    {   /* bounds: argv and env each at most 256 KiB (a 15 MB env value took kestreld to 4 GB) */
        size_t argv_bytes = 0, env_bytes = 0;
        for (size_t i = 0; i < s->n_argv; i++)
            argv_bytes += strlen(s->argv[i]) + 1;
        for (size_t i = 0; i < s->n_env; i++)
            env_bytes += strlen(s->env[i]->key) + strlen(s->env[i]->value) + 2;
        for (size_t i = 0; i < s->n_secret_env; i++)
            env_bytes += strlen(s->secret_env[i]->key) + strlen(s->secret_env[i]->value) + 2;
        if (argv_bytes > KESTREL__SPEC_LIST_MAX)
            return kestrel__error_set(KESTREL_ETOOLARGE, "field 'argv': %zu bytes, at most %d", argv_bytes,
                                      KESTREL__SPEC_LIST_MAX);
        if (env_bytes > KESTREL__SPEC_LIST_MAX || s->n_env + s->n_secret_env > 4096)
            return kestrel__error_set(KESTREL_ETOOLARGE, "field 'env': %zu bytes in %zu variables, at most %d bytes "
                                      "and 4096 variables", env_bytes, s->n_env + s->n_secret_env,
                                      KESTREL__SPEC_LIST_MAX);
        if (s->n_labels > 256)
            return kestrel__error_set(KESTREL_ETOOLARGE, "field 'labels': at most 256");
        /* Linux execs no string past MAX_ARG_STRLEN (32 pages): such a job was taken, then failed to
         * start with "Argument list too long" (a hostile test) */
        for (size_t i = 0; i < s->n_argv; i++)
            if (strlen(s->argv[i]) + 1 > ARG_STRING_MAX)
                return kestrel__error_set(KESTREL_ETOOLARGE, "field 'argv': argument %zu is %zu bytes; Linux passes "
                                          "at most %d to a program", i, strlen(s->argv[i]) + 1, ARG_STRING_MAX);
        for (size_t i = 0; i < s->n_env + s->n_secret_env; i++) {
            const Kestrel__V1__KeyValue *e = i < s->n_env ? s->env[i] : s->secret_env[i - s->n_env];
            if (strlen(e->key) + strlen(e->value) + 2 > ARG_STRING_MAX)
                return kestrel__error_set(KESTREL_ETOOLARGE, "field '%s': %s=VALUE is %zu bytes; Linux passes at most "
                                          "%d a variable", i < s->n_env ? "env" : "secret_env", e->key,
                                          strlen(e->key) + strlen(e->value) + 2, ARG_STRING_MAX);
        }
    }
    for (size_t i = 0; i < s->n_secret_env; i++) {
        const char *k = s->secret_env[i]->key;
        if (!k[0] || strchr(k, '=') || !kestrel__text_is_clean(k, KESTREL__NAME_MAX))
            return kestrel__error_set(KESTREL_EINVALID, "field 'secret_env': bad variable name '%.64s'", k);
        if (!strncmp(k, "KESTREL_", 8) || !strcmp(k, "CUDA_VISIBLE_DEVICES"))
            return kestrel__error_set(KESTREL_EINVALID, "field 'secret_env': %s is set by kestreld", k);
        for (size_t j = 0; j < s->n_env; j++)
            if (!strcmp(s->env[j]->key, k))
                return kestrel__error_set(KESTREL_EINVALID, "field 'secret_env': %s is also in 'env'", k);
    }
    for (size_t i = 0; i < s->n_labels; i++) {
        const char *k = s->labels[i]->key, *v = s->labels[i]->value;
        if (!k[0] || strchr(k, '=') || !kestrel__text_is_clean(k, KESTREL__NAME_MAX) ||
            !kestrel__text_is_clean(v, KESTREL__NAME_MAX))
            return kestrel__error_set(KESTREL_EINVALID, "field 'labels': bad label '%.64s'", k);
    }
    if (s->priority < 0 || s->priority > KESTREL__V1__PRIORITY__URGENT)
        return kestrel__error_set(KESTREL_EINVALID, "field 'priority': unknown class %d", s->priority);
    if (s->gpus < 0 || s->gpus > KESTREL__MAX_GPUS)
        return kestrel__error_set(KESTREL_EINVALID, "field 'gpus': must be 0..%d", KESTREL__MAX_GPUS);
    if (s->replicas < 0 || s->replicas > KESTREL__MAX_REPLICAS)
        return kestrel__error_set(KESTREL_EINVALID, "field 'replicas': must be 1..%d", KESTREL__MAX_REPLICAS);
    if (s->git_url[0] && (!kestrel__text_is_clean(s->git_url, 2048) || s->git_url[0] == '-'))
        return kestrel__error_set(KESTREL_EINVALID, "field 'git_url': not a usable URL");
    if (s->git_ref[0] && (!kestrel__text_is_clean(s->git_ref, KESTREL__NAME_MAX) || s->git_ref[0] == '-'))
        return kestrel__error_set(KESTREL_EINVALID, "field 'git_ref': not a usable ref");
    if (s->git_ref[0] && !s->git_url[0])
        return kestrel__error_set(KESTREL_EINVALID, "field 'git_ref': given without git_url");
    if (s->workdir[0] && !workdir_ok(s->workdir))
        return kestrel__error_set(KESTREL_EINVALID, "field 'workdir': must be a relative path inside the job");
    if (s->code[0] && (!kestrel__text_is_clean(s->code, 400) || s->code[0] == '-'))
        return kestrel__error_set(KESTREL_EINVALID, "field 'code': not a repository reference (NAME@VERSION)");
    if (s->n_data > KESTREL__DATA_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "field 'data': at most %d datasets", KESTREL__DATA_MAX);
    for (size_t i = 0; i < s->n_data; i++) {
        const Kestrel__V1__DataMount *d = s->data[i];
        if (!d->ref[0] || d->ref[0] == '-' || !kestrel__text_is_clean(d->ref, 400))
            return kestrel__error_set(KESTREL_EINVALID, "field 'data': not a repository reference '%.64s'", d->ref);
        if (!d->path[0] || !workdir_ok(d->path) || !kestrel__tree_path_valid(d->path))
            return kestrel__error_set(KESTREL_EINVALID, "field 'data': the path of %.64s must be relative, inside "
                                      "the work dir, without '.', '..' or empty segments", d->ref);
        for (size_t j = 0; j < i; j++) {
            size_t a = strlen(s->data[j]->path), b = strlen(d->path), m = a < b ? a : b;
            if (!strncmp(s->data[j]->path, d->path, m) && (a == b || (a < b ? d->path : s->data[j]->path)[m] == '/'))
                return kestrel__error_set(KESTREL_EINVALID, "field 'data': paths %s and %s overlap",
                                          s->data[j]->path, d->path);
        }
    }
    if (s->environment[0] && s->requirements[0])
        return kestrel__error_set(KESTREL_EINVALID, "fields 'environment', 'requirements': one or the other");
    if (s->environment[0] && !short_name_ok(s->environment))
        return kestrel__error_set(KESTREL_EINVALID, "field 'environment': a name of up to 64 printable bytes");
    if (strlen(s->requirements) > KESTREL__REQUIREMENTS_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "field 'requirements': %zu bytes, at most %d",
                                  strlen(s->requirements), KESTREL__REQUIREMENTS_MAX);
    if (s->requirements[0] && !kestrel__utf8_valid(s->requirements, strlen(s->requirements)))
        return kestrel__error_set(KESTREL_EINVALID, "field 'requirements': not UTF-8 text");
    if (s->n_data && s->git_url[0])
        return kestrel__error_set(KESTREL_EINVALID, "field 'data': not with 'git_url' (a checkout is the job's "
                                  "own tree): upload the code with 'code' instead");
    if (s->code[0] && s->git_url[0])
        return kestrel__error_set(KESTREL_EINVALID, "fields 'code', 'git_url': a job's code comes from one of them");
    {
        int rc = validate_params(s);
        return rc < 0 ? rc : validate_placement(s);
    }
}

int kestrel_job_spec_new(kestrel_job_spec **out)
{
    kestrel_job_spec *s;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    if ((rc = kestrel__require_init()) < 0)
        return rc;
    if ((s = calloc(1, sizeof(*s))) == NULL || (s->pb = malloc(sizeof(*s->pb))) == NULL) {
        free(s);
        return kestrel__error_oom();
    }
    kestrel__v1__job_spec__init(s->pb);
    s->pb->priority = KESTREL__V1__PRIORITY__NORMAL;
    s->magic = KESTREL__MAGIC_SPEC;
    *out = s;
    return 0;
}

void kestrel_job_spec_free(kestrel_job_spec *s)
{
    if (s == NULL || s->magic != KESTREL__MAGIC_SPEC)
        return;
    s->magic = KESTREL__MAGIC_DEAD;
    protobuf_c_message_free_unpacked(&s->pb->base, NULL);
    free(s);
}

int kestrel_job_spec_set_argv(kestrel_job_spec *s, const char *const *argv, size_t argc)
{
    char **copy;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (argv == NULL || argc == 0 || argv[0] == NULL || argv[0][0] == '\0')
        return kestrel__error_set(KESTREL_EINVALID, "argv needs at least a program name");
    if ((copy = calloc(argc, sizeof(char *))) == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < argc; i++) {
        if (argv[i] == NULL || !kestrel__utf8_valid(argv[i], strlen(argv[i])) ||
            (copy[i] = kestrel__strdup(argv[i])) == NULL) {
            for (size_t k = 0; k < i; k++)
                free(copy[k]);
            free(copy);
            return argv[i] ? kestrel__error_oom()
                           : kestrel__error_set(KESTREL_EINVALID, "argv[%zu] is NULL", i);
        }
    }
    for (size_t i = 0; i < s->pb->n_argv; i++)
        free(s->pb->argv[i]);
    free(s->pb->argv);
    s->pb->argv = copy;
    s->pb->n_argv = argc;
    return 0;
}

/* Set key=value in a repeated KeyValue field, replacing an existing key. */
static int set_kv(Kestrel__V1__KeyValue ***arr, size_t *n, const char *key, const char *value)
{
    Kestrel__V1__KeyValue *kv, **grown;
    for (size_t i = 0; i < *n; i++) {
        if (!strcmp((*arr)[i]->key, key))
            return kestrel__wire_set_string(&(*arr)[i]->value, value);
    }
    if ((kv = malloc(sizeof(*kv))) == NULL)
        return kestrel__error_oom();
    kestrel__v1__key_value__init(kv);
    if (kestrel__wire_set_string(&kv->key, key) < 0 || kestrel__wire_set_string(&kv->value, value) < 0 ||
        (grown = realloc(*arr, (*n + 1) * sizeof(*grown))) == NULL) {
        protobuf_c_message_free_unpacked(&kv->base, NULL);
        return kestrel__error_oom();
    }
    grown[(*n)++] = kv;
    *arr = grown;
    return 0;
}

static int set_env_kv(kestrel_job_spec *s, int secret, const char *key, const char *value)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (key == NULL || !key[0] || strchr(key, '=') || !kestrel__text_is_clean(key, KESTREL__NAME_MAX))
        return kestrel__error_set(KESTREL_EINVALID, "bad environment variable name");
    if (value == NULL || !kestrel__utf8_valid(value, strlen(value)))
        return kestrel__error_set(KESTREL_EINVALID, "%s value of %s is not UTF-8", secret ? "secret" : "environment",
                                  key);
    return secret ? set_kv(&s->pb->secret_env, &s->pb->n_secret_env, key, value)
                  : set_kv(&s->pb->env, &s->pb->n_env, key, value);
}

int kestrel_job_spec_set_env(kestrel_job_spec *s, const char *key, const char *value)
{
    return set_env_kv(s, 0, key, value);
}

int kestrel_job_spec_set_secret_env(kestrel_job_spec *s, const char *key, const char *value)
{
    return set_env_kv(s, 1, key, value);
}

int kestrel_job_spec_set_name(kestrel_job_spec *s, const char *name)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (name == NULL || !kestrel__text_is_clean(name, KESTREL__NAME_MAX))
        return kestrel__error_set(KESTREL_EINVALID, "job name must be printable UTF-8, at most %d bytes",
                                  KESTREL__NAME_MAX);
    return kestrel__wire_set_string(&s->pb->name, name);
}

int kestrel_job_spec_set_label(kestrel_job_spec *s, const char *key, const char *value)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (key == NULL || !key[0] || strchr(key, '=') || !kestrel__text_is_clean(key, KESTREL__NAME_MAX) ||
        value == NULL || !kestrel__text_is_clean(value, KESTREL__NAME_MAX))
        return kestrel__error_set(KESTREL_EINVALID, "labels must be printable key=value pairs");
    return set_kv(&s->pb->labels, &s->pb->n_labels, key, value);
}

int kestrel_job_spec_set_priority(kestrel_job_spec *s, int priority)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (priority < KESTREL_PRIORITY_NORMAL || priority > KESTREL_PRIORITY_URGENT)
        return kestrel__error_set(KESTREL_EINVALID, "unknown priority class %d", priority);
    s->pb->priority = (Kestrel__V1__Priority)priority;
    return 0;
}

int kestrel_job_spec_set_gpus(kestrel_job_spec *s, int gpus)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (gpus < 0 || gpus > KESTREL__MAX_GPUS)
        return kestrel__error_set(KESTREL_EINVALID, "gpus must be 0..%d", KESTREL__MAX_GPUS);
    s->pb->gpus = gpus;
    return 0;
}

int kestrel_job_spec_set_replicas(kestrel_job_spec *s, int replicas)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (replicas < 1 || replicas > KESTREL__MAX_REPLICAS)
        return kestrel__error_set(KESTREL_EINVALID, "replicas must be 1..%d", KESTREL__MAX_REPLICAS);
    s->pb->replicas = replicas > 1 ? replicas : 0;
    return 0;
}

int kestrel_job_spec_set_git(kestrel_job_spec *s, const char *url, const char *ref)
{
    int rc;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (url == NULL || !url[0] || url[0] == '-' || !kestrel__text_is_clean(url, 2048))
        return kestrel__error_set(KESTREL_EINVALID, "bad git URL");
    if (ref && (ref[0] == '-' || !kestrel__text_is_clean(ref, KESTREL__NAME_MAX)))
        return kestrel__error_set(KESTREL_EINVALID, "bad git ref");
    if ((rc = kestrel__wire_set_string(&s->pb->git_url, url)) < 0)
        return rc;
    return kestrel__wire_set_string(&s->pb->git_ref, ref ? ref : "");
}

int kestrel_job_spec_set_workdir(kestrel_job_spec *s, const char *subdir)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (subdir == NULL || !workdir_ok(subdir))
        return kestrel__error_set(KESTREL_EINVALID, "workdir must be a relative path inside the job");
    return kestrel__wire_set_string(&s->pb->workdir, subdir);
}

int kestrel_job_spec_set_param(kestrel_job_spec *s, const char *key, const char *value)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (key == NULL || !param_key_ok(key))
        return kestrel__error_set(KESTREL_EINVALID, "bad parameter name '%.64s': 1..64 of A-Z a-z 0-9 _ . -",
                                  key ? key : "(null)");
    if (value == NULL || !kestrel__text_is_clean(value, KESTREL__PARAM_VALUE_MAX))
        return kestrel__error_set(KESTREL_EINVALID, "the value of parameter %s must be printable UTF-8, at most %d "
                                  "bytes", key, KESTREL__PARAM_VALUE_MAX);
    if (s->pb->n_params >= KESTREL__PARAMS_MAX) {
        for (size_t i = 0; i < s->pb->n_params; i++)
            if (!strcmp(s->pb->params[i]->key, key))
                return set_kv(&s->pb->params, &s->pb->n_params, key, value);
        return kestrel__error_set(KESTREL_ETOOLARGE, "at most %d parameters", KESTREL__PARAMS_MAX);
    }
    return set_kv(&s->pb->params, &s->pb->n_params, key, value);
}

int kestrel_job_spec_set_code(kestrel_job_spec *s, const char *ref)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (ref == NULL || !ref[0] || ref[0] == '-' || !kestrel__text_is_clean(ref, 400))
        return kestrel__error_set(KESTREL_EINVALID, "bad code reference '%.64s' (NAME@VERSION)", ref ? ref : "");
    return kestrel__wire_set_string(&s->pb->code, ref);
}

int kestrel_job_spec_add_data(kestrel_job_spec *s, const char *ref, const char *path)
{
    Kestrel__V1__DataMount *d, **grown;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (ref == NULL || !ref[0] || ref[0] == '-' || !kestrel__text_is_clean(ref, 400))
        return kestrel__error_set(KESTREL_EINVALID, "bad dataset reference '%.64s' (NAME@VERSION)", ref ? ref : "");
    if (path == NULL || !path[0] || !workdir_ok(path) || !kestrel__tree_path_valid(path))
        return kestrel__error_set(KESTREL_EINVALID, "the path of dataset %s must be relative, inside the work dir, "
                                  "without '.', '..' or empty segments", ref);
    if (s->pb->n_data >= KESTREL__DATA_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "at most %d datasets", KESTREL__DATA_MAX);
    if ((d = malloc(sizeof(*d))) == NULL)
        return kestrel__error_oom();
    kestrel__v1__data_mount__init(d);
    if (kestrel__wire_set_string(&d->ref, ref) < 0 || kestrel__wire_set_string(&d->path, path) < 0 ||
        (grown = realloc(s->pb->data, (s->pb->n_data + 1) * sizeof(*grown))) == NULL) {
        protobuf_c_message_free_unpacked(&d->base, NULL);
        return kestrel__error_oom();
    }
    grown[s->pb->n_data++] = d;
    s->pb->data = grown;
    return 0;
}

int kestrel_job_spec_set_environment(kestrel_job_spec *s, const char *name)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (name == NULL || !name[0] || !kestrel__text_is_clean(name, 64) || strchr(name, ' '))
        return kestrel__error_set(KESTREL_EINVALID, "bad environment name '%.64s'", name ? name : "");
    return kestrel__wire_set_string(&s->pb->environment, name);
}

int kestrel_job_spec_set_requirements(kestrel_job_spec *s, const char *text)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (text == NULL || !text[0] || !kestrel__utf8_valid(text, strlen(text)))
        return kestrel__error_set(KESTREL_EINVALID, "requirements must be UTF-8 text");
    if (strlen(text) > KESTREL__REQUIREMENTS_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "requirements of %zu bytes, at most %d", strlen(text),
                                  KESTREL__REQUIREMENTS_MAX);
    return kestrel__wire_set_string(&s->pb->requirements, text);
}

int kestrel_job_spec_set_retry(kestrel_job_spec *s, int retry)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    s->pb->no_retry = !retry;
    return 0;
}
