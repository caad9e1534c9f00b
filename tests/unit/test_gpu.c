/* Unit tests: GPU inventory and selector against the stand-in NVML (tests/stubs/fake_nvml.c). */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <kestrel.h>

static char dir[64], file[128], trace[128];

static void fake(const char *lib, const char *content)
{
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
    setenv("KESTREL_NVML_LIBRARY", lib, 1);
    setenv("KESTREL_FAKE_GPU_FILE", file, 1);
}

#define GiB "073741824"
/* 8 x A100 80GB in two NVLink islands (0-3, 4-7), PCIe NODE inside an island, SYSTEM across */
static const char *two_islands(void)
{
    static char buf[8192];
    size_t k = 0;
    for (int i = 0; i < 8; i++)
        k += (size_t)snprintf(buf + k, sizeof(buf) - k,
                              "gpu uuid=GPU-%d%d%d%d0000-aaaa-bbbb-cccc-00000000000%d name=\"NVIDIA A100-SXM4-80GB\" "
                              "bus=0000:%02x:00.0 cc=8.0 total=85899345920 free=85899345920 util=0/0 temp=30 power=60000\n",
                              i, i, i, i, i, 0x10 + i * 0x10);
    for (int a = 0; a < 8; a++)
        for (int b = a + 1; b < 8; b++) {
            int same = (a < 4) == (b < 4);
            k += (size_t)snprintf(buf + k, sizeof(buf) - k, "topo a=%d b=%d level=%d\n", a, b, same ? 40 : 50);
            if (same)
                k += (size_t)snprintf(buf + k, sizeof(buf) - k, "nvlink a=%d b=%d links=2\n", a, b);
        }
    return buf;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kestrel-gpu-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/gpus.txt", dir);
    snprintf(trace, sizeof(trace), "%s/trace.txt", dir);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("KESTREL_FAKE_TRACE");
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static kestrel_gpu_list *query(unsigned flags)
{
    kestrel_gpu_list *l = NULL;
    assert_int_equal(kestrel_gpu_list_query(&l, flags), 0);
    return l;
}

static void no_driver_is_zero_devices(void **state)
{
    kestrel_gpu_list *l;
    (void)state;
    setenv("KESTREL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    l = query(0);
    assert_int_equal(kestrel_gpu_list_count(l), 0);
    assert_non_null(strstr(kestrel_gpu_list_diagnostic(l), "not found"));
    kestrel_gpu_list_free(l);
}

static void init_failures(void **state)
{
    kestrel_gpu_list *l;
    (void)state;
    fake(FAKE_NVML_NEW, "init rc=9\ngpu uuid=GPU-1 name=\"x\" bus=0000:01:00.0 cc=8.0 total=1 free=1\n");
    l = query(0);
    assert_int_equal(kestrel_gpu_list_count(l), 0);
    assert_non_null(strstr(kestrel_gpu_list_diagnostic(l), "Driver Not Loaded"));
    kestrel_gpu_list_free(l);
}

static void inventory_and_old_driver(void **state)
{
    const char *desc =
        "gpu uuid=GPU-bbbb name=\"NVIDIA A100-SXM4-80GB with a name longer than sixty-four bytes!!!\" bus=0000:20:00.0 "
        "cc=8.0 total=85899345920 free=42949672960 util=25/10 temp=41 power=250000\n"
        "gpu uuid=GPU-dddd name=\"NVIDIA T4\" bus=0000:40:00.0 cc=7.5 total=17179869184 free=17179869184 perm=denied\n"
        "gpu uuid=GPU-aaaa name=\"NVIDIA T4\" bus=0000:10:00.0 cc=7.5 total=17179869184 free=17179869184 util=0/0\n";
    const char *libs[] = { FAKE_NVML_NEW, FAKE_NVML_OLD };
    (void)state;
    for (int v = 0; v < 2; v++) {
        kestrel_gpu_list *l;
        const kestrel_gpu *g;
        fake(libs[v], desc);
        l = query(0);
        assert_int_equal(kestrel_gpu_list_count(l), 2);   /* the denied GPU is left out either way */
        g = kestrel_gpu_list_get(l, 0);                     /* PCI order, not NVML order */
        assert_string_equal(g->uuid, "GPU-aaaa");
        assert_string_equal(g->pci_bus_id, "0000:10:00.0");
        g = kestrel_gpu_list_get(l, 1);
        assert_string_equal(g->uuid, "GPU-bbbb");
        assert_int_equal(strlen(g->name), 65);   /* a 64-byte buffer would get INSUFFICIENT_SIZE */
        assert_true(g->memory_total == 85899345920LL && g->memory_free == 42949672960LL);
        assert_int_equal(g->utilization_gpu, 25);
        assert_int_equal(g->cc_major * 10 + g->cc_minor, 80);
        assert_int_equal(g->temperature, 41);
        assert_int_equal(g->power_mw, 250000);
        assert_int_equal(g->mig_mode, 0);
        if (v == 0)
            assert_non_null(strstr(kestrel_gpu_list_diagnostic(l), "Insufficient Permissions"));
        kestrel_gpu_list_free(l);
    }
}

static int in_island(const kestrel_gpu_list *l, const kestrel_gpu_selection *s, int first)
{
    for (size_t i = 0; i < kestrel_gpu_selection_count(s); i++) {
        size_t d = kestrel_gpu_selection_at(s, i);
        if ((d >= 4) != (first >= 4))
            return 0;
        (void)l;
    }
    return 1;
}

static void nvlink_islands(void **state)
{
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    kestrel_gpu_list *l;
    kestrel_gpu_selection *s;
    kestrel_buf env = KESTREL_BUF_INIT;
    (void)state;
    fake(FAKE_NVML_NEW, two_islands());
    l = query(0);
    assert_int_equal(kestrel_gpu_list_count(l), 8);
    assert_int_equal(kestrel_gpu_list_nvlinks(l, 0, 1), 2);
    assert_int_equal(kestrel_gpu_list_nvlinks(l, 0, 5), 0);
    assert_int_equal(kestrel_gpu_list_topology(l, 0, 5), KESTREL_GPU_LINK_SYSTEM);
    o.count = 4;
    o.prefer_nvlink = 1;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_int_equal(kestrel_gpu_selection_count(s), 4);
    assert_true(in_island(l, s, 0));
    assert_int_equal(kestrel_gpu_selection_at(s, 0), 0);   /* equal islands: PCI order */
    assert_int_equal(kestrel_gpu_selection_visible_devices(&env, s), 0);
    assert_string_equal(env.ptr, "GPU-00000000-aaaa-bbbb-cccc-000000000000,GPU-11110000-aaaa-bbbb-cccc-000000000001,"
                                 "GPU-22220000-aaaa-bbbb-cccc-000000000002,GPU-33330000-aaaa-bbbb-cccc-000000000003");
    assert_string_equal(kestrel_gpu_selection_reason(s, 5), "a better-connected set was chosen");
    kestrel_buf_dispose(&env);
    kestrel_gpu_selection_free(s);
    /* a pair: linked, and it leaves a whole island plus a linked pair for the next job */
    o.count = 2;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_int_equal(kestrel_gpu_list_nvlinks(l, kestrel_gpu_selection_at(s, 0), kestrel_gpu_selection_at(s, 1)), 2);
    kestrel_gpu_selection_free(s);
    kestrel_gpu_list_free(l);
    /* GPU 1 busy: only the second island has 4 idle devices */
    {
        char *busy = strdup(two_islands());
        char *p = strstr(busy, "GPU-11110000");
        p = strstr(p, "util=0/0");
        memcpy(p, "util=9/0", 8);
        fake(FAKE_NVML_NEW, busy);
        free(busy);
    }
    l = query(0);
    o.count = 4;
    o.max_utilization = 5;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_true(in_island(l, s, 4));
    assert_string_equal(kestrel_gpu_selection_reason(s, 1), "utilisation 9% > 5%");
    kestrel_gpu_selection_free(s);
    kestrel_gpu_list_free(l);
}

static void filters_and_reasons(void **state)
{
    const char *desc =
        "gpu uuid=GPU-aaaa name=\"NVIDIA T4\" bus=0000:10:00.0 cc=7.5 total=17179869184 free=17179869184\n"
        "gpu uuid=GPU-bbbb name=\"NVIDIA A100-SXM4-80GB\" bus=0000:20:00.0 cc=8.0 total=85899345920 free=85899345920\n"
        "gpu uuid=GPU-cccc name=\"NVIDIA A100-SXM4-40GB\" bus=0000:30:00.0 cc=8.0 total=42949672960 free=1073741824\n";
    const char *ex[] = { "0000:20:00.0", NULL };
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    kestrel_gpu_list *l;
    kestrel_gpu_selection *s;
    (void)state;
    fake(FAKE_NVML_NEW, desc);
    l = query(0);
    o.min_total_memory = 40LL << 30;
    o.min_free_memory = 8LL << 30;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_int_equal(kestrel_gpu_selection_at(s, 0), 1);
    assert_string_equal(kestrel_gpu_selection_reason(s, 0), "total memory 16384 MiB < 40960 MiB");
    assert_string_equal(kestrel_gpu_selection_reason(s, 2), "free memory 1024 MiB < 8192 MiB");
    kestrel_gpu_selection_free(s);
    kestrel_gpu_select_options_init(&o, KESTREL_GPU_SELECT_OPTIONS_VERSION);
    o.min_cc_major = 8;
    o.name_pattern = "*a100*";
    o.exclude = ex;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_int_equal(kestrel_gpu_selection_at(s, 0), 2);
    assert_string_equal(kestrel_gpu_selection_reason(s, 0), "name does not match *a100*");
    assert_string_equal(kestrel_gpu_selection_reason(s, 1), "excluded");
    kestrel_gpu_selection_free(s);
    o.count = 2;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), KESTREL_ENOTFOUND);
    assert_non_null(s);   /* the reasons are there to read */
    assert_int_equal(kestrel_gpu_selection_count(s), 0);
    kestrel_gpu_selection_free(s);
    kestrel_gpu_list_free(l);
}

static void injected_errors_make_fields_unknown(void **state)
{
    const char *desc =
        "gpu uuid=GPU-aaaa name=\"NVIDIA T4\" bus=0000:10:00.0 cc=7.5 total=17179869184 free=17179869184 util=1/1\n"
        "fail fn=nvmlDeviceGetUtilizationRates rc=3\n"
        "fail fn=nvmlDeviceGetMemoryInfo_v2 rc=25\n";
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    kestrel_gpu_list *l;
    kestrel_gpu_selection *s;
    (void)state;
    fake(FAKE_NVML_NEW, desc);
    l = query(0);
    assert_int_equal(kestrel_gpu_list_get(l, 0)->utilization_gpu, -1);
    assert_true(kestrel_gpu_list_get(l, 0)->memory_total == 17179869184LL);   /* v2 refused: v1 fallback */
    o.max_utilization = 50;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), KESTREL_ENOTFOUND);
    assert_string_equal(kestrel_gpu_selection_reason(s, 0), "utilisation unknown");
    kestrel_gpu_selection_free(s);
    kestrel_gpu_list_free(l);
}

static void one_model_first(void **state)
{
    const char *desc =
        "gpu uuid=GPU-aaaa name=\"NVIDIA H100\" bus=0000:10:00.0 cc=9.0 total=85899345920 free=85899345920\n"
        "gpu uuid=GPU-bbbb name=\"NVIDIA A100\" bus=0000:20:00.0 cc=8.0 total=85899345920 free=85899345920\n"
        "gpu uuid=GPU-cccc name=\"NVIDIA A100\" bus=0000:30:00.0 cc=8.0 total=85899345920 free=85899345920\n";
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    kestrel_gpu_list *l;
    kestrel_gpu_selection *s;
    (void)state;
    fake(FAKE_NVML_NEW, desc);
    l = query(0);
    o.count = 2;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_int_equal(kestrel_gpu_selection_at(s, 0), 1);   /* two A100s, not the H100 + an A100 */
    assert_int_equal(kestrel_gpu_selection_at(s, 1), 2);
    assert_string_equal(kestrel_gpu_selection_reason(s, 0), "another GPU model has enough devices");
    kestrel_gpu_selection_free(s);
    o.count = 1;   /* alone, the best-ranked device: the newer compute capability */
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_int_equal(kestrel_gpu_selection_at(s, 0), 0);
    kestrel_gpu_selection_free(s);
    kestrel_gpu_list_free(l);
}

static void mig(void **state)
{
    const char *desc =
        "gpu uuid=GPU-aaaa name=\"NVIDIA A100\" bus=0000:10:00.0 cc=8.0 total=42949672960 free=42949672960 mig=1\n"
        "gpu uuid=GPU-bbbb name=\"NVIDIA T4\" bus=0000:20:00.0 cc=7.5 total=17179869184 free=17179869184\n"
        "mig parent=0 uuid=MIG-1111 name=\"NVIDIA A100 1g.5gb\" total=5368709120 free=5368709120\n"
        "mig parent=0 uuid=MIG-2222 name=\"NVIDIA A100 3g.20gb\" total=21474836480 free=21474836480\n";
    const char *ex[] = { "GPU-bbbb", NULL };
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    kestrel_gpu_list *l;
    kestrel_gpu_selection *s;
    kestrel_buf env = KESTREL_BUF_INIT;
    const kestrel_gpu *g;
    (void)state;
    fake(FAKE_NVML_NEW, desc);
    l = query(0);
    assert_int_equal(kestrel_gpu_list_count(l), 4);
    g = kestrel_gpu_list_get(l, 1);
    assert_true(g->is_mig && g->parent == 0 && g->utilization_gpu == -1 && g->cc_major == 8);
    o.allow_mig = 1;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_string_equal(kestrel_gpu_list_get(l, kestrel_gpu_selection_at(s, 0))->uuid, "GPU-bbbb");
    assert_string_equal(kestrel_gpu_selection_reason(s, 0), "MIG is enabled: only its instances can be used");
    assert_string_equal(kestrel_gpu_selection_reason(s, 1), "a whole GPU is preferred to a MIG instance");
    kestrel_gpu_selection_free(s);
    o.exclude = ex;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
    assert_int_equal(kestrel_gpu_selection_visible_devices(&env, s), 0);
    assert_string_equal(env.ptr, "MIG-2222");   /* the instance with more free memory */
    kestrel_buf_dispose(&env);
    kestrel_gpu_selection_free(s);
    o.count = 2;
    assert_int_equal(kestrel_gpu_select(&s, l, &o), KESTREL_ENOTFOUND);
    assert_string_equal(kestrel_gpu_selection_reason(s, 1), "a MIG instance serves only a selection of 1");
    kestrel_gpu_selection_free(s);
    kestrel_gpu_list_free(l);
}

static const char *visible_uuids(const char *value)
{
    static char out[512];
    kestrel_gpu_list *l;
    size_t k = 0;
    if (value)
        setenv("CUDA_VISIBLE_DEVICES", value, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
    l = query(0);
    out[0] = '\0';
    for (size_t i = 0; i < kestrel_gpu_list_count(l); i++)
        k += (size_t)snprintf(out + k, sizeof(out) - k, "%s%.8s", i ? "," : "", kestrel_gpu_list_get(l, i)->uuid);
    kestrel_gpu_list_free(l);
    unsetenv("CUDA_VISIBLE_DEVICES");
    return out;
}

static void cuda_visible_devices_forms(void **state)
{
    const char *desc =
        "gpu uuid=GPU-a111 name=\"T4\" bus=0000:10:00.0 cc=7.5 total=1 free=1\n"
        "gpu uuid=GPU-b222 name=\"T4\" bus=0000:20:00.0 cc=7.5 total=1 free=1\n"
        "gpu uuid=GPU-b333 name=\"A100\" bus=0000:30:00.0 cc=8.0 total=1 free=1 mig=1\n"
        "mig parent=2 uuid=MIG-c444 name=\"A100 1g\" total=1 free=1\n";
    (void)state;
    fake(FAKE_NVML_NEW, desc);
    assert_string_equal(visible_uuids(NULL), "GPU-a111,GPU-b222,GPU-b333,MIG-c444");
    assert_string_equal(visible_uuids(""), "");
    assert_string_equal(visible_uuids("NoDevFiles"), "");
    assert_string_equal(visible_uuids("2,0"), "GPU-a111,GPU-b333,MIG-c444");
    assert_string_equal(visible_uuids("0,2,-1,1"), "GPU-a111,GPU-b333,MIG-c444");
    assert_string_equal(visible_uuids("1gpu2"), "GPU-b222");
    assert_string_equal(visible_uuids("0,7,1"), "GPU-a111");
    assert_string_equal(visible_uuids("0,0"), "");
    assert_string_equal(visible_uuids("GPU-a1"), "GPU-a111");
    assert_string_equal(visible_uuids("GPU-b3,GPU-a111"), "GPU-a111,GPU-b333,MIG-c444");
    assert_string_equal(visible_uuids("GPU-a111,GPU-b"), "GPU-a111");      /* ambiguous prefix stops */
    assert_string_equal(visible_uuids("MIG-c444"), "MIG-c444");
    {
        kestrel_gpu_list *l;
        setenv("CUDA_VISIBLE_DEVICES", "1", 1);
        l = query(KESTREL_GPU_QUERY_ALL);
        assert_int_equal(kestrel_gpu_list_count(l), 4);
        assert_int_equal(kestrel_gpu_list_get(l, 0)->visible, 0);
        assert_int_equal(kestrel_gpu_list_get(l, 1)->visible, 1);
        kestrel_gpu_list_free(l);
        unsetenv("CUDA_VISIBLE_DEVICES");
    }
}

static void deterministic_whatever_the_enumeration_order(void **state)
{
    const char *a =
        "gpu uuid=GPU-1 name=\"A\" bus=0000:10:00.0 cc=8.0 total=85899345920 free=85899345920\n"
        "gpu uuid=GPU-2 name=\"A\" bus=0000:20:00.0 cc=8.0 total=85899345920 free=85899345920\n"
        "gpu uuid=GPU-3 name=\"A\" bus=0000:30:00.0 cc=8.0 total=85899345920 free=85899345920\n";
    const char *b =
        "gpu uuid=GPU-3 name=\"A\" bus=0000:30:00.0 cc=8.0 total=85899345920 free=85899345920\n"
        "gpu uuid=GPU-1 name=\"A\" bus=0000:10:00.0 cc=8.0 total=85899345920 free=85899345920\n"
        "gpu uuid=GPU-2 name=\"A\" bus=0000:20:00.0 cc=8.0 total=85899345920 free=85899345920\n";
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    char first[128] = "";
    (void)state;
    o.count = 2;
    for (int round = 0; round < 2; round++) {
        kestrel_gpu_list *l;
        kestrel_gpu_selection *s;
        kestrel_buf env = KESTREL_BUF_INIT;
        fake(FAKE_NVML_NEW, round ? b : a);
        l = query(0);
        assert_int_equal(kestrel_gpu_select(&s, l, &o), 0);
        kestrel_gpu_selection_visible_devices(&env, s);
        if (round == 0)
            snprintf(first, sizeof(first), "%s", env.ptr);
        else
            assert_string_equal(env.ptr, first);
        assert_string_equal(env.ptr, "GPU-1,GPU-2");
        kestrel_buf_dispose(&env);
        kestrel_gpu_selection_free(s);
        kestrel_gpu_list_free(l);
    }
}

static void *query_loop(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10; i++) {
        kestrel_gpu_list *l = NULL;
        kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
        kestrel_gpu_selection *s = NULL;
        if (kestrel_gpu_list_query(&l, 0) != 0 || kestrel_gpu_list_count(l) != 8)
            return (void *)1;
        o.count = 4;
        o.prefer_nvlink = 1;
        if (kestrel_gpu_select(&s, l, &o) != 0)
            return (void *)1;
        kestrel_gpu_selection_free(s);
        kestrel_gpu_list_free(l);
    }
    return NULL;
}

static void many_threads_are_serialised(void **state)
{
    pthread_t t[8];
    FILE *f;
    char line[128];
    int calls = 0;
    (void)state;
    fake(FAKE_NVML_NEW, two_islands());
    setenv("KESTREL_FAKE_TRACE", trace, 1);
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, query_loop, NULL);
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    unsetenv("KESTREL_FAKE_TRACE");
    f = fopen(trace, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        calls++;
        if (!strncmp(line, "CONCURRENT", 10))
            fail_msg("two NVML calls overlapped");
        if (!strncmp(line, "cuInit", 6))
            fail_msg("the query initialised CUDA");
    }
    fclose(f);
    assert_true(calls > 1000);
}

static void multiprocessors_from_a_child(void **state)
{
    const char *desc =
        "gpu uuid=GPU-aaaa1111-0000-0000-0000-000000000000 name=\"T4\" bus=0000:10:00.0 cc=7.5 total=1 free=1 sms=40\n"
        "gpu uuid=GPU-bbbb2222-0000-0000-0000-000000000000 name=\"H100\" bus=0000:20:00.0 cc=9.0 total=1 free=1 sms=132\n";
    kestrel_gpu_list *l;
    char line[64];
    FILE *f;
    int cuinit = 0;
    (void)state;
    fake(FAKE_NVML_NEW, desc);
    setenv("KESTREL_CUDA_LIBRARY", FAKE_CUDA, 1);
    setenv("KESTREL_GPU_PROBE", GPU_PROBE, 1);
    setenv("KESTREL_FAKE_TRACE", trace, 1);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);   /* the probe still sees (and reports) every device */
    l = query(0);
    assert_int_equal(kestrel_gpu_list_get(l, 0)->multiprocessors, -1);   /* not without the flag */
    kestrel_gpu_list_free(l);
    l = query(KESTREL_GPU_QUERY_CUDA | KESTREL_GPU_QUERY_ALL);
    assert_int_equal(kestrel_gpu_list_get(l, 0)->multiprocessors, 40);
    assert_int_equal(kestrel_gpu_list_get(l, 1)->multiprocessors, 132);
    kestrel_gpu_list_free(l);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("KESTREL_FAKE_TRACE");
    f = fopen(trace, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f))
        cuinit += !strncmp(line, "cuInit", 6);
    fclose(f);
    assert_int_equal(cuinit, 1);   /* once, in the child */
    assert_null(dlopen(FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD));   /* never in this process */
    unsetenv("KESTREL_GPU_PROBE");
}

static void apply_and_lock(void **state)
{
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    kestrel_gpu_list *l;
    kestrel_gpu_selection *a, *b;
    char locks[128];
    (void)state;
    fake(FAKE_NVML_NEW, two_islands());
    l = query(0);
    o.count = 2;
    assert_int_equal(kestrel_gpu_select(&a, l, &o), 0);
    assert_int_equal(kestrel_gpu_selection_apply(a), 0);
    assert_string_equal(getenv("CUDA_VISIBLE_DEVICES"),
                        "GPU-00000000-aaaa-bbbb-cccc-000000000000,GPU-11110000-aaaa-bbbb-cccc-000000000001");
    assert_string_equal(getenv("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    unsetenv("CUDA_VISIBLE_DEVICES");
    snprintf(locks, sizeof(locks), "%s/locks", dir);
    assert_int_equal(kestrel_gpu_selection_lock(a, locks), 0);
    assert_int_equal(kestrel_gpu_select(&b, l, &o), 0);   /* the same two devices */
    if (fork() == 0)   /* flock is per open file: another process must be refused */
        _exit(kestrel_gpu_selection_lock(b, locks) == KESTREL_EEXISTS ? 0 : 1);
    {
        int st;
        wait(&st);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    kestrel_gpu_selection_free(a);
    assert_int_equal(kestrel_gpu_selection_lock(b, locks), 0);   /* released with its selection */
    kestrel_gpu_selection_free(b);
    /* once a framework has loaded CUDA, changing the variables would be a silent no-op: refuse */
    assert_int_equal(kestrel_gpu_select(&a, l, &o), 0);
    setenv("KESTREL_CUDA_LIBRARY", FAKE_CUDA, 1);
    assert_non_null(dlopen(FAKE_CUDA, RTLD_NOW));
    assert_int_equal(kestrel_gpu_selection_apply(a), KESTREL_EMISUSE);
    assert_non_null(strstr(kestrel_error_last()->message, "CUDA is already loaded"));
    assert_null(getenv("CUDA_VISIBLE_DEVICES"));
    kestrel_gpu_selection_free(a);
    kestrel_gpu_list_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(no_driver_is_zero_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(init_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(inventory_and_old_driver, setup, teardown),
        cmocka_unit_test_setup_teardown(nvlink_islands, setup, teardown),
        cmocka_unit_test_setup_teardown(filters_and_reasons, setup, teardown),
        cmocka_unit_test_setup_teardown(injected_errors_make_fields_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(one_model_first, setup, teardown),
        cmocka_unit_test_setup_teardown(mig, setup, teardown),
        cmocka_unit_test_setup_teardown(cuda_visible_devices_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(deterministic_whatever_the_enumeration_order, setup, teardown),
        cmocka_unit_test_setup_teardown(many_threads_are_serialised, setup, teardown),
        cmocka_unit_test_setup_teardown(multiprocessors_from_a_child, setup, teardown),
        cmocka_unit_test_setup_teardown(apply_and_lock, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
