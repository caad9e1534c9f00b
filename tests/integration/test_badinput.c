/* Integration: every bad input gets a 4xx with a structured error and writes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "harness.h"

static kd_daemon D;

static int group_setup(void **state)
{
    static const char *const extra[] = { "--gpus=2", "--max-body=4096", NULL };
    (void)state;
    kestrel_init();
    return kd_daemon_start(&D, NULL, extra);
}

static int group_teardown(void **state)
{
    (void)state;
    assert_int_equal(kd_daemon_stop(&D, SIGTERM, 20000), 0);
    kd_daemon_cleanup(&D);
    kestrel_shutdown();
    return 0;
}

/* POST a JSON body to /api/v1/jobs and expect status with a JSON error whose message has fragment. */
static void expect(long status, const char *token, const char *body, const char *fragment)
{
    char *resp = NULL;
    long st = kd_http(&D, "POST", "/api/v1/jobs", token, "application/json", body, strlen(body), &resp);
    if (st != status || resp == NULL || !strstr(resp, "\"code\":") || !strstr(resp, fragment))
        fail_msg("body %s: got %ld %s, want %ld with '%s'", body, st, resp ? resp : "(none)", status, fragment);
    free(resp);
}

static void bad_json_bodies(void **state)
{
    (void)state;
    expect(400, D.token, "{\"argv\":[\"true\"", "malformed JSON");
    expect(400, D.token, "{\"argv\":[\"true\"],\"priority\":\"asap\"}", "unknown Priority value 'asap'");
    expect(400, D.token, "{\"argv\":[\"true\"],\"gpus\":\"x\"}", "not an integer");
    expect(400, D.token, "{\"argv\":[\"true\"],\"extra\":1}", "unknown field 'extra'");
    expect(400, D.token, "{\"name\":\"no argv\"}", "field 'argv'");
    expect(400, D.token, "{\"argv\":[\"\"]}", "field 'argv'");
    expect(400, D.token, "{\"argv\":[\"true\"],\"name\":\"bell\\u0007\"}", "field 'name'");
    expect(400, D.token, "{\"argv\":[\"true\"],\"labels\":[{\"key\":\"a\\nb\",\"value\":\"v\"}]}", "field 'labels'");
    expect(400, D.token, "{\"argv\":[\"true\"],\"env\":[{\"key\":\"KESTREL_TOKEN\",\"value\":\"x\"}]}", "set by kestreld");
    expect(400, D.token, "{\"argv\":[\"true\"],\"gpus\":3}", "the largest node has 2");
    expect(400, D.token, "{\"argv\":[\"true\"],\"gpus\":-1}", "field 'gpus'");
    expect(400, D.token, "{\"argv\":[\"true\"],\"workdir\":\"../../etc\"}", "field 'workdir'");
    expect(400, D.token, "{\"argv\":[\"true\"],\"git_url\":\"--upload-pack=evil\"}", "field 'git_url'");
    expect(400, D.token, "{\"argv\":[\"true\"],\"git_ref\":\"main\"}", "without git_url");
    expect(400, D.token, "{\"argv\":[\"true\"],\"min_compute_capability\":\"eight\"}", "MAJOR.MINOR");
    expect(400, D.token, "{\"argv\":[\"true\"],\"after_ok\":[\"-3\"]}", "job ids are positive");
    expect(400, D.token, "{\"argv\":[\"true\"],\"affinity_required\":true}", "needs affinity_job");
    expect(400, D.token, "{\"argv\":[\"true\"],\"pool\":\"a b\"}", "no spaces");
}

static void auth_failures(void **state)
{
    (void)state;
    expect(401, NULL, "{\"argv\":[\"true\"]}", "Authorization");
    expect(401, "kst_0000", "{\"argv\":[\"true\"]}", "invalid or revoked token");
}

static void too_large(void **state)
{
    size_t n = 8192;
    char *big = malloc(n + 64), *resp = NULL;
    long st;
    (void)state;
    /* a valid JSON document that is simply too big */
    strcpy(big, "{\"argv\":[\"true\"],\"name\":\"");
    memset(big + strlen(big), 'a', n);
    strcpy(big + 26 + n, "\"}");
    st = kd_http(&D, "POST", "/api/v1/jobs", D.token, "application/json", big, strlen(big), &resp);
    assert_int_equal(st, 413);
    assert_non_null(strstr(resp, "too_large"));
    free(resp);
    free(big);
}

static void bad_protobuf(void **state)
{
    /* field 1 (argv) claims 16 bytes but carries 1; then an unknown priority value */
    static const unsigned char truncated[] = { 0x0a, 0x10, 'a' };
    static const unsigned char bad_enum[] = { 0x0a, 0x04, 't', 'r', 'u', 'e', 0x28, 0x63 };
    char *resp = NULL;
    long st = kd_http(&D, "POST", "/api/v1/jobs", D.token, "application/x-protobuf", truncated, sizeof(truncated), &resp);
    (void)state;
    assert_int_equal(st, 400);
    assert_non_null(strstr(resp, "malformed protobuf"));   /* no Accept: the error comes back as JSON */
    free(resp);
    resp = NULL;
    st = kd_http(&D, "POST", "/api/v1/jobs", D.token, "application/x-protobuf", bad_enum, sizeof(bad_enum), &resp);
    assert_int_equal(st, 400);
    assert_non_null(strstr(resp, "unknown enum value 99"));
    free(resp);
}

static void routes_and_queries(void **state)
{
    char *resp = NULL;
    (void)state;
    assert_int_equal(kd_http(&D, "GET", "/api/v1/nothing", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "DELETE", "/api/v1/jobs", D.token, NULL, NULL, 0, NULL), 405);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs/abc", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs/99", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs?page_size=0", D.token, NULL, NULL, 0, &resp), 400);
    assert_non_null(strstr(resp, "page_size"));
    free(resp);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs?state=SLEEPING", D.token, NULL, NULL, 0, NULL), 400);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs?label=novalue", D.token, NULL, NULL, 0, NULL), 400);
    assert_int_equal(kd_http(&D, "POST", "/api/v1/tokens", D.token, "application/json", "{\"user\":\"a b\"}", 14, NULL), 400);
}

static void nothing_was_written(void **state)
{
    (void)state;
    assert_int_equal(kd_count_jobs(&D), 0);
}

static void json_submit_and_read_back(void **state)
{
    const char *body = "{\"argv\":[\"sh\",\"-c\",\"echo hi\"],\"name\":\"from-curl\",\"priority\":\"high\"}";
    char *resp = NULL, path[64];
    long st = kd_http(&D, "POST", "/api/v1/jobs", D.token, "application/json", body, strlen(body), &resp);
    (void)state;
    assert_int_equal(st, 201);
    assert_non_null(strstr(resp, "\"name\":\"from-curl\""));
    assert_non_null(strstr(resp, "\"priority\":\"HIGH\""));
    assert_non_null(strstr(resp, "\"state\":\"QUEUED\""));
    free(resp);
    resp = NULL;
    snprintf(path, sizeof(path), "/api/v1/jobs/1?wait_ms=20000");
    assert_int_equal(kd_http(&D, "GET", path, D.token, NULL, NULL, 0, &resp), 200);
    assert_non_null(strstr(resp, "\"state\":\"SUCCEEDED\""));
    free(resp);
    /* IDs and numbers are strict (server/route.c): job 1 exists, yet none of these names it */
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs/1", D.token, NULL, NULL, 0, NULL), 200);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs/+1", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs/01", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs/%201", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs/1x", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs?page_size=%2B5", D.token, NULL, NULL, 0, NULL), 400);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs?page_size=%205", D.token, NULL, NULL, 0, NULL), 400);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/jobs?page_size=5", D.token, NULL, NULL, 0, NULL), 200);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/models/a/versionsX", D.token, NULL, NULL, 0, NULL), 404);
    assert_int_equal(kd_http(&D, "GET", "/api/v1/chunks/pack", D.token, NULL, NULL, 0, NULL), 405);
    assert_int_equal(kd_count_jobs(&D), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_json_bodies),
        cmocka_unit_test(auth_failures),
        cmocka_unit_test(too_large),
        cmocka_unit_test(bad_protobuf),
        cmocka_unit_test(routes_and_queries),
        cmocka_unit_test(nothing_was_written),
        cmocka_unit_test(json_submit_and_read_back),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
