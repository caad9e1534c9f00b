/* tools/gpu_probe.c - kestrel-gpu-probe: the CUDA-only facts NVML lacks (multiprocessor count),
 * read in a short-lived process so that the caller never initialises CUDA itself (CUDA reads
 * CUDA_VISIBLE_DEVICES once, at cuInit). Prints "UUID SMS" per device. libkestrel runs it for
 * kestrel_gpu_list_query(..., KESTREL_GPU_QUERY_CUDA). Loads libcuda.so.1 (or $KESTREL_CUDA_LIBRARY). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define ATTR_MULTIPROCESSOR_COUNT 16

int main(void)
{
    const char *path = getenv("KESTREL_CUDA_LIBRARY");
    void *so = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*init)(unsigned), (*count)(int *), (*get)(int *, int), (*attr)(int *, int, int), (*uuid)(unsigned char *, int);
    int n = 0;
    if (so == NULL)
        return 2;
    *(void **)&init = dlsym(so, "cuInit");
    *(void **)&count = dlsym(so, "cuDeviceGetCount");
    *(void **)&get = dlsym(so, "cuDeviceGet");
    *(void **)&attr = dlsym(so, "cuDeviceGetAttribute");
    *(void **)&uuid = dlsym(so, "cuDeviceGetUuid_v2");
    if (uuid == NULL)
        *(void **)&uuid = dlsym(so, "cuDeviceGetUuid");
    if (!init || !count || !get || !attr || !uuid || init(0) != 0 || count(&n) != 0)
        return 3;
    for (int i = 0; i < n; i++) {
        unsigned char u[16];
        int dev, sms;
        if (get(&dev, i) != 0 || uuid(u, dev) != 0 || attr(&sms, ATTR_MULTIPROCESSOR_COUNT, dev) != 0)
            continue;
        printf("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x %d\n", u[0], u[1], u[2], u[3],
               u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15], sms);
    }
    return 0;
}
