/* tests/integration/harness.h - start the real kestreld on an ephemeral loopback port. */
#ifndef KESTREL_TEST_HARNESS_H
#define KESTREL_TEST_HARNESS_H

#include <sys/types.h>
#include <kestrel.h>

typedef struct {
    pid_t pid;
    int port;
    char dir[128];      /* data dir */
    char url[64];
    char token[128];    /* admin token */
} kd_daemon;

/* Start kestreld with a data dir (created under /tmp when dir is NULL) and extra flags
 * (NULL-terminated). Waits until it listens. Returns 0 or -1. */
int kd_daemon_start(kd_daemon *d, const char *dir, const char *const *extra);
/* Send sig and wait for the process to exit (up to timeout_ms); returns its wait status or -1. */
int kd_daemon_stop(kd_daemon *d, int sig, long timeout_ms);
/* Remove the data dir. */
void kd_daemon_cleanup(kd_daemon *d);
/* A client for the daemon with the given token (admin token when NULL). */
kestrel_client *kd_client(const kd_daemon *d, const char *token);

/* Raw HTTP for bad-input tests: returns the status, body in *body (malloc'd, may be NULL). */
long kd_http(const kd_daemon *d, const char *method, const char *path, const char *token, const char *ctype,
             const void *data, size_t len, char **body);
/* Create a user token through the admin API. */
int kd_make_user(const kd_daemon *d, const char *user, char *token, size_t n);
/* Count jobs visible to the admin. */
int kd_count_jobs(const kd_daemon *d);

#endif
