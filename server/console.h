/* server/console.h - the web console kestreld serves at /: its pages (compiled into kestreld), the
 * login that turns a token into a session cookie, and the CSRF rule of cookie-borne requests.
 *
 * Who may use it: the pages themselves are public (they hold no data); everything they show comes
 * from the JSON API with the rights of the token the session was made from (read-scoped tokens
 * see and cannot act; job and metrics tokens cannot log in). A session lives 12 hours or until
 * logout, in kestreld's memory only (a restart logs everyone out), and ends with its token: every
 * request looks the token up again, so a revoked or expired token ends its sessions at once. */
#ifndef KD_CONSOLE_H
#define KD_CONSOLE_H

#include "api.h"

typedef struct kd_console kd_console;

#define KD_SESSIONS_MAX 4096
#define KD_SESSION_TTL_MS (12 * 3600 * 1000LL)
#define KD_SESSIONS_PER_USER 16   /* all of a user's tokens together: a user may hold 1000 */
#define KD_LOGIN_CODES_MAX 256
#define KD_LOGIN_CODES_PER_USER 4
#define KD_LOGIN_CODE_TTL_MS (120 * 1000LL)
#define KD_SESSION_COOKIE "kestrel_session"
#define KD_CSRF_HEADER "X-Kestrel-CSRF"

/* secure: kestreld serves TLS (cookies then carry Secure). */
int kd_console_new(kd_console **out, int secure);
void kd_console_free(kd_console *c);

/* The session a request's cookie names: 0 with the token's hash (65 bytes) and, when csrf is not
 * NULL, whether the request carries the session's CSRF token (1) or not (0); -1 when there is no
 * live session. */
int kd_console_session(kd_console *c, kd_req *r, char token_hash[65], int *csrf_ok);

/* Forget the session a request's cookie names (its token no longer works). */
void kd_console_forget(kd_console *c, kd_req *r);

/* GET /[?token=T|?code=C], GET /ui/ASSET, POST /ui/login, POST /ui/logout, GET /ui/session,
 * POST /ui/login-code (a bearer token). */
enum MHD_Result kd_console_route(kd_console *c, kd_req *r);

/* The embedded files (console_assets.c, generated at build time from web/ and the chart library). */
typedef struct {
    const char *path;           /* "/ui/js/app.js" */
    const char *content_type;
    const unsigned char *data;
    const unsigned char *end;
} kd_asset;
extern const kd_asset kd_assets[];
extern const size_t kd_assets_count;

#endif
