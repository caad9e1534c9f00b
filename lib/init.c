/* lib/init.c - reference-counted global init, version and features. */
#include <pthread.h>
#include <curl/curl.h>
#include "internal.h"

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;

int kestrel_init(void)
{
    int n;
    pthread_mutex_lock(&init_lock);
    if (init_count == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        pthread_mutex_unlock(&init_lock);
        return kestrel__error_set(KESTREL_ERROR, "curl_global_init failed");
    }
    n = ++init_count;
    pthread_mutex_unlock(&init_lock);
    return n;
}

int kestrel_shutdown(void)
{
    int n;
    pthread_mutex_lock(&init_lock);
    if (init_count == 0) {
        pthread_mutex_unlock(&init_lock);
        return kestrel__error_set(KESTREL_EMISUSE, "kestrel_shutdown() without kestrel_init()");
    }
    n = --init_count;
    if (n == 0)
        curl_global_cleanup();
    pthread_mutex_unlock(&init_lock);
    return n;
}

int kestrel__initialized(void)
{
    int n;
    pthread_mutex_lock(&init_lock);
    n = init_count;
    pthread_mutex_unlock(&init_lock);
    return n > 0;
}

int kestrel__require_init(void)
{
    if (!kestrel__initialized())
        return kestrel__error_set(KESTREL_EMISUSE, "kestrel_init() has not been called");
    return 0;
}

const char *kestrel_version(void)
{
    return KESTREL_VERSION_STRING;
}

int kestrel_version_number(void)
{
    return KESTREL_VERSION_NUMBER;
}

unsigned int kestrel_features(void)
{
    unsigned int f = KESTREL_FEATURE_PROTOBUF | KESTREL_FEATURE_THREADS;
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    if (v && (v->features & CURL_VERSION_SSL))
        f |= KESTREL_FEATURE_HTTPS;
    return f;
}
