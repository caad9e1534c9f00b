/* lib/console.c - the web console's address with a one-time login code (POST /ui/login-code). */
#include <stdio.h>
#include <string.h>
#include "client.h"
#include "http.h"

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
