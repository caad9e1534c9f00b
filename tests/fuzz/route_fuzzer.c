/* tests/fuzz/route_fuzzer.c - any method and path (and query value) through server/route.c, the
 * URL grammar the server dispatches on: no crash, and what parses is canonical. An ID or number
 * that parses prints back as exactly the text it came from (no sign, space, '+' or leading zero),
 * a model name that parses is a valid name and a prefix of the path, a read-scoped token is let
 * through only for GET and the two POSTs a pull makes. Input: first byte picks the method. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kestrel.h"
#include "route.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "route_fuzzer: %s\n", #c); abort(); } } while (0)

static void check_id(const char *rest)
{
    long long id;
    const char *sub;
    char back[32];
    if (kd_route_id(rest, &id, &sub) < 0)
        return;
    CHECK(id > 0);
    snprintf(back, sizeof(back), "/%lld", id);
    CHECK(strlen(back) == (size_t)(sub - rest) && !memcmp(back, rest, strlen(back)));
    CHECK(*sub == '\0' || *sub == '/');
}

static void check_int(const char *s)
{
    static const long long ranges[][2] = { { 0, 1000 }, { 1, INT64_MAX }, { 0, INT64_MAX }, { -5, 5 } };
    char back[32];
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        long long v;
        if (kd_parse_int(s, ranges[i][0], ranges[i][1], &v) < 0)
            continue;
        CHECK(v >= ranges[i][0] && v <= ranges[i][1]);
        snprintf(back, sizeof(back), "%lld", v);
        CHECK(!strcmp(back, s));
    }
}

static void check_model(const char *rest)
{
    char name[256];
    const char *arg;
    kd_model_part part;
    int rc = kd_route_model(rest, name, sizeof(name), &part, &arg);
    if (rc == -1)
        return;
    CHECK(rc == 0 || rc == -2);
    CHECK(strlen(name) < sizeof(name) && !strncmp(rest, name, strlen(name)));
    if (rc == -2) {
        CHECK(!kestrel__repo_name_valid(name));
        return;
    }
    CHECK(kestrel__repo_name_valid(name));
    CHECK(part >= KD_MODEL_VERSIONS && part <= KD_MODEL_SETTINGS);
    CHECK(arg >= rest && arg <= rest + strlen(rest));
    CHECK((part == KD_MODEL_VERSION || part == KD_MODEL_ALIAS) == (*arg != '\0'));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static const char *methods[] = { "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD" };
    const char *method;
    char *path, key[64];
    const char *value;
    kd_route rt;
    if (len == 0 || len > 4096)
        return 0;
    method = methods[data[0] % (sizeof(methods) / sizeof(methods[0]))];
    if ((path = malloc(len)) == NULL)
        return 0;
    memcpy(path, data + 1, len - 1);
    path[len - 1] = '\0';

    kd_route_parse(method, path, &rt);
    CHECK(rt.rest != NULL);
    if (rt.read_ok && rt.area == KD_AREA_CONSOLE)   /* its pages and forms; never DELETE, PUT, PATCH */
        CHECK(!strcmp(method, "GET") || !strcmp(method, "HEAD") || !strcmp(method, "POST"));
    else if (rt.read_ok && rt.area != KD_AREA_HEALTH)
        CHECK(!strcmp(method, "GET") || (!strcmp(method, "POST") &&
              (rt.area == KD_AREA_CHUNK_VERIFY || !strcmp(path, "/api/v1/chunks/missing") ||
               !strcmp(path, "/api/v1/chunks/fetch"))));
    if (rt.area == KD_AREA_NONE)
        CHECK(strncmp(path, "/api/v1/", 8) && strcmp(path, "/healthz"));
    if (rt.area == KD_AREA_JOBS || rt.area == KD_AREA_TOKENS) {
        CHECK(*rt.rest == '\0' || *rt.rest == '/');
        check_id(rt.rest);
    }
    if (rt.area == KD_AREA_CHUNK_VERIFY)
        CHECK(kestrel__is_sha256_hex(rt.chunk) && !strcmp(method, "POST"));
    if (rt.area == KD_AREA_REPO && !strncmp(path, "/api/v1/models/", 15))
        check_model(path + 15);
    check_id(path);
    check_model(path);
    check_int(path);
    if (kd_parse_label(path, key, sizeof(key), &value) == 0)
        CHECK(*key && !strchr(key, '=') && value == path + strlen(key) + 1);
    CHECK(kd_parse_state(path) >= 0 && kd_parse_state(path) <= KESTREL_JOB_STATE_PREEMPTED);
    free(path);
    return 0;
}
