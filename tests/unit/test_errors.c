/* Unit tests: error records, init refcount, options versioning, handle misuse, spec validation. */
#include <pthread.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"
#include "options.h"

static void strerror_covers_every_code(void **state)
{
    (void)state;
    for (int code = KESTREL_ETOOLARGE; code <= KESTREL_OK; code++)
        assert_string_not_equal(kestrel_strerror(code), "unknown error");
    assert_string_equal(kestrel_strerror(-999), "unknown error");
}

static void *other_thread(void *arg)
{
    (void)arg;
    kestrel__error_set(KESTREL_ENOTFOUND, "from another thread");
    return NULL;
}

static void error_is_thread_local_and_one_line(void **state)
{
    pthread_t t;
    (void)state;
    kestrel__error_set(KESTREL_EINVALID, "first line\nsecond line");
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    assert_int_equal(kestrel_error_last()->code, KESTREL_EINVALID);
    assert_string_equal(kestrel_error_last()->message, "first line");
    kestrel__error_oom();
    assert_int_equal(kestrel_error_last()->code, KESTREL_ENOMEM);
    kestrel_error_clear();
    assert_int_equal(kestrel_error_last()->code, 0);
    assert_string_equal(kestrel_error_last()->message, "");
}

/* kestrel_error_outcome_unknown: set only with the error it marks; any later error, a clear or out of
 * memory reads 0; a kept error carries it to the thread that restores it, and only there. */
static void *restore_kept(void *arg)
{
    kestrel__error_restore(arg);
    return (void *)(intptr_t)kestrel_error_outcome_unknown();
}

static void outcome_unknown_goes_with_its_error(void **state)
{
    kestrel__error_kept kept;
    pthread_t t;
    void *seen = NULL;
    (void)state;
    kestrel_error_clear();
    assert_int_equal(kestrel_error_outcome_unknown(), 0);
    kestrel__error_set_http(KESTREL_EHTTP, 502, "the commit's answer was lost");
    assert_int_equal(kestrel_error_outcome_unknown(), 0);
    kestrel__error_outcome_unknown();
    assert_int_equal(kestrel_error_outcome_unknown(), 1);
    kestrel__error_keep(&kept);
    kestrel__error_set(KESTREL_EINVALID, "a later error");
    assert_int_equal(kestrel_error_outcome_unknown(), 0);
    pthread_create(&t, NULL, restore_kept, &kept);
    pthread_join(t, &seen);
    assert_int_equal((intptr_t)seen, 1);
    assert_int_equal(kestrel_error_outcome_unknown(), 0);   /* the other thread's record, not this one's */
    assert_int_equal(kestrel__error_restore(&kept), KESTREL_EHTTP);
    assert_int_equal(kestrel_error_outcome_unknown(), 1);
    assert_int_equal(kestrel_error_last()->http_status, 502);
    assert_string_equal(kestrel_error_last()->message, "the commit's answer was lost");
    kestrel__error_oom();
    assert_int_equal(kestrel_error_outcome_unknown(), 0);
    kestrel__error_keep(&kept);   /* out of memory kept: not unknown either */
    assert_int_equal(kestrel__error_restore(&kept), KESTREL_ENOMEM);
    assert_int_equal(kestrel_error_outcome_unknown(), 0);
    kestrel__error_set_net(7, "connection refused");
    kestrel__error_outcome_unknown();
    kestrel_error_clear();
    assert_int_equal(kestrel_error_outcome_unknown(), 0);
}

/* A system call's failure keeps its errno beside its message: a caller asks ENOSPC of it, not the
 * message's words (lib/repo/pull.c's run after freeing the pull cache, the pack's 507). */
static void a_system_failure_keeps_its_errno(void **state)
{
    kestrel__error_kept kept;
    char want[200];
    (void)state;
    assert_int_equal(kestrel__error_sys(KESTREL_EIO, ENOSPC, "cannot write %s", "a.bin"), KESTREL_EIO);
    snprintf(want, sizeof(want), "cannot write a.bin: %s", strerror(ENOSPC));
    assert_string_equal(kestrel_error_last()->message, want);
    assert_int_equal(kestrel__error_errno(), ENOSPC);
    kestrel__error_keep(&kept);
    kestrel__error_set(KESTREL_EIO, "cannot write b.bin: %s", strerror(ENOSPC));   /* the words alone: no errno */
    assert_int_equal(kestrel__error_errno(), 0);
    assert_int_equal(kestrel__error_restore(&kept), KESTREL_EIO);
    assert_int_equal(kestrel__error_errno(), ENOSPC);
    kestrel__error_oom();
    assert_int_equal(kestrel__error_errno(), 0);
    kestrel_error_clear();
    assert_int_equal(kestrel__error_errno(), 0);
}

/* A path near PATH_MAX is cut, never the reason after it (a hostile test saw "cannot create
 * XXXX..." end 512 bytes in, its ENAMETOOLONG lost). */
static void a_long_path_is_cut_not_the_reason(void **state)
{
    char path[5000], want[100];
    const char *m;
    size_t n;
    (void)state;
    memset(path, 'd', sizeof(path) - 1);
    path[sizeof(path) - 1] = '\0';
    kestrel__error_sys(KESTREL_EIO, ENAMETOOLONG, "cannot create %s", path);
    m = kestrel_error_last()->message;
    n = strlen(m);
    snprintf(want, sizeof(want), "...: %s", strerror(ENAMETOOLONG));
    assert_true(n < KESTREL__MSG_MAX && n > 400);
    assert_true(!strncmp(m, "cannot create ddd", 17));
    assert_string_equal(m + n - strlen(want), want);
    /* a newline in the path is a space, so the reason is still on the one line */
    kestrel__error_sys(KESTREL_EIO, ENOENT, "cannot open %s", "a\nb");
    snprintf(want, sizeof(want), "cannot open a b: %s", strerror(ENOENT));
    assert_string_equal(kestrel_error_last()->message, want);
    /* cut where a character starts: a path of 3-byte characters leaves none halved before the "..." */
    for (size_t i = 0; i + 3 < sizeof(path); i += 3)
        memcpy(path + i, "\xe2\x82\xac", 3);   /* U+20AC */
    path[sizeof(path) - 1 - (sizeof(path) - 1) % 3] = '\0';
    kestrel__error_sys(KESTREL_EIO, ENAMETOOLONG, "%s", path);
    m = kestrel_error_last()->message;
    assert_true(strstr(m, "...: ") != NULL && (strstr(m, "...: ") - m) % 3 == 0);
    kestrel_error_clear();
}

static void init_is_refcounted(void **state)
{
    kestrel_client *c = NULL;
    (void)state;
    assert_int_equal(kestrel_shutdown(), KESTREL_EMISUSE);
    assert_int_equal(kestrel_client_new(&c, "http://127.0.0.1:1", NULL), KESTREL_EMISUSE);
    assert_int_equal(kestrel_init(), 1);
    assert_int_equal(kestrel_init(), 2);
    assert_int_equal(kestrel_shutdown(), 1);
    assert_int_equal(kestrel_client_new(&c, "http://127.0.0.1:1", NULL), 0);
    kestrel_client_free(c);
    assert_int_equal(kestrel_shutdown(), 0);
}

/* What an application compiled against version 1 of the struct passes: no fields after v1's. */
typedef struct { unsigned int version; const char *token; long connect_timeout_ms; long timeout_ms; int max_retries;
                 long retry_backoff_ms; } client_options_v1;

static void options_versioning(void **state)
{
    kestrel_client_options o, loaded;
    client_options_v1 old = { 1, "tok", 5, 6, 7, 8 };
    (void)state;
    assert_int_equal(kestrel_client_options_init(&o, KESTREL_CLIENT_OPTIONS_VERSION), 0);
    assert_int_equal(o.version, KESTREL_CLIENT_OPTIONS_VERSION);
    assert_int_equal(o.timeout_ms, 0);
    assert_int_equal(kestrel_client_options_init(&o, 0), KESTREL_EMISUSE);
    assert_int_equal(kestrel_client_options_init(&o, 99), KESTREL_EMISUSE);
    /* an old, smaller struct is read only up to its own size */
    assert_int_equal(kestrel__client_opts_load(&loaded, (const kestrel_client_options *)&old), 0);
    assert_int_equal(loaded.timeout_ms, 6);
    assert_int_equal(loaded.retry_backoff_ms, 8);
    /* a version from the future is refused, NULL means defaults */
    old.version = 2;
    assert_int_equal(kestrel__client_opts_load(&loaded, (const kestrel_client_options *)&old), KESTREL_EMISUSE);
    assert_non_null(strstr(kestrel_error_last()->message, "version 2"));
    assert_int_equal(kestrel__client_opts_load(&loaded, NULL), 0);
    assert_int_equal(loaded.version, KESTREL_CLIENT_OPTIONS_VERSION);
}

static void handles_report_misuse(void **state)
{
    kestrel_job_spec *s = NULL;
    kestrel_client *c = NULL;
    kestrel_job *j = NULL;
    (void)state;
    kestrel_init();
    assert_int_equal(kestrel_job_spec_set_name(NULL, "x"), KESTREL_EMISUSE);
    assert_int_equal(kestrel_job_get(&j, NULL, 1), KESTREL_EMISUSE);
    assert_int_equal(kestrel_client_new(&c, "ftp://x", NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_client_new(&c, "http://a\nb", NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_new(&s), 0);
    assert_int_equal(kestrel_job_spec_set_name(s, "ok name"), 0);
    assert_int_equal(kestrel_job_spec_set_name(s, "bad\x01name"), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_set_priority(s, 4), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_set_gpus(s, -1), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_set_workdir(s, "../etc"), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_set_workdir(s, "a/../../b"), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_set_workdir(s, "/abs"), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_set_workdir(s, "sub/dir"), 0);
    assert_int_equal(kestrel_job_spec_set_env(s, "A=B", "x"), KESTREL_EINVALID);
    assert_int_equal(kestrel_job_spec_set_env(s, "A", "1"), 0);
    assert_int_equal(kestrel_job_spec_set_env(s, "A", "2"), 0);   /* replaces */
    assert_int_equal(kestrel_job_spec_set_git(s, "-oProxyCommand=x", NULL), KESTREL_EINVALID);
    kestrel_job_spec_free(s);
    /* a handle of the wrong type is refused, not trusted */
    assert_int_equal(kestrel_client_new(&c, "http://127.0.0.1:1", NULL), 0);
    assert_int_equal(kestrel_job_spec_set_name((kestrel_job_spec *)(void *)c, "x"), KESTREL_EMISUSE);
    assert_non_null(strstr(kestrel_error_last()->message, "not a live spec handle"));
    kestrel_client_free(c);
    kestrel_shutdown();
}

static void priorities_and_states(void **state)
{
    int p = 0;
    (void)state;
    assert_int_equal(kestrel_priority_parse(&p, "URGENT"), 0);
    assert_int_equal(p, KESTREL_PRIORITY_URGENT);
    assert_int_equal(kestrel_priority_parse(&p, "asap"), KESTREL_EINVALID);
    assert_string_equal(kestrel_job_state_name(KESTREL_JOB_STATE_PREEMPTED), "PREEMPTED");
    assert_string_equal(kestrel_job_state_name(42), "UNKNOWN");
    assert_true(kestrel_job_state_is_final(KESTREL_JOB_STATE_CANCELLED));
    assert_false(kestrel_job_state_is_final(KESTREL_JOB_STATE_PREEMPTED));
}

static void text_validation(void **state)
{
    (void)state;
    assert_true(kestrel__text_is_clean("r\xc3\xa9sum\xc3\xa9", 64));
    assert_false(kestrel__text_is_clean("tab\there", 64));
    assert_false(kestrel__text_is_clean("del\x7f", 64));
    assert_false(kestrel__text_is_clean("\xc0\xaf", 64));          /* overlong */
    assert_false(kestrel__text_is_clean("\xed\xa0\x80", 64));      /* surrogate */
    assert_false(kestrel__text_is_clean("toolong", 3));
    assert_false(kestrel__text_is_clean("csi\xc2\x9b" "2J", 64));   /* C1: a terminal obeys it */
    assert_false(kestrel__text_is_clean("rlo\xe2\x80\xae" "txt", 64));   /* a bidi override */
    assert_false(kestrel__text_is_clean("iso\xe2\x81\xa6", 64));     /* an isolate */
    assert_false(kestrel__text_is_clean("alm\xd8\x9c", 64));          /* U+061C */
    assert_true(kestrel__text_is_clean("nbsp\xc2\xa0 \xe2\x80\x94 \xf0\x9f\x90\xa6", 64));   /* U+00A0, U+2014, an emoji */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strerror_covers_every_code),
        cmocka_unit_test(error_is_thread_local_and_one_line),
        cmocka_unit_test(outcome_unknown_goes_with_its_error),
        cmocka_unit_test(a_system_failure_keeps_its_errno),
        cmocka_unit_test(a_long_path_is_cut_not_the_reason),
        cmocka_unit_test(init_is_refcounted),
        cmocka_unit_test(options_versioning),
        cmocka_unit_test(handles_report_misuse),
        cmocka_unit_test(priorities_and_states),
        cmocka_unit_test(text_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
