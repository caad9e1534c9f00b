/* bench/bench_devices.c - inventory snapshot and selection time on 8 and 64 stand-in GPUs.
 *
 * Beside each figure, measured in the same run: the floor of the snapshot (the NVML calls
 * themselves, made directly on the stand-in library: init, count, and per device handle + UUID +
 * memory) and, for the selection, a plain rank-order pick of the same count.
 * Targets (issue 5): snapshot <= 5 ms, selection <= 50 us. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <kestrel.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    return v[n / 2];
}

/* n GPUs in islands of 8 joined by NVLink, SYSTEM between islands */
static void describe(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++)
        fprintf(f, "gpu uuid=GPU-%08x-0000-0000-0000-000000000000 name=\"NVIDIA H100 80GB HBM3\" bus=0000:%02x:%02x.0 "
                   "cc=9.0 total=85899345920 free=%lld util=%d/0\n", i, i / 8, i % 8, 85899345920LL - (long long)(i % 3) * (1LL << 30), (i * 7) % 30);
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            fprintf(f, "topo a=%d b=%d level=%d\n", a, b, a / 8 == b / 8 ? 40 : 50);
            if (a / 8 == b / 8)
                fprintf(f, "nvlink a=%d b=%d links=2\n", a, b);
        }
    fclose(f);
}

static double floor_us(const char *lib, int runs)
{
    void *so = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    int (*init)(void), (*shut)(void), (*count)(unsigned *), (*handle)(unsigned, void **), (*uuid)(void *, char *, unsigned);
    double *t = malloc((size_t)runs * sizeof(double)), m;
    *(void **)&init = dlsym(so, "nvmlInit_v2");
    *(void **)&shut = dlsym(so, "nvmlShutdown");
    *(void **)&count = dlsym(so, "nvmlDeviceGetCount_v2");
    *(void **)&handle = dlsym(so, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&uuid = dlsym(so, "nvmlDeviceGetUUID");
    for (int r = 0; r < runs; r++) {
        unsigned n = 0;
        char buf[96];
        double t0 = now_us();
        init();
        count(&n);
        for (unsigned i = 0; i < n; i++) {
            void *h;
            handle(i, &h);
            uuid(h, buf, sizeof(buf));
        }
        shut();
        t[r] = now_us() - t0;
    }
    m = median(t, runs);
    free(t);
    return m;
}

int main(int argc, char **argv)
{
    const char *lib = argc > 1 ? argv[1] : NULL;
    char path[] = "/tmp/kestrel-bench-gpus-XXXXXX";
    int fd;
    if (lib == NULL) {
        fprintf(stderr, "usage: bench_devices PATH/TO/stub/libnvidia-ml.so.1\n");
        return 2;
    }
    if ((fd = mkstemp(path)) < 0)
        return 1;
    setenv("KESTREL_NVML_LIBRARY", lib, 1);
    setenv("KESTREL_FAKE_GPU_FILE", path, 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    printf("bench-devices (stand-in NVML; a real driver's calls cost more, see tests/gpu/check.sh):\n");
    for (int n = 8; n <= 64; n *= 8) {
        enum { RUNS = 41, SELRUNS = 2001 };
        double snap[RUNS], sel[SELRUNS], plain[SELRUNS], fl;
        kestrel_gpu_list *l = NULL;
        kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
        describe(path, n);
        for (int r = 0; r < RUNS; r++) {
            double t0 = now_us();
            kestrel_gpu_list_query(&l, 0);
            snap[r] = now_us() - t0;
            if (r < RUNS - 1)
                kestrel_gpu_list_free(l);
        }
        fl = floor_us(lib, RUNS);
        o.count = 4;
        for (int r = 0; r < SELRUNS; r++) {
            kestrel_gpu_selection *s;
            double t0;
            o.prefer_nvlink = 1;
            t0 = now_us();
            kestrel_gpu_select(&s, l, &o);
            sel[r] = now_us() - t0;
            kestrel_gpu_selection_free(s);
            o.prefer_nvlink = 0;
            t0 = now_us();
            kestrel_gpu_select(&s, l, &o);
            plain[r] = now_us() - t0;
            kestrel_gpu_selection_free(s);
        }
        printf("  %2d GPUs: snapshot median %7.0f us (target <= 5000; the NVML calls alone: %.0f us, ratio %.1f)\n", n,
               median(snap, RUNS), fl, median(snap, RUNS) / fl);
        printf("           select 4, NVLink-aware: median %6.1f us (target <= 50; rank-order pick: %.1f us, ratio %.1f)\n",
               median(sel, SELRUNS), median(plain, SELRUNS), median(sel, SELRUNS) / median(plain, SELRUNS));
        kestrel_gpu_list_free(l);
    }
    unlink(path);
    return 0;
}
