/* Integration: jobs through libkestrel against the real kestreld. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <cmocka.h>
#include "harness.h"

static kd_daemon D;
static kestrel_client *C;

static int group_setup(void **state)
{
    static const char *const extra[] = { "--gpus=1", "--grace-period=2", NULL };
    (void)state;
    kestrel_init();
    if (kd_daemon_start(&D, NULL, extra) < 0)
        return -1;
    C = kd_client(&D, NULL);
    return C ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    kestrel_client_free(C);
    assert_int_equal(kd_daemon_stop(&D, SIGTERM, 20000), 0);
    kd_daemon_cleanup(&D);
    kestrel_shutdown();
    return 0;
}

static int64_t submit(const char *name, int gpus, int priority, const char *script)
{
    const char *argv[] = { "sh", "-c", script };
    kestrel_job_spec *s;
    kestrel_job *j;
    int64_t id;
    assert_int_equal(kestrel_job_spec_new(&s), 0);
    assert_int_equal(kestrel_job_spec_set_argv(s, argv, 3), 0);
    assert_int_equal(kestrel_job_spec_set_name(s, name), 0);
    assert_int_equal(kestrel_job_spec_set_gpus(s, gpus), 0);
    assert_int_equal(kestrel_job_spec_set_priority(s, priority), 0);
    assert_int_equal(kestrel_job_submit(&j, C, s), 0);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_QUEUED);
    id = kestrel_job_id(j);
    kestrel_job_free(j);
    kestrel_job_spec_free(s);
    return id;
}

static kestrel_job *wait_final(int64_t id)
{
    kestrel_job *j = NULL;
    int rc = kestrel_job_wait(&j, C, id, 30000);
    if (rc < 0)
        fail_msg("wait %lld: %s", (long long)id, kestrel_error_last()->message);
    return j;
}

static void wait_running(int64_t id)
{
    for (int i = 0; i < 500; i++) {
        kestrel_job *j;
        assert_int_equal(kestrel_job_get(&j, C, id), 0);
        if (kestrel_job_state(j) == KESTREL_JOB_STATE_RUNNING) {
            kestrel_job_free(j);
            return;
        }
        kestrel_job_free(j);
        usleep(20000);
    }
    fail_msg("job %lld never ran", (long long)id);
}

typedef struct {
    int n;
    char text[64][256];
    int stream[64];
    int64_t last_offset;
} collected;

static int collect(const kestrel_log_line *l, void *payload)
{
    collected *c = payload;
    if (c->n < 64) {
        snprintf(c->text[c->n], sizeof(c->text[0]), "%s", l->text);
        c->stream[c->n] = l->stream;
        c->n++;
    }
    c->last_offset = l->offset;
    return 0;
}

static int ready_line(const kestrel_log_line *l, void *payload)
{
    (void)payload;
    return strcmp(l->text, "ready") == 0;   /* stop at it */
}

/* Wait until the job's process printed "ready" (RUNNING alone may precede the exec). */
static void wait_ready(int64_t id)
{
    kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
    lo.follow = 1;
    lo.timeout_ms = 20000;
    assert_int_equal(kestrel_job_logs(NULL, C, id, &lo, ready_line, NULL), KESTREL_ECANCELLED);
}

static int has_line(const collected *c, const char *prefix)
{
    for (int i = 0; i < c->n; i++)
        if (!strncmp(c->text[i], prefix, strlen(prefix)))
            return i;
    return -1;
}

static void exit_code_and_events(void **state)
{
    int64_t id = submit("fails", 0, KESTREL_PRIORITY_NORMAL, "echo out; echo err >&2; exit 3");
    kestrel_job *j = wait_final(id);
    (void)state;
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_FAILED);
    assert_int_equal(kestrel_job_exit_code(j), 3);
    assert_string_equal(kestrel_job_reason(j), "exit code 3");
    assert_string_equal(kestrel_job_owner(j), "admin");
    assert_int_equal(kestrel_job_event_count(j), 3);
    assert_int_equal(kestrel_job_event_at(j, 1)->to_state, KESTREL_JOB_STATE_RUNNING);
    assert_int_equal(kestrel_job_event_at(j, 2)->to_state, KESTREL_JOB_STATE_FAILED);
    assert_true(kestrel_job_end_time(j) >= kestrel_job_start_time(j));
    assert_true(kestrel_job_start_time(j) >= kestrel_job_submit_time(j));
    kestrel_job_free(j);
}

static void environment_contract(void **state)
{
    const char *argv[] = { "sh", "-c",
        "echo id=$KESTREL_JOB_ID; echo url=$KESTREL_URL; echo name=$KESTREL_JOB_NAME; echo cvd=[$CUDA_VISIBLE_DEVICES];"
        " echo order=$CUDA_DEVICE_ORDER; echo ckpt=$KESTREL_CHECKPOINT_DIR; echo restarts=$KESTREL_RESTART_COUNT;"
        " echo mine=$MY_VAR; echo tok=${KESTREL_TOKEN:+set}; pwd" };
    kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
    kestrel_job_spec *s;
    kestrel_job *j;
    collected c;
    char want[128];
    int64_t id;
    (void)state;
    memset(&c, 0, sizeof(c));
    kestrel_job_spec_new(&s);
    kestrel_job_spec_set_argv(s, argv, 3);
    kestrel_job_spec_set_name(s, "env-check");
    kestrel_job_spec_set_env(s, "MY_VAR", "hello world");
    assert_int_equal(kestrel_job_submit(&j, C, s), 0);
    id = kestrel_job_id(j);
    kestrel_job_free(j);
    kestrel_job_spec_free(s);
    j = wait_final(id);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_SUCCEEDED);
    kestrel_job_free(j);
    assert_int_equal(kestrel_job_logs(NULL, C, id, &lo, collect, &c), 0);
    snprintf(want, sizeof(want), "id=%lld", (long long)id);
    assert_true(has_line(&c, want) >= 0);
    snprintf(want, sizeof(want), "url=%s", D.url);
    assert_true(has_line(&c, want) >= 0);
    assert_true(has_line(&c, "name=env-check") >= 0);
    assert_true(has_line(&c, "cvd=[]") >= 0);
    assert_true(has_line(&c, "order=PCI_BUS_ID") >= 0);
    assert_true(has_line(&c, "restarts=0") >= 0);
    assert_true(has_line(&c, "mine=hello world") >= 0);
    assert_true(has_line(&c, "tok=set") >= 0);
    snprintf(want, sizeof(want), "ckpt=%s/data/jobs/%lld/checkpoint", D.dir, (long long)id);
    assert_true(has_line(&c, want) >= 0);
    snprintf(want, sizeof(want), "%s/data/jobs/%lld/work", D.dir, (long long)id);
    assert_true(has_line(&c, want) >= 0);
}

static void logs_follow_and_resume(void **state)
{
    int64_t id = submit("follow", 0, KESTREL_PRIORITY_NORMAL,
                        "for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done; echo oops >&2; printf partial");
    kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
    collected c, c2;
    int64_t next = 0;
    (void)state;
    memset(&c, 0, sizeof(c));
    memset(&c2, 0, sizeof(c2));
    lo.follow = 1;
    lo.timeout_ms = 30000;
    assert_int_equal(kestrel_job_logs(&next, C, id, &lo, collect, &c), 0);
    assert_int_equal(c.n, 7);
    for (int i = 0; i < 5; i++) {
        char want[16];
        snprintf(want, sizeof(want), "line %d", i + 1);
        assert_string_equal(c.text[i], want);
        assert_int_equal(c.stream[i], KESTREL_LOG_STDOUT);
    }
    assert_string_equal(c.text[5], "oops");
    assert_int_equal(c.stream[5], KESTREL_LOG_STDERR);
    assert_string_equal(c.text[6], "partial");
    assert_int_equal(next, 7);
    /* the job ended with the follow: reading again from an offset returns the rest only */
    lo.follow = 0;
    lo.offset = 5;
    assert_int_equal(kestrel_job_logs(&next, C, id, &lo, collect, &c2), 0);
    assert_int_equal(c2.n, 2);
    assert_string_equal(c2.text[0], "oops");
}

static int stop_after_one(const kestrel_log_line *l, void *payload)
{
    (void)l;
    (*(int *)payload)++;
    return 1;
}

static void log_callback_can_stop(void **state)
{
    int64_t id = submit("stopper", 0, KESTREL_PRIORITY_NORMAL, "echo a; echo b; echo c");
    kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
    kestrel_job *j = wait_final(id);
    int calls = 0;
    (void)state;
    kestrel_job_free(j);
    assert_int_equal(kestrel_job_logs(NULL, C, id, &lo, stop_after_one, &calls), KESTREL_ECANCELLED);
    assert_int_equal(calls, 1);
}

static void cancel_running_queued_and_stubborn(void **state)
{
    int64_t gpu = submit("holds-gpu", 1, KESTREL_PRIORITY_NORMAL, "echo ready; exec sleep 30");
    int64_t queued, stubborn;
    kestrel_job *j;
    (void)state;
    wait_ready(gpu);
    queued = submit("waits-for-gpu", 1, KESTREL_PRIORITY_NORMAL, "exit 0");
    /* a queued job is cancelled at once */
    assert_int_equal(kestrel_job_cancel(&j, C, queued), 0);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_CANCELLED);
    assert_string_equal(kestrel_job_reason(j), "cancelled by admin");
    kestrel_job_free(j);
    /* a running one gets SIGTERM */
    assert_int_equal(kestrel_job_cancel(NULL, C, gpu), 0);
    j = wait_final(gpu);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_CANCELLED);
    assert_int_equal(kestrel_job_exit_code(j), 128 + 15);
    kestrel_job_free(j);
    /* one that ignores SIGTERM is killed after the grace period (2 s) */
    stubborn = submit("stubborn", 0, KESTREL_PRIORITY_NORMAL, "trap '' TERM; echo ready; while :; do sleep 0.05; done");
    wait_ready(stubborn);
    assert_int_equal(kestrel_job_cancel(NULL, C, stubborn), 0);
    j = wait_final(stubborn);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_CANCELLED);
    assert_int_equal(kestrel_job_exit_code(j), 128 + 9);
    assert_true(kestrel_job_end_time(j) - kestrel_job_start_time(j) >= 2000);
    kestrel_job_free(j);
    /* cancelling a final job changes nothing */
    assert_int_equal(kestrel_job_cancel(&j, C, stubborn), 0);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_CANCELLED);
    kestrel_job_free(j);
}

static void wait_times_out(void **state)
{
    int64_t id = submit("slow", 0, KESTREL_PRIORITY_NORMAL, "exec sleep 30");
    kestrel_job *j = NULL;
    (void)state;
    assert_int_equal(kestrel_job_wait(&j, C, id, 300), KESTREL_ETIMEOUT);
    assert_null(j);
    assert_int_equal(kestrel_job_cancel(NULL, C, id), 0);
    j = wait_final(id);
    kestrel_job_free(j);
}

static void higher_class_starts_first(void **state)
{
    int64_t blocker = submit("blocker", 1, KESTREL_PRIORITY_NORMAL, "exec sleep 30");
    int64_t normal, urgent;
    kestrel_job *a, *b;
    (void)state;
    wait_running(blocker);
    normal = submit("normal", 1, KESTREL_PRIORITY_NORMAL, "sleep 0.2");
    urgent = submit("urgent", 1, KESTREL_PRIORITY_URGENT, "sleep 0.2");
    assert_int_equal(kestrel_job_cancel(NULL, C, blocker), 0);
    a = wait_final(normal);
    b = wait_final(urgent);
    assert_int_equal(kestrel_job_state(a), KESTREL_JOB_STATE_SUCCEEDED);
    assert_int_equal(kestrel_job_state(b), KESTREL_JOB_STATE_SUCCEEDED);
    assert_true(kestrel_job_start_time(b) <= kestrel_job_start_time(a));
    assert_true(kestrel_job_end_time(b) <= kestrel_job_start_time(a));   /* one GPU: strictly after */
    kestrel_job_free(a);
    kestrel_job_free(b);
    kestrel_job_free(wait_final(blocker));
}

static void list_filters_and_pages(void **state)
{
    kestrel_job_list_options o = KESTREL_JOB_LIST_OPTIONS_INIT;
    kestrel_job_page *p;
    int64_t ids[5], seen = 0;
    char token[64] = "";
    (void)state;
    for (int i = 0; i < 5; i++) {
        const char *argv[] = { "true" };
        kestrel_job_spec *s;
        kestrel_job *j;
        char name[16];
        snprintf(name, sizeof(name), "batch-%d", i);
        kestrel_job_spec_new(&s);
        kestrel_job_spec_set_argv(s, argv, 1);
        kestrel_job_spec_set_name(s, name);
        kestrel_job_spec_set_label(s, "batch", "b1");
        assert_int_equal(kestrel_job_submit(&j, C, s), 0);
        ids[i] = kestrel_job_id(j);
        kestrel_job_free(j);
        kestrel_job_spec_free(s);
    }
    o.label = "batch=b1";
    o.page_size = 2;
    for (int page = 0; page < 3; page++) {
        o.page_token = token[0] ? token : NULL;
        assert_int_equal(kestrel_job_list(&p, C, &o), 0);
        assert_int_equal(kestrel_job_page_count(p), page < 2 ? 2 : 1);
        for (size_t i = 0; i < kestrel_job_page_count(p); i++)
            assert_int_equal(kestrel_job_id(kestrel_job_page_at(p, i)), ids[4 - seen++]);   /* newest first */
        snprintf(token, sizeof(token), "%s", kestrel_job_page_next_token(p));
        assert_int_equal(token[0] == '\0', page == 2);
        kestrel_job_page_free(p);
    }
    kestrel_job_list_options_init(&o, KESTREL_JOB_LIST_OPTIONS_VERSION);
    o.name = "batch-3";
    assert_int_equal(kestrel_job_list(&p, C, &o), 0);
    assert_int_equal(kestrel_job_page_count(p), 1);
    assert_int_equal(kestrel_job_id(kestrel_job_page_at(p, 0)), ids[3]);
    kestrel_job_page_free(p);
    kestrel_job_free(wait_final(ids[4]));
    kestrel_job_list_options_init(&o, KESTREL_JOB_LIST_OPTIONS_VERSION);
    o.state = KESTREL_JOB_STATE_RUNNING;
    o.label = "batch=b1";
    assert_int_equal(kestrel_job_list(&p, C, &o), 0);
    for (size_t i = 0; i < kestrel_job_page_count(p); i++)
        assert_int_equal(kestrel_job_state(kestrel_job_page_at(p, i)), KESTREL_JOB_STATE_RUNNING);
    kestrel_job_page_free(p);
}

static void metrics_round_trip(void **state)
{
    int64_t id = submit("metrics", 0, KESTREL_PRIORITY_NORMAL, "true");
    kestrel_metric_list *in, *out;
    (void)state;
    kestrel_metric_list_new(&in);
    kestrel_metric_list_add(in, "loss", 1, 0.9, 1000);
    kestrel_metric_list_add(in, "loss", 2, 0.5, 2000);
    kestrel_metric_list_add(in, "accuracy", 2, 0.75, 2000);
    assert_int_equal(kestrel_metric_list_add(in, "bad\nname", 1, 1, 0), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_report_metrics(C, id, in), 0);
    assert_int_equal(kestrel_job_metrics(&out, C, id, "loss"), 0);
    assert_int_equal(kestrel_metric_list_count(out), 2);
    assert_string_equal(kestrel_metric_list_at(out, 0)->name, "loss");
    assert_int_equal(kestrel_metric_list_at(out, 1)->step, 2);
    assert_true(kestrel_metric_list_at(out, 1)->value == 0.5);
    assert_int_equal(kestrel_metric_list_at(out, 1)->wall_time_ms, 2000);
    kestrel_metric_list_free(out);
    assert_int_equal(kestrel_job_metrics(&out, C, id, NULL), 0);
    assert_int_equal(kestrel_metric_list_count(out), 3);
    assert_string_equal(kestrel_metric_list_at(out, 0)->name, "accuracy");
    kestrel_metric_list_free(out);
    kestrel_metric_list_free(in);
    kestrel_job_free(wait_final(id));
}

static void tokens_and_isolation(void **state)
{
    int64_t mine = submit("admin-job", 0, KESTREL_PRIORITY_NORMAL, "true");
    kestrel_job_list_options o = KESTREL_JOB_LIST_OPTIONS_INIT;
    kestrel_client *bob, *anon, *bad;
    kestrel_job_page *p;
    kestrel_job *j;
    char tok[128];
    (void)state;
    assert_int_equal(kd_make_user(&D, "bob", tok, sizeof(tok)), 0);
    bob = kd_client(&D, tok);
    assert_int_equal(kestrel_job_get(&j, bob, mine), KESTREL_ENOTFOUND);
    assert_int_equal(kestrel_error_last()->http_status, 404);
    assert_int_equal(kestrel_job_cancel(NULL, bob, mine), KESTREL_ENOTFOUND);
    assert_int_equal(kestrel_job_list(&p, bob, &o), 0);
    assert_int_equal(kestrel_job_page_count(p), 0);
    kestrel_job_page_free(p);
    unsetenv("KESTREL_TOKEN");
    {
        kestrel_client_options co = KESTREL_CLIENT_OPTIONS_INIT;
        assert_int_equal(kestrel_client_new(&anon, D.url, &co), 0);
        co.token = "kst_not-a-real-token";
        assert_int_equal(kestrel_client_new(&bad, D.url, &co), 0);
    }
    assert_int_equal(kestrel_job_get(&j, anon, mine), KESTREL_EAUTH);
    assert_int_equal(kestrel_error_last()->http_status, 401);
    assert_int_equal(kestrel_job_get(&j, bad, mine), KESTREL_EAUTH);
    assert_int_equal(kestrel_client_ping(NULL, anon), 0);   /* /healthz needs no token */
    kestrel_client_free(anon);
    kestrel_client_free(bad);
    kestrel_client_free(bob);
    kestrel_job_free(wait_final(mine));
}

static int first_line(const kestrel_log_line *l, void *payload)
{
    snprintf(payload, 128, "%s", l->text);
    return 1;   /* stop: we have what we need */
}

static void job_token_is_scoped(void **state)
{
    int64_t other = submit("other", 0, KESTREL_PRIORITY_NORMAL, "true");
    int64_t id = submit("leaky", 0, KESTREL_PRIORITY_NORMAL, "echo token=$KESTREL_TOKEN; exec sleep 30");
    kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
    kestrel_job_list_options o = KESTREL_JOB_LIST_OPTIONS_INIT;
    const char *argv[] = { "true" };
    kestrel_metric_list *m;
    kestrel_job_spec *s;
    kestrel_job_page *p;
    kestrel_client *jc;
    kestrel_job *j;
    char line[128] = "";
    (void)state;
    lo.follow = 1;
    assert_int_equal(kestrel_job_logs(NULL, C, id, &lo, first_line, line), KESTREL_ECANCELLED);
    assert_int_equal(strncmp(line, "token=ksj_", 10), 0);
    jc = kd_client(&D, line + 6);
    /* it may read its own job and report its metrics ... */
    assert_int_equal(kestrel_job_get(&j, jc, id), 0);
    kestrel_job_free(j);
    kestrel_metric_list_new(&m);
    kestrel_metric_list_add(m, "loss", 1, 1.0, 0);
    assert_int_equal(kestrel_job_report_metrics(jc, id, m), 0);
    /* ... and nothing else */
    assert_int_equal(kestrel_job_report_metrics(jc, other, m), KESTREL_ENOTFOUND);
    assert_int_equal(kestrel_job_get(&j, jc, other), KESTREL_ENOTFOUND);
    assert_int_equal(kestrel_job_list(&p, jc, &o), KESTREL_EAUTH);
    assert_int_equal(kestrel_error_last()->http_status, 403);
    assert_int_equal(kestrel_job_cancel(NULL, jc, id), KESTREL_EAUTH);
    kestrel_job_spec_new(&s);
    kestrel_job_spec_set_argv(s, argv, 1);
    assert_int_equal(kestrel_job_submit(&j, jc, s), KESTREL_EAUTH);
    kestrel_job_spec_free(s);
    kestrel_metric_list_free(m);
    /* the token dies with the job */
    assert_int_equal(kestrel_job_cancel(NULL, C, id), 0);
    kestrel_job_free(wait_final(id));
    assert_int_equal(kestrel_job_get(&j, jc, id), KESTREL_EAUTH);
    kestrel_client_free(jc);
    kestrel_job_free(wait_final(other));
}

static void git_source_job(void **state)
{
    char repo[256], cmd[1024], sha[64] = "", url[300];
    const char *argv[] = { "sh", "run.sh" };
    kestrel_job_spec *s;
    kestrel_job *j;
    FILE *f;
    int64_t id;
    (void)state;
    snprintf(repo, sizeof(repo), "%s/src.git", D.dir);
    snprintf(cmd, sizeof(cmd),
             "set -e; d=%s/wt; git init -q -b main $d; mkdir -p $d/sub; echo 'echo from-git; cat ../VERSION' > $d/sub/run.sh;"
             " echo v1 > $d/VERSION; git -C $d -c user.email=t@e -c user.name=t add -A;"
             " git -C $d -c user.email=t@e -c user.name=t commit -qm one; git clone -q --bare $d %s;"
             " git -C $d rev-parse HEAD > %s/sha",
             D.dir, repo, D.dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s/sha", D.dir);
    f = fopen(cmd, "r");
    assert_non_null(f);
    assert_non_null(fgets(sha, sizeof(sha), f));
    fclose(f);
    sha[strcspn(sha, "\n")] = '\0';

    kestrel_job_spec_new(&s);
    kestrel_job_spec_set_argv(s, argv, 2);
    kestrel_job_spec_set_git(s, repo, "main");
    kestrel_job_spec_set_workdir(s, "sub");
    assert_int_equal(kestrel_job_submit(&j, C, s), 0);
    id = kestrel_job_id(j);
    kestrel_job_free(j);
    j = wait_final(id);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_SUCCEEDED);
    assert_string_equal(kestrel_job_git_commit(j), sha);
    kestrel_job_free(j);
    {
        kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
        collected c;
        memset(&c, 0, sizeof(c));
        kestrel_job_logs(NULL, C, id, &lo, collect, &c);
        assert_true(has_line(&c, "from-git") >= 0);
        assert_true(has_line(&c, "v1") >= 0);
    }
    /* a clone that fails: the job fails with the reason */
    snprintf(url, sizeof(url), "%s/missing.git", D.dir);
    kestrel_job_spec_set_git(s, url, NULL);
    assert_int_equal(kestrel_job_submit(&j, C, s), 0);
    id = kestrel_job_id(j);
    kestrel_job_free(j);
    j = wait_final(id);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_FAILED);
    assert_non_null(strstr(kestrel_job_reason(j), "git clone of"));
    kestrel_job_free(j);
    /* a ref that does not exist */
    kestrel_job_spec_set_git(s, repo, "no-such-branch");
    assert_int_equal(kestrel_job_submit(&j, C, s), 0);
    id = kestrel_job_id(j);
    kestrel_job_free(j);
    j = wait_final(id);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_FAILED);
    assert_non_null(strstr(kestrel_job_reason(j), "git checkout of no-such-branch failed"));
    kestrel_job_free(j);
    kestrel_job_spec_free(s);
}

static void program_not_found(void **state)
{
    const char *argv[] = { "kestrel-no-such-program" };
    kestrel_job_spec *s;
    kestrel_job *j;
    int64_t id;
    (void)state;
    kestrel_job_spec_new(&s);
    kestrel_job_spec_set_argv(s, argv, 1);
    assert_int_equal(kestrel_job_submit(&j, C, s), 0);
    id = kestrel_job_id(j);
    kestrel_job_free(j);
    kestrel_job_spec_free(s);
    j = wait_final(id);
    assert_int_equal(kestrel_job_state(j), KESTREL_JOB_STATE_FAILED);
    assert_non_null(strstr(kestrel_job_reason(j), "cannot execute 'kestrel-no-such-program'"));
    kestrel_job_free(j);
}

static void transport_errors(void **state)
{
    kestrel_client_options o = KESTREL_CLIENT_OPTIONS_INIT;
    const char *argv[] = { "true" };
    kestrel_job_spec *s;
    kestrel_client *dead;
    kestrel_job *j = NULL;
    (void)state;
    o.max_retries = 2;
    o.retry_backoff_ms = 5;
    o.token = D.token;
    /* port 1 on loopback: nothing listens, every attempt is refused */
    assert_int_equal(kestrel_client_new(&dead, "http://127.0.0.1:1/", &o), 0);
    assert_string_equal(kestrel_client_url(dead), "http://127.0.0.1:1");
    assert_int_equal(kestrel_job_get(&j, dead, 1), KESTREL_ENET);
    assert_int_equal(kestrel_error_last()->transport_code, 7);   /* CURLE_COULDNT_CONNECT */
    assert_null(j);
    kestrel_job_spec_new(&s);
    kestrel_job_spec_set_argv(s, argv, 1);
    assert_int_equal(kestrel_job_submit(&j, dead, s), KESTREL_ENET);
    kestrel_job_spec_free(s);
    kestrel_client_free(dead);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exit_code_and_events),
        cmocka_unit_test(environment_contract),
        cmocka_unit_test(logs_follow_and_resume),
        cmocka_unit_test(log_callback_can_stop),
        cmocka_unit_test(cancel_running_queued_and_stubborn),
        cmocka_unit_test(wait_times_out),
        cmocka_unit_test(higher_class_starts_first),
        cmocka_unit_test(list_filters_and_pages),
        cmocka_unit_test(metrics_round_trip),
        cmocka_unit_test(tokens_and_isolation),
        cmocka_unit_test(job_token_is_scoped),
        cmocka_unit_test(git_source_job),
        cmocka_unit_test(program_not_found),
        cmocka_unit_test(transport_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
