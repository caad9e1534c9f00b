/* Integration: kill -9 of kestreld with jobs running, restart, and a clean SIGTERM stop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "harness.h"

static const char *const EXTRA[] = { "--grace-period=2", NULL };

static int64_t submit(kestrel_client *c, const char *name, int retry)
{
    const char *argv[] = { "sh", "-c", "echo pid=$$; exec sleep 300" };
    kestrel_job_spec *s;
    kestrel_job *j;
    int64_t id;
    kestrel_job_spec_new(&s);
    kestrel_job_spec_set_argv(s, argv, 3);
    kestrel_job_spec_set_name(s, name);
    kestrel_job_spec_set_retry(s, retry);
    assert_int_equal(kestrel_job_submit(&j, c, s), 0);
    id = kestrel_job_id(j);
    kestrel_job_free(j);
    kestrel_job_spec_free(s);
    return id;
}

static int pid_line(const kestrel_log_line *l, void *payload)
{
    if (!strncmp(l->text, "pid=", 4)) {
        *(pid_t *)payload = (pid_t)atoi(l->text + 4);
        return 1;
    }
    return 0;
}

/* Follow the job's log until it prints its pid (restart_count-th run: skip earlier runs' lines). */
static pid_t job_pid(kestrel_client *c, int64_t id, int64_t from)
{
    kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
    pid_t pid = 0;
    lo.follow = 1;
    lo.offset = from;
    lo.timeout_ms = 20000;
    assert_int_equal(kestrel_job_logs(NULL, c, id, &lo, pid_line, &pid), KESTREL_ECANCELLED);
    return pid;
}

static kestrel_job *get(kestrel_client *c, int64_t id)
{
    kestrel_job *j;
    assert_int_equal(kestrel_job_get(&j, c, id), 0);
    return j;
}

static int has_event(const kestrel_job *j, const char *reason)
{
    for (size_t i = 0; i < kestrel_job_event_count(j); i++)
        if (strstr(kestrel_job_event_at(j, i)->reason, reason))
            return 1;
    return 0;
}

static int alive(pid_t pid)
{
    /* a zombie is not alive: it is reaped by init, look at /proc state */
    char path[64], buf[512], *p;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    buf[fread(buf, 1, sizeof(buf) - 1, f)] = '\0';
    fclose(f);
    p = strrchr(buf, ')');
    return p && p[2] != 'Z';
}

static void kill9_then_restart(void **state)
{
    kd_daemon d;
    kestrel_client *c;
    int64_t retry, noretry;
    pid_t p1, p2;
    kestrel_job *j;
    (void)state;
    kestrel_init();
    memset(&d, 0, sizeof(d));
    assert_int_equal(kd_daemon_start(&d, NULL, EXTRA), 0);
    c = kd_client(&d, NULL);
    retry = submit(c, "retry-me", 1);
    noretry = submit(c, "no-retry", 0);
    p1 = job_pid(c, retry, 0);
    p2 = job_pid(c, noretry, 0);
    assert_true(p1 > 0 && p2 > 0);
    kestrel_client_free(c);

    assert_int_equal(kd_daemon_stop(&d, SIGKILL, 5000), SIGKILL);
    assert_true(alive(p1));   /* orphaned, still running: the restart must deal with it */

    assert_int_equal(kd_daemon_start(&d, d.dir, EXTRA), 0);
    c = kd_client(&d, NULL);
    j = get(c, noretry);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_FAILED);
    assert_string_equal(kestrel_job_reason(j), "daemon restarted");
    kestrel_job_free(j);
    j = get(c, retry);
    assert_int_not_equal(kestrel_job_state(j), KESTREL_JOB_STATE_FAILED);
    assert_int_equal(kestrel_job_restart_count(j), 1);
    assert_true(has_event(j, "requeued: daemon restarted"));
    kestrel_job_free(j);
    for (int i = 0; i < 100 && (alive(p1) || alive(p2)); i++)
        usleep(20000);
    assert_false(alive(p1));
    assert_false(alive(p2));
    /* the requeued job runs again, in a new process */
    {
        pid_t again = job_pid(c, retry, 1);
        assert_true(again > 0 && again != p1);
    }

    /* SIGTERM: the daemon stops its job within the grace period, requeues it, exits 0 */
    kestrel_client_free(c);
    assert_int_equal(kd_daemon_stop(&d, SIGTERM, 10000), 0);
    assert_int_equal(kd_daemon_start(&d, d.dir, EXTRA), 0);
    c = kd_client(&d, NULL);
    j = get(c, retry);
    assert_true(has_event(j, "requeued: daemon shutting down"));
    assert_int_equal(kestrel_job_restart_count(j), 2);
    kestrel_job_free(j);
    assert_int_equal(kestrel_job_cancel(NULL, c, retry), 0);
    assert_int_equal(kestrel_job_wait(&j, c, retry, 20000), 0);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_CANCELLED);
    kestrel_job_free(j);
    kestrel_client_free(c);
    assert_int_equal(kd_daemon_stop(&d, SIGTERM, 10000), 0);
    kd_daemon_cleanup(&d);
    kestrel_shutdown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kill9_then_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
