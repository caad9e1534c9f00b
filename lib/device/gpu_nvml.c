/* lib/device/gpu_nvml.c - NVML loaded with dlopen at first use; one lock around every call. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_priv.h"
#include "nvml.h"

typedef struct {
    char path[512];
    void *so;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*mem_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned int *, unsigned int *);
    nvmlReturn_t (*mig_max)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*mig_handle)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*topo)(nvmlDevice_t, nvmlDevice_t, int *);
    nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned int, int *);
    nvmlReturn_t (*link_remote)(nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
} nvml_api;

/* Every NVML call happens under this lock (NVML has had thread-safety bugs; NCCL does the same). */
static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static nvml_api api;   /* guarded by nvml_lock; libraries are never dlclose'd */

/* Resolve the newest symbol name first, then older ones. */
static void *sym(void *so, const char *const *names)
{
    for (; *names; names++) {
        void *p = dlsym(so, *names);
        if (p)
            return p;
    }
    return NULL;
}

#define RESOLVE(field, ...) \
    do { static const char *const n_[] = { __VA_ARGS__, NULL }; *(void **)&api.field = sym(so, n_); } while (0)

/* Load (or switch to) the library named by KESTREL_NVML_LIBRARY or libnvidia-ml.so.1. Lock held. */
static int load(char *diag, size_t dlen)
{
    const char *path = secure_getenv("KESTREL_NVML_LIBRARY");
    void *so;
    if (path == NULL || !*path)
        path = "libnvidia-ml.so.1";
    if (api.so && !strcmp(api.path, path))
        return 0;
    if ((so = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        snprintf(diag, dlen, "%s not found (no NVIDIA driver here)", path);
        return -1;
    }
    memset(&api, 0, sizeof(api));
    snprintf(api.path, sizeof(api.path), "%s", path);
    api.so = so;
    RESOLVE(init, "nvmlInit_v2", "nvmlInit");
    RESOLVE(shutdown, "nvmlShutdown");
    RESOLVE(error_string, "nvmlErrorString");
    /* the v2 count and handle calls belong together (v1 hides devices v2 lists) */
    RESOLVE(count, "nvmlDeviceGetCount_v2");
    RESOLVE(handle, "nvmlDeviceGetHandleByIndex_v2");
    if (!api.count || !api.handle) {
        RESOLVE(count, "nvmlDeviceGetCount");
        RESOLVE(handle, "nvmlDeviceGetHandleByIndex");
    }
    RESOLVE(name, "nvmlDeviceGetName");
    RESOLVE(uuid, "nvmlDeviceGetUUID");
    RESOLVE(pci, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo");
    RESOLVE(mem_v2, "nvmlDeviceGetMemoryInfo_v2");
    RESOLVE(mem, "nvmlDeviceGetMemoryInfo");
    RESOLVE(util, "nvmlDeviceGetUtilizationRates");
    RESOLVE(cc, "nvmlDeviceGetCudaComputeCapability");
    RESOLVE(temp, "nvmlDeviceGetTemperature");
    RESOLVE(power, "nvmlDeviceGetPowerUsage");
    RESOLVE(mig_mode, "nvmlDeviceGetMigMode");
    RESOLVE(mig_max, "nvmlDeviceGetMaxMigDeviceCount");
    RESOLVE(mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex");
    RESOLVE(topo, "nvmlDeviceGetTopologyCommonAncestor");
    RESOLVE(link_state, "nvmlDeviceGetNvLinkState");
    RESOLVE(link_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo");
    if (!api.init || !api.count || !api.handle || !api.uuid) {
        snprintf(diag, dlen, "%s lacks the basic NVML entry points", path);
        api.so = NULL;   /* keep the handle loaded, but do not use this table */
        return -1;
    }
    return 0;
}

static const char *nvml_error(nvmlReturn_t rc)
{
    const char *s = api.error_string ? api.error_string(rc) : NULL;
    return s ? s : "unknown NVML error";
}

static void fill_device(kestrel__gpu_entry *e, nvmlDevice_t h, unsigned int index)
{
    nvmlPciInfo_t pci;
    nvmlMemory_v2_t m2;
    nvmlMemory_t m1;
    nvmlUtilization_t u;
    unsigned int v, pending;
    int maj, min;

    e->pub.version = 1;
    e->pub.index = (int)index;
    e->pub.memory_total = e->pub.memory_free = e->pub.memory_used = -1;
    e->pub.utilization_gpu = e->pub.utilization_memory = -1;
    e->pub.cc_major = e->pub.cc_minor = -1;
    e->pub.multiprocessors = -1;
    e->pub.temperature = e->pub.power_mw = -1;
    e->pub.mig_mode = -1;
    e->pub.parent = -1;
    if (api.name && api.name(h, e->name, sizeof(e->name)) != NVML_SUCCESS)
        snprintf(e->name, sizeof(e->name), "unknown");
    if (api.pci && api.pci(h, &pci) == NVML_SUCCESS) {
        e->pci_domain = pci.domain;
        e->pci_bus = pci.bus;
        e->pci_device = pci.device;
        snprintf(e->bus, sizeof(e->bus), "%04x:%02x:%02x.0", pci.domain & 0xffff, pci.bus, pci.device);
    }
    memset(&m2, 0, sizeof(m2));
    m2.version = NVML_MEMORY_V2_VERSION;
    if (api.mem_v2 && api.mem_v2(h, &m2) == NVML_SUCCESS) {
        e->pub.memory_total = (int64_t)m2.total;
        e->pub.memory_free = (int64_t)m2.free;
        e->pub.memory_used = (int64_t)m2.used;
    } else if (api.mem && api.mem(h, &m1) == NVML_SUCCESS) {
        e->pub.memory_total = (int64_t)m1.total;
        e->pub.memory_free = (int64_t)m1.free;
        e->pub.memory_used = (int64_t)m1.used;
    }
    if (api.util && api.util(h, &u) == NVML_SUCCESS) {
        e->pub.utilization_gpu = (int)u.gpu;
        e->pub.utilization_memory = (int)u.memory;
    }
    if (api.cc && api.cc(h, &maj, &min) == NVML_SUCCESS) {
        e->pub.cc_major = maj;
        e->pub.cc_minor = min;
    }
    if (api.temp && api.temp(h, 0, &v) == NVML_SUCCESS)
        e->pub.temperature = (int)v;
    if (api.power && api.power(h, &v) == NVML_SUCCESS)
        e->pub.power_mw = (int)v;
    if (api.mig_mode) {
        nvmlReturn_t r = api.mig_mode(h, &v, &pending);
        e->pub.mig_mode = r == NVML_SUCCESS ? (int)(v == 1) : (r == NVML_ERROR_NOT_SUPPORTED ? 0 : -1);
    }
}

static int grow(kestrel_gpu_list *l, size_t *cap)
{
    if (l->n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    kestrel__gpu_entry *p = realloc(l->dev, ncap * sizeof(*p));
    if (p == NULL)
        return -1;
    l->dev = p;
    *cap = ncap;
    return 0;
}

/* Enumerate with the lock held. Returns -1 on OOM only; NVML trouble lands in l->diag. */
static int enumerate(kestrel_gpu_list *l)
{
    nvmlDevice_t handles[256];
    size_t cap = 0, ngpu = 0;
    unsigned int count = 0;
    nvmlReturn_t rc;

    if (load(l->diag, sizeof(l->diag)) < 0)
        return 0;
    if ((rc = api.init()) != NVML_SUCCESS) {
        snprintf(l->diag, sizeof(l->diag), "NVML init failed: %s (%d)", nvml_error(rc), rc);
        return 0;
    }
    if ((rc = api.count(&count)) != NVML_SUCCESS) {
        snprintf(l->diag, sizeof(l->diag), "NVML device count failed: %s", nvml_error(rc));
        count = 0;
    }
    for (unsigned int i = 0; i < count && ngpu < 256; i++) {
        kestrel__gpu_entry *e;
        nvmlDevice_t h;
        rc = api.handle(i, &h);
        if (rc != NVML_SUCCESS) {   /* NO_PERMISSION, GPU_IS_LOST: skip it and say so */
            size_t len = strlen(l->diag);
            snprintf(l->diag + len, sizeof(l->diag) - len, "%sGPU %u skipped: %s", len ? "; " : "", i, nvml_error(rc));
            continue;
        }
        if (grow(l, &cap) < 0)
            goto oom;
        e = &l->dev[l->n];
        memset(e, 0, sizeof(*e));
        if (api.uuid(h, e->uuid, sizeof(e->uuid)) != NVML_SUCCESS)
            continue;
        fill_device(e, h, i);
        handles[ngpu++] = h;
        l->n++;
        /* MIG instances of a MIG-enabled GPU */
        if (e->pub.mig_mode == 1 && api.mig_max && api.mig_handle) {
            unsigned int max = 0;
            size_t parent = l->n - 1;
            if (api.mig_max(h, &max) != NVML_SUCCESS)
                max = 0;
            for (unsigned int k = 0; k < max; k++) {
                nvmlDevice_t mh;
                kestrel__gpu_entry *m;
                if (api.mig_handle(h, k, &mh) != NVML_SUCCESS)
                    continue;   /* NOT_FOUND: an empty slot */
                if (grow(l, &cap) < 0)
                    goto oom;
                m = &l->dev[l->n];
                memset(m, 0, sizeof(*m));
                if (api.uuid(mh, m->uuid, sizeof(m->uuid)) != NVML_SUCCESS)
                    continue;
                fill_device(m, mh, i);
                m->pub.is_mig = 1;
                m->pub.parent = (int)parent;
                m->pub.mig_mode = 1;
                m->pub.utilization_gpu = m->pub.utilization_memory = -1;   /* NVML cannot tell on MIG */
                memcpy(m->bus, l->dev[parent].bus, sizeof(m->bus));
                m->pci_domain = l->dev[parent].pci_domain;
                m->pci_bus = l->dev[parent].pci_bus;
                m->pci_device = l->dev[parent].pci_device;
                if (m->pub.cc_major < 0) {
                    m->pub.cc_major = l->dev[parent].pub.cc_major;
                    m->pub.cc_minor = l->dev[parent].pub.cc_minor;
                }
                l->n++;
            }
        }
    }
    /* topology and NVLink between whole GPUs */
    if ((l->topo = malloc((l->n * l->n + 1) * sizeof(int))) == NULL ||
        (l->links = calloc(l->n * l->n + 1, sizeof(int))) == NULL)
        goto oom;
    for (size_t i = 0; i < l->n * l->n; i++)
        l->topo[i] = KESTREL_GPU_LINK_UNKNOWN;
    {
        size_t *pos = malloc((ngpu + 1) * sizeof(size_t)), g = 0;
        if (pos == NULL)
            goto oom;
        for (size_t i = 0; i < l->n; i++)
            if (!l->dev[i].pub.is_mig)
                pos[g++] = i;
        for (size_t a = 0; a < ngpu; a++) {
            for (size_t b = 0; b < ngpu; b++) {
                int level;
                if (a != b && api.topo && api.topo(handles[a], handles[b], &level) == NVML_SUCCESS)
                    l->topo[pos[a] * l->n + pos[b]] = level;
            }
            for (unsigned int link = 0; api.link_state && api.link_remote && link < NVML_NVLINK_MAX_LINKS; link++) {
                int active = 0;
                nvmlPciInfo_t remote;
                if (api.link_state(handles[a], link, &active) != NVML_SUCCESS || !active ||
                    api.link_remote(handles[a], link, &remote) != NVML_SUCCESS)
                    continue;
                for (size_t b = 0; b < ngpu; b++) {
                    const kestrel__gpu_entry *r = &l->dev[pos[b]];
                    if (b != a && r->pci_domain == remote.domain && r->pci_bus == remote.bus && r->pci_device == remote.device)
                        l->links[pos[a] * l->n + pos[b]]++;
                }
            }
        }
        free(pos);
    }
    api.shutdown();
    return 0;
oom:
    api.shutdown();
    return -1;
}

static int by_pci(const void *x, const void *y, void *entries)
{
    const kestrel__gpu_entry *a = (const kestrel__gpu_entry *)entries + *(const size_t *)x;
    const kestrel__gpu_entry *b = (const kestrel__gpu_entry *)entries + *(const size_t *)y;
    int c = strcmp(a->bus, b->bus);
    if (c)
        return c;
    if (a->pub.is_mig != b->pub.is_mig)
        return a->pub.is_mig - b->pub.is_mig;
    return strcmp(a->uuid, b->uuid);
}

/* Keep entries keep[0..k) of n (in that order), remapping the tables and parent positions. */
static void reorder(kestrel_gpu_list *l, const size_t *keep, size_t k, kestrel__gpu_entry *tmp, int *t2, int *l2)
{
    size_t n = l->n;
    for (size_t a = 0; a < k; a++) {
        tmp[a] = l->dev[keep[a]];
        tmp[a].pub.parent = -1;
        for (size_t b = 0; b < k; b++) {
            t2[a * k + b] = l->topo[keep[a] * n + keep[b]];
            l2[a * k + b] = l->links[keep[a] * n + keep[b]];
            if (l->dev[keep[a]].pub.parent >= 0 && keep[b] == (size_t)l->dev[keep[a]].pub.parent)
                tmp[a].pub.parent = (int)b;
        }
    }
    memcpy(l->dev, tmp, k * sizeof(*tmp));
    memcpy(l->topo, t2, k * k * sizeof(int));
    memcpy(l->links, l2, k * k * sizeof(int));
    l->n = k;
}

int kestrel_gpu_list_query(kestrel_gpu_list **out, unsigned int flags)
{
    kestrel_gpu_list *l;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return kestrel__error_oom();
    pthread_mutex_lock(&nvml_lock);
    rc = enumerate(l);
    pthread_mutex_unlock(&nvml_lock);
    if (rc < 0) {
        l->magic = KESTREL__MAGIC_GPUS;
        kestrel_gpu_list_free(l);
        return kestrel__error_oom();
    }
    /* NVML's order promises nothing: present GPUs in PCI order (MIG instances after their
     * parent), then drop what CUDA_VISIBLE_DEVICES hides unless asked for everything. */
    {
        size_t n = l->n, k = 0;
        size_t *idx = malloc((n + 1) * sizeof(size_t));
        kestrel__gpu_entry *tmp = malloc((n + 1) * sizeof(*tmp));
        int *t2 = malloc((n * n + 1) * sizeof(int)), *l2 = malloc((n * n + 1) * sizeof(int));
        if (!idx || !tmp || !t2 || !l2) {
            free(idx); free(tmp); free(t2); free(l2);
            l->magic = KESTREL__MAGIC_GPUS;
            kestrel_gpu_list_free(l);
            return kestrel__error_oom();
        }
        for (size_t i = 0; i < n; i++)
            idx[i] = i;
        if (n > 1)
            qsort_r(idx, n, sizeof(size_t), by_pci, l->dev);
        if (n)
            reorder(l, idx, n, tmp, t2, l2);
        if ((flags & KESTREL_GPU_QUERY_CUDA) && l->n)
            kestrel__gpu_cuda_probe(l->dev, l->n, l->diag, sizeof(l->diag));
        kestrel__gpu_apply_visible(l->dev, l->n, getenv("CUDA_VISIBLE_DEVICES"), l->diag, sizeof(l->diag));
        if (!(flags & KESTREL_GPU_QUERY_ALL)) {
            for (size_t i = 0; i < n; i++)
                if (l->dev[i].pub.visible)
                    idx[k++] = i;
            if (k < n)
                reorder(l, idx, k, tmp, t2, l2);
        }
        free(idx); free(tmp); free(t2); free(l2);
    }
    for (size_t i = 0; i < l->n; i++) {
        l->dev[i].pub.uuid = l->dev[i].uuid;
        l->dev[i].pub.name = l->dev[i].name;
        l->dev[i].pub.pci_bus_id = l->dev[i].bus;
    }
    l->magic = KESTREL__MAGIC_GPUS;
    *out = l;
    return 0;
}

#define LIST_OK(l) ((l) && (l)->magic == KESTREL__MAGIC_GPUS)

size_t kestrel_gpu_list_count(const kestrel_gpu_list *l) { return LIST_OK(l) ? l->n : 0; }

const kestrel_gpu *kestrel_gpu_list_get(const kestrel_gpu_list *l, size_t i)
{
    return (LIST_OK(l) && i < l->n) ? &l->dev[i].pub : NULL;
}

const char *kestrel_gpu_list_diagnostic(const kestrel_gpu_list *l) { return LIST_OK(l) ? l->diag : ""; }

int kestrel_gpu_list_topology(const kestrel_gpu_list *l, size_t a, size_t b)
{
    if (!LIST_OK(l) || a >= l->n || b >= l->n || l->topo == NULL)
        return KESTREL_GPU_LINK_UNKNOWN;
    return a == b ? KESTREL_GPU_LINK_SAME_BOARD : l->topo[a * l->n + b];
}

int kestrel_gpu_list_nvlinks(const kestrel_gpu_list *l, size_t a, size_t b)
{
    if (!LIST_OK(l) || a >= l->n || b >= l->n || l->links == NULL || a == b)
        return 0;
    return l->links[a * l->n + b];
}

void kestrel_gpu_list_free(kestrel_gpu_list *l)
{
    if (l == NULL || l->magic != KESTREL__MAGIC_GPUS)
        return;
    l->magic = KESTREL__MAGIC_DEAD;
    free(l->dev);
    free(l->topo);
    free(l->links);
    free(l);
}
