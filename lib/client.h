/* lib/client.h - the client handle's private layout. */
#ifndef KESTREL_CLIENT_PRIV_H
#define KESTREL_CLIENT_PRIV_H

#include <curl/curl.h>
#include "internal.h"

struct kestrel_client {
    uint32_t magic;
    char *url;
    char *auth_header;      /* "Authorization: Bearer ..." or NULL */
    kestrel_client_options opts;
    CURL *curl;             /* one easy handle: connection reuse across calls */
    char *store_root;       /* file:// repositories: the directory, else NULL */
};

#endif
