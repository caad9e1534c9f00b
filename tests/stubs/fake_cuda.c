/* tests/stubs/fake_cuda.c - a stand-in libcuda.so.1 (never installed): the devices of
 * KESTREL_FAKE_GPU_FILE ("gpu uuid=GPU-... bus=... sms=N" records) in PCI order, honouring
 * CUDA_VISIBLE_DEVICES given as full GPU UUIDs; calls are appended to KESTREL_FAKE_TRACE. Also lets
 * tests "have CUDA loaded" to check that libkestrel then refuses to change CUDA_VISIBLE_DEVICES. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

static struct { char uuid[64], bus[32]; int sms; } devs[128];
static int ndev, inited;

static void trace(const char *fn)
{
    const char *path = getenv("KESTREL_FAKE_TRACE");
    int fd;
    if (path && (fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644)) >= 0) {
        if (write(fd, fn, strlen(fn)) >= 0)
            (void)!write(fd, "\n", 1);
        close(fd);
    }
}

static void field(const char *line, const char *key, char *out, size_t n)
{
    const char *p = strstr(line, key);
    size_t k = 0;
    out[0] = 0;
    if (!p)
        return;
    for (p += strlen(key); *p && *p != ' ' && *p != '\n' && k + 1 < n; p++)
        out[k++] = *p;
    out[k] = 0;
}

static int by_bus(const void *a, const void *b)
{
    return strcmp((const char *)a + 64, (const char *)b + 64);
}

API int cuInit(unsigned int flags)
{
    const char *path = getenv("KESTREL_FAKE_GPU_FILE"), *visible = getenv("CUDA_VISIBLE_DEVICES");
    char line[1024], sms[16];
    FILE *f;
    trace("cuInit");
    if (flags)
        return 1;
    ndev = 0;
    if (path && (f = fopen(path, "r")) != NULL) {
        while (fgets(line, sizeof(line), f) && ndev < 128) {
            if (strncmp(line, "gpu ", 4))
                continue;
            field(line, "uuid=", devs[ndev].uuid, sizeof(devs[ndev].uuid));
            field(line, "bus=", devs[ndev].bus, sizeof(devs[ndev].bus));
            field(line, "sms=", sms, sizeof(sms));
            devs[ndev].sms = atoi(sms);
            if (visible && !strstr(visible, devs[ndev].uuid))
                continue;
            ndev++;
        }
        fclose(f);
    }
    qsort(devs, (size_t)ndev, sizeof(devs[0]), by_bus);
    inited = 1;
    return ndev ? 0 : 100;   /* CUDA_ERROR_NO_DEVICE */
}

API int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
API int cuDeviceGetCount(int *n) { *n = inited ? ndev : 0; return inited ? 0 : 3; }
API int cuDeviceGet(int *d, int i) { *d = i; return i >= 0 && i < ndev ? 0 : 101; }

API int cuDeviceGetAttribute(int *v, int attr, int d)
{
    if (d < 0 || d >= ndev)
        return 101;
    *v = attr == 16 ? devs[d].sms : 0;
    return 0;
}

API int cuDeviceGetUuid_v2(unsigned char *u, int d)
{
    const char *s;
    int k = 0;
    if (d < 0 || d >= ndev)
        return 101;
    for (s = devs[d].uuid + 4; *s && k < 16; s++) {
        unsigned v;
        if (*s == '-')
            continue;
        if (sscanf(s, "%2x", &v) != 1)
            return 1;
        u[k++] = (unsigned char)v;
        s++;
    }
    return k == 16 ? 0 : 1;
}
