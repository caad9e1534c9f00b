/* lib/device/gpu_select.c - the CUDA-aware device selector, its environment, and advisory locks.
 *
 * 1. Filter every visible device, keeping each rejection's reason.
 * 2. Rank devices: utilisation (10-point buckets, unknown last), free memory (1 GiB buckets,
 *    more first), compute capability, total memory, then PCI order.
 * 3. Sets of N: only sets of one GPU model (name + cc + memory) when one model has N candidates;
 *    with prefer_nvlink, the best link score (100 per NVLink + PCIe closeness), then the least
 *    fragmentation (the best score still possible for another N-set among the rest), then the
 *    members' ranks, then PCI order. Without prefer_nvlink, the first N by rank of the best model.
 * 4. The chosen devices are reported in PCI order. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpu_priv.h"

#define MAX_ENUM 20000   /* enumerate all N-subsets up to this many, else greedy */
#define GiB (1024LL * 1024 * 1024)

struct kestrel_gpu_selection {
    uint32_t magic;
    const kestrel_gpu_list *list;   /* borrowed: the list must outlive the selection */
    size_t *chosen;
    size_t nchosen;
    char (*reason)[128];            /* per list device */
    int *lock_fds;
    size_t nlocks;
};

static const size_t opts_sizes[] = { 0, offsetof(kestrel_gpu_select_options, allow_mig) + sizeof(int) };

int kestrel_gpu_select_options_init(kestrel_gpu_select_options *o, unsigned int version)
{
    if (o == NULL || version == 0 || version >= KESTREL__ARRAY_SIZE(opts_sizes))
        return kestrel__error_set(KESTREL_EMISUSE, "invalid kestrel_gpu_select_options version %u", version);
    memset(o, 0, sizeof(*o));
    o->version = version;
    return 0;
}

static int load_opts(kestrel_gpu_select_options *dst, const kestrel_gpu_select_options *src)
{
    memset(dst, 0, sizeof(*dst));
    if (src) {
        if (src->version == 0 || src->version >= KESTREL__ARRAY_SIZE(opts_sizes))
            return kestrel__error_set(KESTREL_EMISUSE, "invalid kestrel_gpu_select_options version %u", src->version);
        memcpy(dst, src, opts_sizes[src->version]);
    }
    dst->version = KESTREL_GPU_SELECT_OPTIONS_VERSION;
    if (dst->count <= 0)
        dst->count = 1;
    return 0;
}

static int excluded(const kestrel_gpu *g, const char *const *ex)
{
    for (; ex && *ex; ex++) {
        size_t n = strlen(*ex);
        if (n && (!strncasecmp(g->uuid, *ex, n) || !strcasecmp(g->pci_bus_id, *ex)))
            return 1;
    }
    return 0;
}

/* Rank key comparison (lower first): see the file comment. */
static int rank_cmp(const void *x, const void *y, void *list)
{
    const kestrel__gpu_entry *d = ((const kestrel_gpu_list *)list)->dev;
    const kestrel_gpu *a = &d[*(const size_t *)x].pub, *b = &d[*(const size_t *)y].pub;
    int ua = a->utilization_gpu < 0 ? 100 : a->utilization_gpu / 10, ub = b->utilization_gpu < 0 ? 100 : b->utilization_gpu / 10;
    int64_t fa = a->memory_free / GiB, fb = b->memory_free / GiB;
    if (ua != ub)
        return ua - ub;
    if (fa != fb)
        return fa > fb ? -1 : 1;
    if (a->cc_major * 10 + a->cc_minor != b->cc_major * 10 + b->cc_minor)
        return (b->cc_major * 10 + b->cc_minor) - (a->cc_major * 10 + a->cc_minor);
    if (a->memory_total != b->memory_total)
        return a->memory_total > b->memory_total ? -1 : 1;
    return (int)(*(const size_t *)x) - (int)(*(const size_t *)y);   /* list order is PCI order */
}

static int same_model(const kestrel_gpu *a, const kestrel_gpu *b)
{
    return !strcmp(a->name, b->name) && a->cc_major == b->cc_major && a->cc_minor == b->cc_minor &&
           a->memory_total == b->memory_total;
}

static int pcie_score(int level)
{
    switch (level) {
    case KESTREL_GPU_LINK_SAME_BOARD: return 60;
    case KESTREL_GPU_LINK_PCIE_SWITCH: return 50;
    case KESTREL_GPU_LINK_PCIE_SWITCHES: return 40;
    case KESTREL_GPU_LINK_HOST_BRIDGE: return 30;
    case KESTREL_GPU_LINK_NUMA_NODE: return 20;
    case KESTREL_GPU_LINK_SYSTEM: return 10;
    default: return 0;
    }
}

/* Sets are handled as positions in the rank-ordered candidate array; ps[a * m + b] is the pair
 * score of candidates a and b, computed once per selection. */
static long set_score(const long *ps, size_t m, const size_t *set, int n)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            s += ps[set[i] * m + set[k]];
    return s;
}

/* Greedy n-set from seed among positions not in used[0..nu); returns its score, -1 if too few. */
static long greedy(const long *ps, size_t m, size_t seed, const size_t *used, int nu, int n, size_t *set)
{
    int k = 1;
    set[0] = seed;
    while (k < n) {
        long gain = -1;
        size_t pick = 0;
        for (size_t i = 0; i < m; i++) {
            int in = 0;
            long g = 0;
            for (int q = 0; q < k && !in; q++)
                in = set[q] == i;
            for (int q = 0; q < nu && !in; q++)
                in = used[q] == i;
            if (in)
                continue;
            for (int q = 0; q < k; q++)
                g += ps[set[q] * m + i];
            if (g > gain) {
                gain = g;
                pick = i;
            }
        }
        if (gain < 0)
            return -1;
        set[k++] = pick;
    }
    return set_score(ps, m, set, n);
}

/* Fragmentation: the best score another n-set could still get among what is left (greedy bound). */
static long best_left(const long *ps, size_t m, const size_t *used, int n)
{
    size_t set[64];
    long best = 0;
    int seeds = 0;
    for (size_t seed = 0; seed < m && seeds < 4; seed++) {   /* from the 4 best-ranked left */
        int in = 0;
        long sc;
        for (int q = 0; q < n && !in; q++)
            in = used[q] == seed;
        if (in)
            continue;
        seeds++;
        if ((sc = greedy(ps, m, seed, used, n, n, set)) > best)
            best = sc;
    }
    return best;
}

typedef struct {
    long score, frag;
    size_t set[64];   /* positions, ascending = rank order */
} candidate_set;

/* Is a better than b? score, then fragmentation, then member ranks (positions), i.e. PCI order last. */
static int better(const candidate_set *a, const candidate_set *b, int n)
{
    if (a->score != b->score)
        return a->score > b->score;
    if (a->frag != b->frag)
        return a->frag > b->frag;
    for (int i = 0; i < n; i++)
        if (a->set[i] != b->set[i])
            return a->set[i] < b->set[i];
    return 0;
}

static void consider(const long *ps, size_t m, const size_t *set, int n, candidate_set *best, int *have)
{
    candidate_set c;
    memcpy(c.set, set, (size_t)n * sizeof(size_t));
    for (int i = 1; i < n; i++)   /* ascending positions: compare like with like */
        for (int k = i; k > 0 && c.set[k] < c.set[k - 1]; k--) {
            size_t t = c.set[k];
            c.set[k] = c.set[k - 1];
            c.set[k - 1] = t;
        }
    c.score = set_score(ps, m, c.set, n);
    if (*have && c.score < best->score)
        return;
    c.frag = best_left(ps, m, c.set, n);
    if (!*have || better(&c, best, n)) {
        *best = c;
        *have = 1;
    }
}

static double choose(double m, int n)
{
    double c = 1;
    for (int i = 0; i < n; i++)
        c = c * (m - i) / (i + 1);
    return c;
}

/* Choose n of cand[0..m) (in rank order) into out (list positions). */
static int choose_set(const kestrel_gpu_list *l, const size_t *cand, size_t m, int n, int topo, size_t *out)
{
    candidate_set best;
    size_t idx[64], set[64] = { 0 };
    long *ps;
    int have = 0;
    if (!topo || n == 1) {
        memcpy(out, cand, (size_t)n * sizeof(size_t));
        return 0;
    }
    if ((ps = malloc(m * m * sizeof(long))) == NULL)
        return -1;
    for (size_t a = 0; a < m; a++)
        for (size_t b = 0; b < m; b++)
            ps[a * m + b] = a == b || !l->topo ? 0
                                   : pcie_score(l->topo[cand[a] * l->n + cand[b]]) + 100L * l->links[cand[a] * l->n + cand[b]];
    memset(&best, 0, sizeof(best));
    if (choose((double)m, n) <= MAX_ENUM) {
        for (int i = 0; i < n; i++)
            idx[i] = (size_t)i;
        for (;;) {
            int i;
            consider(ps, m, idx, n, &best, &have);
            for (i = n - 1; i >= 0 && idx[i] == m - (size_t)n + (size_t)i; i--)
                ;
            if (i < 0)
                break;
            idx[i]++;
            for (int k = i + 1; k < n; k++)
                idx[k] = idx[k - 1] + 1;
        }
    } else {
        for (size_t seed = 0; seed < 4 && seed < m; seed++)   /* greedy from the 4 best-ranked */
            if (greedy(ps, m, seed, NULL, 0, n, set) >= 0)
                consider(ps, m, set, n, &best, &have);
    }
    for (int i = 0; i < n; i++)
        out[i] = cand[best.set[i]];
    free(ps);
    return 0;
}

static int by_index(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

int kestrel_gpu_select(kestrel_gpu_selection **out, const kestrel_gpu_list *l, const kestrel_gpu_select_options *given)
{
    kestrel_gpu_select_options o;
    kestrel_gpu_selection *sel;
    size_t *cand, m = 0, n;
    int rc, n_mig = 0;

    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(l, KESTREL__MAGIC_GPUS, "gpu list");
    if ((rc = load_opts(&o, given)) < 0)
        return rc;
    if (o.count > 64)
        return kestrel__error_set(KESTREL_EINVALID, "at most 64 devices in one selection");
    n = l->n;
    sel = calloc(1, sizeof(*sel));
    cand = malloc((n + 1) * sizeof(size_t));
    if (sel == NULL || cand == NULL || (sel->reason = calloc(n + 1, sizeof(*sel->reason))) == NULL ||
        (sel->chosen = calloc((size_t)o.count, sizeof(size_t))) == NULL) {
        if (sel)
            free(sel->reason);
        free(sel);
        free(cand);
        return kestrel__error_oom();
    }
    sel->magic = KESTREL__MAGIC_GPUSEL;
    sel->list = l;
    for (size_t i = 0; i < n; i++) {
        const kestrel_gpu *g = &l->dev[i].pub;
        char *why = sel->reason[i];
        if (!g->visible)
            snprintf(why, 128, "hidden by CUDA_VISIBLE_DEVICES");
        else if (excluded(g, o.exclude))
            snprintf(why, 128, "excluded");
        else if (!g->is_mig && g->mig_mode == 1)
            snprintf(why, 128, "MIG is enabled: only its instances can be used");
        else if (g->is_mig && (!o.allow_mig || o.count != 1))
            snprintf(why, 128, o.allow_mig ? "a MIG instance serves only a selection of 1" : "a MIG instance (allow_mig is off)");
        else if (o.name_pattern && fnmatch(o.name_pattern, g->name, FNM_CASEFOLD) != 0)
            snprintf(why, 128, "name does not match %.60s", o.name_pattern);
        else if ((o.min_cc_major || o.min_cc_minor) &&
                 (g->cc_major < 0 || g->cc_major * 10 + g->cc_minor < o.min_cc_major * 10 + o.min_cc_minor))
            snprintf(why, 128, "compute capability %d.%d < %d.%d", g->cc_major, g->cc_minor, o.min_cc_major, o.min_cc_minor);
        else if (o.min_total_memory && g->memory_total < o.min_total_memory)
            snprintf(why, 128, "total memory %lld MiB < %lld MiB", (long long)(g->memory_total >> 20),
                     (long long)(o.min_total_memory >> 20));
        else if (o.min_free_memory && g->memory_free < o.min_free_memory)
            snprintf(why, 128, "free memory %lld MiB < %lld MiB", (long long)(g->memory_free >> 20),
                     (long long)(o.min_free_memory >> 20));
        else if (o.max_utilization && (g->utilization_gpu < 0 ? !g->is_mig : g->utilization_gpu > o.max_utilization))
            snprintf(why, 128, g->utilization_gpu < 0 ? "utilisation unknown" : "utilisation %d%% > %d%%",
                     g->utilization_gpu, o.max_utilization);
        else {
            cand[m++] = i;
            n_mig += g->is_mig;
        }
    }
    /* prefer whole GPUs over MIG instances when enough of them pass */
    if (n_mig && m - (size_t)n_mig >= (size_t)o.count) {
        size_t k = 0;
        for (size_t i = 0; i < m; i++) {
            if (l->dev[cand[i]].pub.is_mig)
                snprintf(sel->reason[cand[i]], 128, "a whole GPU is preferred to a MIG instance");
            else
                cand[k++] = cand[i];
        }
        m = k;
    }
    if (m > 1)
        qsort_r(cand, m, sizeof(size_t), rank_cmp, (void *)l);
    if (m < (size_t)o.count) {
        free(cand);
        *out = sel;
        return kestrel__error_set(KESTREL_ENOTFOUND, "%zu of %d devices found that meet the criteria", m, o.count);
    }
    /* one GPU model when a model has enough candidates: the best-ranked such model */
    {
        size_t *model = malloc((m + 1) * sizeof(size_t)), k = 0;
        if (model == NULL) {
            free(cand);
            kestrel_gpu_selection_free(sel);
            return kestrel__error_oom();
        }
        for (size_t lead = 0; lead < m && k < (size_t)o.count; lead++) {
            k = 0;
            for (size_t i = 0; i < m; i++)
                if (same_model(&l->dev[cand[i]].pub, &l->dev[cand[lead]].pub))
                    model[k++] = cand[i];
        }
        if (k >= (size_t)o.count) {
            for (size_t i = 0; i < m; i++) {
                int in = 0;
                for (size_t q = 0; q < k; q++)
                    in |= model[q] == cand[i];
                if (!in)
                    snprintf(sel->reason[cand[i]], 128, "another GPU model has enough devices");
            }
            memcpy(cand, model, k * sizeof(size_t));
            m = k;
        }
        free(model);
    }
    if (choose_set(l, cand, m, o.count, o.prefer_nvlink, sel->chosen) < 0) {
        free(cand);
        kestrel_gpu_selection_free(sel);
        return kestrel__error_oom();
    }
    sel->nchosen = (size_t)o.count;
    qsort(sel->chosen, sel->nchosen, sizeof(size_t), by_index);   /* PCI order */
    for (size_t i = 0; i < m; i++) {
        int in = 0;
        for (size_t q = 0; q < sel->nchosen; q++)
            in |= sel->chosen[q] == cand[i];
        if (!in)
            snprintf(sel->reason[cand[i]], 128, o.prefer_nvlink && o.count > 1 ? "a better-connected set was chosen"
                                                                                : "ranked below the chosen devices");
    }
    free(cand);
    *out = sel;
    return 0;
}

#define SEL_OK(s) ((s) && (s)->magic == KESTREL__MAGIC_GPUSEL)

size_t kestrel_gpu_selection_count(const kestrel_gpu_selection *s) { return SEL_OK(s) ? s->nchosen : 0; }

size_t kestrel_gpu_selection_at(const kestrel_gpu_selection *s, size_t i)
{
    return (SEL_OK(s) && i < s->nchosen) ? s->chosen[i] : (size_t)-1;
}

const char *kestrel_gpu_selection_reason(const kestrel_gpu_selection *s, size_t i)
{
    return (SEL_OK(s) && i < s->list->n) ? s->reason[i] : "";
}

int kestrel_gpu_selection_visible_devices(kestrel_buf *out, const kestrel_gpu_selection *s)
{
    int rc = 0;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    if (!SEL_OK(s))
        return kestrel__error_set(KESTREL_EMISUSE, "selection is not a live handle");
    rc = kestrel__buf_puts(out, "");
    for (size_t i = 0; i < s->nchosen && rc == 0; i++)
        rc = kestrel__buf_printf(out, "%s%s", i ? "," : "", s->list->dev[s->chosen[i]].uuid);
    return rc;
}

int kestrel_gpu_selection_apply(const kestrel_gpu_selection *s)
{
    kestrel_buf v = KESTREL_BUF_INIT;
    const char *alt = secure_getenv("KESTREL_CUDA_LIBRARY");
    int rc;
    if (!SEL_OK(s))
        return kestrel__error_set(KESTREL_EMISUSE, "selection is not a live handle");
    /* CUDA reads these once, at cuInit: too late once the driver library is in the process */
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) || (alt && *alt && dlopen(alt, RTLD_NOW | RTLD_NOLOAD)))
        return kestrel__error_set(KESTREL_EMISUSE,
                                  "CUDA is already loaded in this process: set CUDA_VISIBLE_DEVICES before any framework starts");
    if ((rc = kestrel_gpu_selection_visible_devices(&v, s)) < 0)
        return rc;
    if (setenv("CUDA_VISIBLE_DEVICES", v.ptr, 1) < 0 || setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1) < 0)
        rc = kestrel__error_set(KESTREL_EIO, "setenv failed: %s", strerror(errno));
    kestrel_buf_dispose(&v);
    return rc;
}

int kestrel_gpu_selection_lock(kestrel_gpu_selection *s, const char *dir)
{
    if (!SEL_OK(s))
        return kestrel__error_set(KESTREL_EMISUSE, "selection is not a live handle");
    if (dir == NULL)
        dir = "/tmp/kestrel-gpu";
    if (mkdir(dir, 01777) < 0 && errno != EEXIST)
        return kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", dir, strerror(errno));
    if (s->lock_fds == NULL && (s->lock_fds = calloc(s->nchosen + 1, sizeof(int))) == NULL)
        return kestrel__error_oom();
    for (size_t i = s->nlocks; i < s->nchosen; i++) {
        char path[1024];
        int fd;
        snprintf(path, sizeof(path), "%s/gpu-%s.lock", dir, s->list->dev[s->chosen[i]].uuid);
        if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666)) < 0)
            return kestrel__error_set(KESTREL_EIO, "cannot open %s: %s", path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            int e = errno;
            close(fd);
            return e == EWOULDBLOCK ? kestrel__error_set(KESTREL_EEXISTS, "GPU %s is locked by another process",
                                                         s->list->dev[s->chosen[i]].uuid)
                                    : kestrel__error_set(KESTREL_EIO, "cannot lock %s: %s", path, strerror(e));
        }
        s->lock_fds[s->nlocks++] = fd;
    }
    return 0;
}

void kestrel_gpu_selection_free(kestrel_gpu_selection *s)
{
    if (!SEL_OK(s))
        return;
    s->magic = KESTREL__MAGIC_DEAD;
    for (size_t i = 0; i < s->nlocks; i++)
        close(s->lock_fds[i]);   /* releases the flock */
    free(s->lock_fds);
    free(s->chosen);
    free(s->reason);
    free(s);
}
