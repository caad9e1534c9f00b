/* lib/console.c - what the console and the CLI's -o json read: the console's address with a one-time
 * login code (POST /ui/login-code), and any GET of the API as the server's own JSON. */
#include <stdio.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "repo.h"

int kestrel_client_console_url(kestrel_buf *out, kestrel_client *c)
{
    kestrel__request req = { "POST", "/ui/login-code", NULL, &kestrel__v1__console_login_code__descriptor, 0, 0 };
    ProtobufCMessage *m = NULL;
    const Kestrel__V1__ConsoleLoginCode *code;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    code = (const Kestrel__V1__ConsoleLoginCode *)m;
    kestrel_buf_dispose(out);
    if (strncmp(code->path, "/?code=", 7)) {
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_set(KESTREL_EPROTO, "the server sent no login code");
    }
    rc = kestrel__buf_puts(out, kestrel_client_url(c)) < 0 || kestrel__buf_puts(out, code->path) < 0
             ? kestrel__error_oom() : 0;
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int kestrel_client_get_json(kestrel_buf *out, kestrel_client *c, const char *path)
{
    kestrel__request req = { "GET", path, NULL, NULL, 1, 0, out };
    if (out == NULL || path == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out and path must not be NULL");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (path[0] != '/' || strchr(path, '#') || strpbrk(path, " \r\n"))
        return kestrel__error_set(KESTREL_EINVALID, "path: an absolute path of the API with its query, e.g. "
                                  "/api/v1/jobs?state=running, not '%.80s'", path);
    if (c->store_root)   /* a file:// repository: its listings, from the store */
        return kestrel__repo_get_json(out, c, path);
    return kestrel__http_call(NULL, c, &req);
}
