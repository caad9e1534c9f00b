/* Unit tests: the job state machine as the catalog enforces it (real SQLite, temp file). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "catalog.h"

typedef struct {
    char dir[64];
    kd_catalog *cat;
    int64_t uid, job;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    char path[128];
    static char *argv[] = { "true" };
    Kestrel__V1__JobSpec spec = KESTREL__V1__JOB_SPEC__INIT;
    snprintf(f->dir, sizeof(f->dir), "/tmp/kestrel-state-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(path, sizeof(path), "%s/catalog.db", f->dir);
    assert_int_equal(kd_catalog_open(&f->cat, path), 0);
    assert_int_equal(kd_catalog_user_ensure(f->cat, "alice", 0, "vision", &f->uid, NULL), 0);
    spec.argv = argv;
    spec.n_argv = 1;
    spec.priority = KESTREL__V1__PRIORITY__HIGH;
    assert_int_equal(kd_catalog_job_insert(f->cat, f->uid, &spec, 1000, &f->job, NULL), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[128];
    kd_catalog_close(f->cat);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static int state_of(fixture *f)
{
    int s = -1;
    assert_int_equal(kd_catalog_job_state(f->cat, f->job, &s), 0);
    return s;
}

static void full_lifecycle_records_events(void **state)
{
    fixture *f = *state;
    kd_transition run = { 2000, "started", 0, 0, "GPU-1", 0 }, done = { 3000, "exit code 0", 0, 1, NULL, 0 };
    Kestrel__V1__Job *j;
    assert_int_equal(state_of(f), KESTREL_JOB_STATE_QUEUED);
    assert_int_equal(kd_catalog_job_transition(f->cat, f->job, 1, 2, &run), 0);
    assert_int_equal(kd_catalog_job_transition(f->cat, f->job, 2, 3, &done), 0);
    assert_int_equal(kd_catalog_job_load(f->cat, f->job, 1, &j, NULL), 0);
    assert_int_equal(j->state, KESTREL__V1__JOB_STATE__SUCCEEDED);
    assert_int_equal(j->start_time_ms, 2000);
    assert_int_equal(j->end_time_ms, 3000);
    assert_int_equal(j->exit_code, 0);
    assert_int_equal(j->n_events, 3);
    assert_int_equal(j->events[1]->from_state, KESTREL__V1__JOB_STATE__QUEUED);
    assert_int_equal(j->events[1]->to_state, KESTREL__V1__JOB_STATE__RUNNING);
    assert_string_equal(j->events[2]->reason, "exit code 0");
    assert_string_equal(j->devices[0], "GPU-1");
    assert_string_equal(j->owner, "alice");
    protobuf_c_message_free_unpacked(&j->base, NULL);
}

static void final_states_are_final(void **state)
{
    fixture *f = *state;
    kd_transition t = { 2000, "cancelled by alice", 0, 0, NULL, 0 };
    assert_int_equal(kd_catalog_job_transition(f->cat, f->job, 1, 5, &t), 0);
    /* neither a stale executor (expects RUNNING) nor "any non-final" may move it again */
    assert_int_equal(kd_catalog_job_transition(f->cat, f->job, 2, 4, &t), 1);
    assert_int_equal(kd_catalog_job_transition(f->cat, f->job, -1, 1, &t), 1);
    assert_int_equal(state_of(f), KESTREL_JOB_STATE_CANCELLED);
}

static void requeue_keeps_submit_time_and_counts_restarts(void **state)
{
    fixture *f = *state;
    kd_transition run = { 2000, "started", 0, 0, NULL, 0 }, back = { 2500, "requeued", 0, 0, NULL, 1 };
    kd_job_row *rows;
    size_t n;
    assert_int_equal(kd_catalog_job_transition(f->cat, f->job, 1, 2, &run), 0);
    assert_int_equal(kd_catalog_job_transition(f->cat, f->job, 2, 1, &back), 0);
    assert_int_equal(kd_catalog_jobs_in_state(f->cat, KESTREL_JOB_STATE_QUEUED, 10, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].submit_ms, 1000);
    assert_int_equal(rows[0].restart_count, 1);
    assert_int_equal(rows[0].priority, 2);
    free(rows);
}

static void missing_job(void **state)
{
    fixture *f = *state;
    kd_transition t = { 1, "x", 0, 0, NULL, 0 };
    Kestrel__V1__Job *j;
    assert_int_equal(kd_catalog_job_transition(f->cat, 999, 1, 2, &t), KESTREL_ENOTFOUND);
    assert_int_equal(kd_catalog_job_load(f->cat, 999, 0, &j, NULL), KESTREL_ENOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(full_lifecycle_records_events, setup, teardown),
        cmocka_unit_test_setup_teardown(final_states_are_final, setup, teardown),
        cmocka_unit_test_setup_teardown(requeue_keeps_submit_time_and_counts_restarts, setup, teardown),
        cmocka_unit_test_setup_teardown(missing_job, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
