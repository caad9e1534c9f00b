/* kestrel/client.h - a session with one kestreld. */
#ifndef KESTREL_CLIENT_H
#define KESTREL_CLIENT_H

#include "common.h"

KESTREL_BEGIN_DECL

/** A session with one kestreld: base URL, token, timeouts, retries. Opaque. */
typedef struct kestrel_client kestrel_client;

/**
 * Client options. Initialise with KESTREL_CLIENT_OPTIONS_INIT; zero means default.
 * Strings are copied by kestrel_client_new().
 */
typedef struct kestrel_client_options {
    unsigned int version;       /**< KESTREL_CLIENT_OPTIONS_VERSION */
    const char *token;          /**< bearer token; NULL: $KESTREL_TOKEN, else none */
    long connect_timeout_ms;    /**< 0: 10000 */
    long timeout_ms;            /**< whole-request timeout (long polls add their wait); 0: 60000 */
    int max_retries;            /**< retries of an idempotent request (a push's commit is one, to a kestreld
                                     that keeps its key) on transport errors but timeouts, and on 502/503/504;
                                     kestreld's 503 "unavailable" (busy) any request, and such a commit
                                     any of those, at least 8 times (about 25 s), and a timeout once;
                                     0: 3, negative: none */
    long retry_backoff_ms;      /**< first backoff, doubled each retry; 0: 100 */
} kestrel_client_options;

#define KESTREL_CLIENT_OPTIONS_VERSION 1
#define KESTREL_CLIENT_OPTIONS_INIT { KESTREL_CLIENT_OPTIONS_VERSION }

/** Initialise opts to the defaults of the given version. Returns 0 or KESTREL_EMISUSE. */
KESTREL_API int kestrel_client_options_init(kestrel_client_options *opts, unsigned int version);

/**
 * Create a client for url ("http://host:port" or "https://..."; NULL:
 * $KESTREL_URL). Makes no request. On success *out is owned: free it with
 * kestrel_client_free() after every job handle obtained from it.
 */
KESTREL_API int kestrel_client_new(kestrel_client **out, const char *url, const kestrel_client_options *opts);

/** Free a client. Accepts NULL. */
KESTREL_API void kestrel_client_free(kestrel_client *client);

/** The client's base URL, without trailing slash (borrowed from client). */
KESTREL_API const char *kestrel_client_url(const kestrel_client *client);

/**
 * Ask the server for its health and version (GET /healthz, no token needed).
 * On success the server's version string is filled into version_out (may be NULL).
 */
KESTREL_API int kestrel_client_ping(kestrel_buf *version_out, kestrel_client *client);

/**
 * The address of the server's web console with a one-time login code: opening it within a minute
 * logs a browser in as this client's token (once; the code is then spent), so the token itself is
 * never put in an address, a browser's history or a process list. Fills out (owned:
 * kestrel_buf_dispose()) with "URL/?code=CODE". KESTREL_EAUTH for a job's or a metrics token, which
 * cannot log in. Since KESTREL_1.3.
 */
KESTREL_API int kestrel_client_console_url(kestrel_buf *out, kestrel_client *client);

/**
 * GET path ("/api/v1/jobs?state=running": an absolute path of the HTTP API with its query, values
 * percent-encoded) and fill out (owned: kestrel_buf_dispose()) with the server's JSON reply as it
 * came: the same bytes curl would print, for tools that pass the API's messages on. The same
 * errors as the typed calls (KESTREL_ENOTFOUND, KESTREL_EAUTH, ...). A file:// client answers the
 * repository's listings, /api/v1/models and /api/v1/models/NAME/versions, from its store in the
 * same JSON, and any other path with KESTREL_EUNSUPPORTED. Since KESTREL_1.3.
 */
KESTREL_API int kestrel_client_get_json(kestrel_buf *out, kestrel_client *client, const char *path);

KESTREL_END_DECL

#endif
