/* tests/stubs/fake_nvml.c - a stand-in libnvidia-ml.so.1 for CPU-only CI (never installed).
 *
 * Reads the devices from the file named by KESTREL_FAKE_GPU_FILE, one record a line:
 *   init rc=9
 *   gpu uuid=GPU-... name="NVIDIA A100-SXM4-80GB" bus=0000:07:00.0 cc=8.0 total=BYTES free=BYTES
 *       util=10/5 temp=40 power=250000 mig=0 perm=ok|denied
 *   mig parent=N uuid=MIG-... name="..." total=BYTES free=BYTES      (N: gpu record number, from 0)
 *   nvlink a=0 b=1 links=2                                            (both directions)
 *   topo a=0 b=1 level=20                                             (both directions)
 *   fail fn=nvmlDeviceGetUtilizationRates rc=3
 * Unknown records or keys abort with a message, so typos fail loudly. Every call is appended to
 * KESTREL_FAKE_TRACE when set, and a call that overlaps another in time is recorded as CONCURRENT
 * (proof that the library serialises NVML). Built twice: the default exports the _v2/_v3 entry
 * points like a current driver; -DFAKE_OLD_DRIVER exports only the v1 names of an old one. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "nvml.h"

#define API __attribute__((visibility("default")))
#define MAXDEV 128

struct nvmlDevice_st {
    char uuid[96], name[128], bus[32];
    unsigned domain, pbus, pdev;
    int cc_major, cc_minor, util_gpu, util_mem, temp, power, mig, denied, is_mig, parent;
    unsigned long long total, free;
};

static struct nvmlDevice_st devs[MAXDEV];
static int ndev, ngpu, init_rc, init_count, loaded;
static int nvlinks[MAXDEV][MAXDEV], topo[MAXDEV][MAXDEV];
static struct { char fn[64]; int rc; } fails[32];
static int nfails;
static atomic_int in_flight;

static void trace(const char *fn)
{
    const char *path = getenv("KESTREL_FAKE_TRACE");
    char line[128];
    int fd;
    if (!path)
        return;
    if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644)) < 0)
        return;
    snprintf(line, sizeof(line), "%s\n", fn);
    if (write(fd, line, strlen(line)) < 0)
        line[0] = 0;
    close(fd);
}

static void die(const char *what, const char *line)
{
    fprintf(stderr, "fake_nvml: %s in: %s\n", what, line);
    abort();
}

/* Next key=value token of a record; value may be "quoted". */
static int token(char **p, char *key, size_t kn, char *val, size_t vn)
{
    char *s = *p, *eq;
    size_t i = 0;
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s || *s == '\n')
        return 0;
    if ((eq = strchr(s, '=')) == NULL)
        return -1;
    snprintf(key, kn, "%.*s", (int)(eq - s), s);
    s = eq + 1;
    if (*s == '"') {
        for (s++; *s && *s != '"' && i + 1 < vn; s++)
            val[i++] = *s;
        if (*s == '"')
            s++;
    } else {
        for (; *s && *s != ' ' && *s != '\n' && i + 1 < vn; s++)
            val[i++] = *s;
    }
    val[i] = 0;
    *p = s;
    return 1;
}

static struct nvmlDevice_st *gpu_nr(int k);

static void load_file(void)
{
    const char *path = getenv("KESTREL_FAKE_GPU_FILE");
    char line[1024], key[64], val[256];
    FILE *f;
    /* each first init re-reads the description, so one process can test several machines */
    (void)loaded;
    ndev = ngpu = init_rc = nfails = 0;
    memset(nvlinks, 0, sizeof(nvlinks));
    memset(topo, 0, sizeof(topo));
    if (!path || (f = fopen(path, "r")) == NULL)
        return;
    while (fgets(line, sizeof(line), f)) {
        char *p = line, kind[16];
        int a = -1, b = -1, n = 0, r;
        if (sscanf(p, "%15s%n", kind, &n) != 1 || kind[0] == '#')
            continue;
        p += n;
        if (!strcmp(kind, "gpu") || !strcmp(kind, "mig")) {
            struct nvmlDevice_st *d = &devs[ndev];
            if (ndev == MAXDEV)
                die("too many devices", line);
            memset(d, 0, sizeof(*d));
            d->util_gpu = d->util_mem = 0;
            d->parent = -1;
            d->is_mig = kind[0] == 'm';
            while ((r = token(&p, key, sizeof(key), val, sizeof(val))) > 0) {
                if (!strcmp(key, "uuid")) snprintf(d->uuid, sizeof(d->uuid), "%s", val);
                else if (!strcmp(key, "name")) snprintf(d->name, sizeof(d->name), "%s", val);
                else if (!strcmp(key, "bus")) {
                    snprintf(d->bus, sizeof(d->bus), "%s", val);
                    if (sscanf(val, "%x:%x:%x", &d->domain, &d->pbus, &d->pdev) != 3)
                        die("bad bus", line);
                } else if (!strcmp(key, "cc")) { if (sscanf(val, "%d.%d", &d->cc_major, &d->cc_minor) != 2) die("bad cc", line); }
                else if (!strcmp(key, "total")) d->total = strtoull(val, NULL, 10);
                else if (!strcmp(key, "free")) d->free = strtoull(val, NULL, 10);
                else if (!strcmp(key, "util")) { if (sscanf(val, "%d/%d", &d->util_gpu, &d->util_mem) != 2) die("bad util", line); }
                else if (!strcmp(key, "temp")) d->temp = atoi(val);
                else if (!strcmp(key, "power")) d->power = atoi(val);
                else if (!strcmp(key, "mig")) d->mig = atoi(val);
                else if (!strcmp(key, "perm")) d->denied = !strcmp(val, "denied");
                else if (!strcmp(key, "parent")) d->parent = atoi(val);
                else if (!strcmp(key, "sms")) { /* for the stand-in libcuda */ }
                else die("unknown key", line);
            }
            if (r < 0)
                die("bad token", line);
            if (!d->is_mig) {
                ngpu++;
            } else {   /* a MIG instance reports its parent's compute capability */
                struct nvmlDevice_st *par = gpu_nr(d->parent);
                if (par == NULL)
                    die("mig parent is not a gpu record", line);
                d->cc_major = par->cc_major;
                d->cc_minor = par->cc_minor;
            }
            ndev++;
        } else if (!strcmp(kind, "nvlink") || !strcmp(kind, "topo")) {
            int v = 0;
            while ((r = token(&p, key, sizeof(key), val, sizeof(val))) > 0) {
                if (!strcmp(key, "a")) a = atoi(val);
                else if (!strcmp(key, "b")) b = atoi(val);
                else if (!strcmp(key, "links") || !strcmp(key, "level")) v = atoi(val);
                else die("unknown key", line);
            }
            if (a < 0 || b < 0 || a >= MAXDEV || b >= MAXDEV)
                die("bad pair", line);
            if (kind[0] == 'n')
                nvlinks[a][b] = nvlinks[b][a] = v;
            else
                topo[a][b] = topo[b][a] = v;
        } else if (!strcmp(kind, "init")) {
            if (sscanf(p, " rc=%d", &init_rc) != 1)
                die("bad init", line);
        } else if (!strcmp(kind, "fail")) {
            if (nfails == 32 || sscanf(p, " fn=%63s rc=%d", fails[nfails].fn, &fails[nfails].rc) != 2)
                die("bad fail", line);
            nfails++;
        } else {
            die("unknown record", line);
        }
    }
    fclose(f);
}

/* gpu record number k -> position in devs */
static struct nvmlDevice_st *gpu_nr(int k)
{
    for (int i = 0, g = 0; i < ndev; i++)
        if (!devs[i].is_mig && g++ == k)
            return &devs[i];
    return NULL;
}

static int gpu_number(const struct nvmlDevice_st *d)
{
    int g = 0;
    for (int i = 0; i < ndev; i++) {
        if (&devs[i] == d)
            return g;
        g += !devs[i].is_mig;
    }
    return -1;
}

typedef struct { const char *fn; } call;

static int enter(call *c, const char *fn)
{
    c->fn = fn;
    trace(fn);
    if (atomic_fetch_add(&in_flight, 1) > 0)
        trace("CONCURRENT");
    if (getenv("KESTREL_FAKE_TRACE")) {   /* widen the window so that unserialised callers would overlap */
        struct timespec ts = { 0, 20000 };
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < nfails; i++)
        if (!strcmp(fails[i].fn, fn))
            return fails[i].rc;
    if (strcmp(fn, "nvmlInit") && strcmp(fn, "nvmlInit_v2") && strcmp(fn, "nvmlErrorString") && init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    return NVML_SUCCESS;
}

#define ENTER(name) call c_; int rc_ = enter(&c_, name); if (rc_ != NVML_SUCCESS) { atomic_fetch_sub(&in_flight, 1); return rc_; }
#define LEAVE(v) do { atomic_fetch_sub(&in_flight, 1); return (v); } while (0)

static nvmlReturn_t do_init(const char *fn)
{
    ENTER(fn);
    if (init_count == 0)
        load_file();
    if (init_rc)
        LEAVE(init_rc);
    init_count++;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlInit(void) { return do_init("nvmlInit"); }
API nvmlReturn_t nvmlShutdown(void)
{
    ENTER("nvmlShutdown");
    if (init_count > 0)
        init_count--;
    LEAVE(NVML_SUCCESS);
}
API const char *nvmlErrorString(nvmlReturn_t rc)
{
    switch (rc) {
    case 1: return "Uninitialized";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 9: return "Driver Not Loaded";
    case 18: return "RM has detected an NVML/RM version mismatch";
    default: return "Unknown Error";
    }
}

/* v1 count hides devices without permission; v2 lists them (and their handle fails) */
static nvmlReturn_t count(unsigned int *n, int v2, const char *fn)
{
    ENTER(fn);
    *n = 0;
    for (int i = 0; i < ndev; i++)
        if (!devs[i].is_mig && (v2 || !devs[i].denied))
            (*n)++;
    LEAVE(NVML_SUCCESS);
}

static nvmlReturn_t handle(unsigned int idx, nvmlDevice_t *out, int v2, const char *fn)
{
    ENTER(fn);
    for (int i = 0, g = 0; i < ndev; i++) {
        if (devs[i].is_mig || (!v2 && devs[i].denied))
            continue;
        if ((unsigned)g++ == idx) {
            if (devs[i].denied)
                LEAVE(NVML_ERROR_NO_PERMISSION);
            *out = &devs[i];
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_INVALID_ARGUMENT);
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return count(n, 0, "nvmlDeviceGetCount"); }
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return handle(i, d, 0, "nvmlDeviceGetHandleByIndex"); }

static nvmlReturn_t string_out(const char *fn, const char *v, char *buf, unsigned int len)
{
    ENTER(fn);
    if (strlen(v) + 1 > len)
        LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    strcpy(buf, v);
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *b, unsigned int n) { return string_out("nvmlDeviceGetName", d->name, b, n); }
API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *b, unsigned int n) { return string_out("nvmlDeviceGetUUID", d->uuid, b, n); }

static nvmlReturn_t pci_of(const struct nvmlDevice_st *d, nvmlPciInfo_t *p, const char *fn)
{
    ENTER(fn);
    memset(p, 0, sizeof(*p));
    p->domain = d->domain;
    p->bus = d->pbus;
    p->device = d->pdev;
    snprintf(p->busId, sizeof(p->busId), "%08X:%02X:%02X.0", d->domain, d->pbus, d->pdev);
    snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "%04X:%02X:%02X.0", d->domain & 0xffff, d->pbus, d->pdev);
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_of(d, p, "nvmlDeviceGetPciInfo"); }

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    ENTER("nvmlDeviceGetMemoryInfo");
    m->total = d->total;
    m->free = d->free;
    m->used = d->total - d->free;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    ENTER("nvmlDeviceGetUtilizationRates");
    if (d->is_mig || d->mig)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    u->gpu = (unsigned)d->util_gpu;
    u->memory = (unsigned)d->util_mem;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *maj, int *min)
{
    ENTER("nvmlDeviceGetCudaComputeCapability");
    *maj = d->cc_major;
    *min = d->cc_minor;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t)
{
    ENTER("nvmlDeviceGetTemperature");
    (void)sensor;
    *t = (unsigned)d->temp;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *p)
{
    ENTER("nvmlDeviceGetPowerUsage");
    *p = (unsigned)d->power;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pending)
{
    ENTER("nvmlDeviceGetMigMode");
    if (d->is_mig)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *cur = *pending = (unsigned)d->mig;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *n)
{
    ENTER("nvmlDeviceGetMaxMigDeviceCount");
    *n = d->mig ? 7 : 0;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int idx, nvmlDevice_t *out)
{
    int nr = gpu_number(d);
    unsigned k = 0;
    ENTER("nvmlDeviceGetMigDeviceHandleByIndex");
    for (int i = 0; i < ndev; i++) {
        if (devs[i].is_mig && devs[i].parent == nr && k++ == idx) {
            *out = &devs[i];
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_NOT_FOUND);
}

API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level)
{
    ENTER("nvmlDeviceGetTopologyCommonAncestor");
    *level = topo[gpu_number(a)][gpu_number(b)];
    LEAVE(NVML_SUCCESS);
}

/* link k of GPU a: the k-th link counted over its peers in record order */
static struct nvmlDevice_st *link_peer(const struct nvmlDevice_st *d, unsigned int link)
{
    int a = gpu_number(d);
    unsigned k = 0;
    for (int b = 0; b < ngpu; b++)
        for (int i = 0; i < nvlinks[a][b]; i++)
            if (k++ == link)
                return gpu_nr(b);
    return NULL;
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *active)
{
    ENTER("nvmlDeviceGetNvLinkState");
    if (link >= NVML_NVLINK_MAX_LINKS)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *active = link_peer(d, link) != NULL;
    LEAVE(NVML_SUCCESS);
}

static nvmlReturn_t remote(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *p, const char *fn)
{
    struct nvmlDevice_st *peer = link_peer(d, link);
    if (peer == NULL) {
        call c_;
        enter(&c_, fn);
        atomic_fetch_sub(&in_flight, 1);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return pci_of(peer, p, fn);
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int l, nvmlPciInfo_t *p)
{
    return remote(d, l, p, "nvmlDeviceGetNvLinkRemotePciInfo");
}

#ifndef FAKE_OLD_DRIVER
API nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit_v2"); }
API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return count(n, 1, "nvmlDeviceGetCount_v2"); }
API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return handle(i, d, 1, "nvmlDeviceGetHandleByIndex_v2"); }
API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_of(d, p, "nvmlDeviceGetPciInfo_v3"); }
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    ENTER("nvmlDeviceGetMemoryInfo_v2");
    if (m->version != NVML_MEMORY_V2_VERSION)
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    m->total = d->total;
    m->free = d->free;
    m->reserved = 0;
    m->used = d->total - d->free;
    LEAVE(NVML_SUCCESS);
}
API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int l, nvmlPciInfo_t *p)
{
    return remote(d, l, p, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
}
#endif
