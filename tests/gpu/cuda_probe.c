/* tests/gpu/cuda_probe.c - print the UUIDs CUDA lets this process see (dlopen, no CUDA headers). */
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    void *so = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*init)(unsigned), (*count)(int *), (*get)(int *, int), (*uuid)(unsigned char *, int);
    int n = 0;
    if (!so) {
        fprintf(stderr, "cuda_probe: libcuda.so.1 not found\n");
        return 2;
    }
    *(void **)&init = dlsym(so, "cuInit");
    *(void **)&count = dlsym(so, "cuDeviceGetCount");
    *(void **)&get = dlsym(so, "cuDeviceGet");
    *(void **)&uuid = dlsym(so, "cuDeviceGetUuid_v2");
    if (!uuid)
        *(void **)&uuid = dlsym(so, "cuDeviceGetUuid");
    if (!init || !count || !get || !uuid || init(0) != 0 || count(&n) != 0)
        return 3;
    for (int i = 0; i < n; i++) {
        int dev;
        unsigned char u[16];
        if (get(&dev, i) != 0 || uuid(u, dev) != 0)
            return 4;
        printf("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", u[0], u[1], u[2], u[3], u[4],
               u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    }
    return 0;
}
