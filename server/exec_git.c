/* server/exec_git.c - a job's --git source: cloned and checked out as the job's identity.
 *
 * A URL may carry credentials (https://user:token@host/repo.git). They never reach git's argv, which
 * every account on the host may read in /proc/PID/cmdline while the clone runs, nor a log line, a
 * failure reason or a model's lineage, which other users may read: git gets the bare URL and takes
 * them from a credential helper that reads its environment (GIT_CONFIG_COUNT, git 2.31 and later;
 * environ is the identity's alone). Only git's own transports are allowed (GIT_ALLOW_PROTOCOL:
 * fd:: waited for good on a descriptor nobody writes), and a clone is stopped by the job's cancel
 * and after CLONE_TIMEOUT_S (a server that accepts and never answers held the job's GPUs). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec_util.h"

#define CLONE_TIMEOUT_S 3600

/* The n bytes at s, %XX decoded, into out (m bytes): 0, or -1 where they do not fit or hold a CR, LF
 * or NUL (a line of git's credential protocol each: a password's rest would be read as more keys,
 * and git's complaint would print it). */
static int decoded(const char *s, size_t n, char *out, size_t m)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) && isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = { s[i + 1], s[i + 2], 0 };
            c = (char)strtol(hex, NULL, 16);
            i += 2;
        }
        if (k + 1 >= m || c == '\r' || c == '\n' || c == '\0')
            return -1;
        out[k++] = c;
    }
    out[k] = '\0';
    return 0;
}

/* Where url's userinfo is (SCHEME://USERINFO@host...): 1 with [*at, *end) it, the '@' at *end; else
 * 0. secret: only what holds credentials, any scheme's "user:password" and http(s)'s "token". */
static int userinfo(const char *url, const char **at, const char **end, int secret)
{
    const char *host = strstr(url, "://"), *stop, *a = NULL;
    int web = !strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8);
    if (host == NULL || strcspn(url, "/?#@") < (size_t)(host - url))
        return 0;
    host += 3;
    stop = host + strcspn(host, "/?#");
    for (const char *c = host; c < stop; c++)
        if (*c == '@')
            a = c;   /* the last one: a password may hold '@' only %-encoded, but be lenient */
    if (a == NULL || (secret && !web && !memchr(host, ':', (size_t)(a - host))))
        return 0;
    *at = host;
    *end = a;
    return 1;
}

void kd_git_url_shown(const char *url, char *out, size_t n)
{
    const char *at, *end;
    if (!userinfo(url, &at, &end, 1))
        snprintf(out, n, "%s", url);
    else
        snprintf(out, n, "%.*s***%s", (int)(at - url), url, end);
}

/* Log a helper's output as SYSTEM lines; leave in why its first "fatal:" or "error:" line, else its
 * last non-empty one (git's last line can be the tail of a message wrapped over two). */
static void log_output(kd_engine *e, int64_t id, kestrel_buf *out, char *why, size_t n)
{
    char *line = out->ptr, *nl;
    int fatal = 0;
    why[0] = '\0';
    while (line && *line) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (*line) {
            kd_exec_sanitize(line, strlen(line));
            kd_exec_log(e, id, "%s", line);
            if (!fatal)
                snprintf(why, n, "%s", line);
            fatal |= !strncmp(line, "fatal:", 6) || !strncmp(line, "error:", 6);
        }
        line = nl ? nl + 1 : NULL;
    }
}

int kd_exec_checkout(kd_engine *e, const Kestrel__V1__JobSpec *spec, int64_t id, const char *work, char *why, size_t n,
                     const kd_exec_as *as)
{
    kestrel_buf out = KESTREL_BUF_INIT;
    char last[512], shown[KD_GIT_URL_SHOWN_MAX], bare[KD_GIT_URL_SHOWN_MAX], user[600] = "", pass[1200] = "";
    char env_user[620], env_pass[1220], env_host[300], env_proto[40];
    const char *at, *end;
    /* the job's own git config (its HOME is the job dir, which an earlier run of the user's wrote) is
     * not read: a helper of its own there would be told the password (git's "store"), and a
     * url.insteadOf or core.sshCommand would move the clone elsewhere; git's helpers cleared (the
     * empty one), then, with credentials, one that gives them to the URL's own scheme and host alone
     * (a redirect elsewhere asks too) */
    char *env[] = { "GIT_ALLOW_PROTOCOL=http:https:ssh:git:file", "GIT_PROTOCOL_FROM_USER=0", "GIT_CONFIG_GLOBAL=/dev/null",
                    "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=credential.helper", "GIT_CONFIG_VALUE_0=",
                    "GIT_CONFIG_KEY_1=credential.helper",
                    "GIT_CONFIG_VALUE_1=!f() { test \"$1\" = get || return 0; h=; p=; while IFS= read -r l; do "
                    "case \"$l\" in host=*) h=${l#host=};; protocol=*) p=${l#protocol=};; '') break;; esac; done; "
                    "test \"$h\" = \"$KESTREL_GIT_HOST\" && test \"$p\" = \"$KESTREL_GIT_PROTOCOL\" && "
                    "printf 'username=%s\\npassword=%s\\n' \"$KESTREL_GIT_USER\" \"$KESTREL_GIT_PASSWORD\"; }; f",
                    env_user, env_pass, env_host, env_proto, NULL };
    kd_exec_as run = as ? *as : (kd_exec_as){ 0 };
    /* the job's identity clones; a repository on this host may belong to another account, which git's
     * upload-pack refuses unless told (safe.directory counts only from the command line or global config);
     * told only there: over ssh that command runs on the server, whose restricted shell (a forge's) takes
     * git-upload-pack alone (a review) */
    char *clone[] = { "git", "-c", "safe.directory=*", "clone", "--quiet", "--no-checkout", "--upload-pack",
                      "git -c safe.directory='*' upload-pack", "--", bare, (char *)work, NULL };
    char *co[] = { "git", "checkout", "--quiet", "--detach", spec->git_ref[0] ? spec->git_ref : "HEAD", "--", NULL };
    char *rev[] = { "git", "rev-parse", "--verify", "HEAD^{commit}", NULL };
    int rc, creds = userinfo(spec->git_url, &at, &end, 1) && (!strncasecmp(spec->git_url, "http", 4));

    kd_git_url_shown(spec->git_url, shown, sizeof(shown));
    if (creds) {
        const char *colon = memchr(at, ':', (size_t)(end - at)), *host = end + 1;
        size_t scheme = (size_t)(strstr(spec->git_url, "://") - spec->git_url);
        if (decoded(at, (size_t)((colon ? colon : end) - at), user, sizeof(user)) < 0 ||
            (colon && decoded(colon + 1, (size_t)(end - colon - 1), pass, sizeof(pass)) < 0)) {
            snprintf(why, n, "the credentials in the --git URL %s are too long or hold a line break: not used", shown);
            return -1;
        }
        snprintf(bare, sizeof(bare), "%.*s%s", (int)(at - spec->git_url), spec->git_url, host);
        snprintf(env_host, sizeof(env_host), "KESTREL_GIT_HOST=%.*s", (int)strcspn(host, "/?#"), host);
        snprintf(env_proto, sizeof(env_proto), "KESTREL_GIT_PROTOCOL=%.*s", (int)scheme, spec->git_url);
        for (char *c = env_proto + 21; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        env[3] = "GIT_CONFIG_COUNT=2";
    } else if (userinfo(spec->git_url, &at, &end, 1)) {   /* ssh://user:password@: ssh takes no password */
        const char *colon = memchr(at, ':', (size_t)(end - at));
        snprintf(bare, sizeof(bare), "%.*s%s", (int)((colon ? colon : end) - spec->git_url), spec->git_url, end);
        env[6] = NULL;
    } else {
        snprintf(bare, sizeof(bare), "%s", spec->git_url);
        env[6] = NULL;   /* git's helpers cleared, none of ours: its own prompts stay off (GIT_TERMINAL_PROMPT=0) */
    }
    snprintf(env_user, sizeof(env_user), "KESTREL_GIT_USER=%s", user);
    snprintf(env_pass, sizeof(env_pass), "KESTREL_GIT_PASSWORD=%s", pass);
    if (strncasecmp(spec->git_url, "file://", 7) && spec->git_url[0] != '/' && spec->git_url[0] != '.')
        memmove(&clone[6], &clone[8], 4 * sizeof(clone[0]));   /* not this host's: "--", bare, work, NULL */
    run.env = env;
    run.timeout_s = CLONE_TIMEOUT_S;
    kd_exec_log(e, id, "cloning %s%s%s", shown, spec->git_ref[0] ? " at " : "", spec->git_ref);
    for (int step = 0; step < 2; step++) {
        rc = kd_exec_run(step ? co : clone, step ? work : as ? as->home : NULL, &out, &run);
        log_output(e, id, &out, last, sizeof(last));
        if (rc != 0) {
            snprintf(why, n, "git %s of %s failed: %s", step ? "checkout" : "clone", step ? spec->git_ref : shown,
                     last[0] ? last : "no output");
            goto fail;
        }
        out.size = 0;
    }
    if (out.ptr)
        out.ptr[0] = '\0';
    rc = kd_exec_run(rev, work, &out, &run);
    if (rc != 0 || out.size < 40) {
        snprintf(why, n, "cannot resolve the checked-out commit");
        goto fail;
    }
    out.ptr[40] = '\0';
    kd_catalog_job_set_commit(e->cat, id, out.ptr);
    kd_exec_log(e, id, "checked out commit %s", out.ptr);
    kestrel_buf_dispose(&out);
    return 0;
fail:
    kestrel_buf_dispose(&out);
    return -1;
}
