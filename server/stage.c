/* server/stage.c - a job's repository inputs put in place before it starts. Its code (a fresh copy of
 * a directory version) becomes its work dir; each dataset is linked in at its path from a copy
 * kept once per host (DATA/cache/data, root's, files 0444), so a second job links the same bytes
 * instead of copying them and no job can change them. Root builds the work dir where no job can
 * reach (DATA/staging, 0700) and hands it over whole by rename: it never writes inside a tree a
 * job controls, and never changes the owner of a cached file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "kestrel.h"
#include "stage.h"
#include "repo_settle.h"
#include "repo.h"
#include "store.h"

/* Pulls into the cache run without a lock; cache_mu guards only the set of entries being made, so a
 * second job wanting the same one waits for it (cache_cv) and jobs wanting others do not. */
#define MAX_BUILDING 64
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cache_cv = PTHREAD_COND_INITIALIZER;
static char building[MAX_BUILDING][65];
static char failed_ref[420], failed_why[1024];   /* the last prefetch that failed, for its job */

/* What a copy into the data dir may take: the bytes of the version, while its disk keeps
 * KEEP_FREE_MIN (or a twentieth of the disk, if more) free after it. A version's size is not its
 * stored size (a hostile test: 300,000 files naming one 1 MiB chunk, 300 GB from a 50 MB commit,
 * copied as root until the disk was full), so it is checked before the copy writes. */
#define KEEP_FREE_MIN ((int64_t)1 << 30)
#define WANTED_EVERY_MS 1000

typedef struct {
    kd_engine *e;
    const char *ref;
    int for_queued;          /* a prefetch: stopped once no QUEUED job asks for ref (cancelled) */
    int64_t checked_ms;
    int64_t too_big, avail;  /* set when the version did not fit */
    int abandoned;
    int64_t held;            /* of copy_reserved, this copy's */
} copy_watch;

/* The bytes the copies under way have still to write, when each started (under cache_mu): a copy
 * fits where the disk holds it beside them, so that ten copies started at once do not each count
 * the same free space. */
static int64_t copy_reserved;

/* Whether a QUEUED job (among the first the scheduler reads) still asks for dataset ref. */
static int still_wanted(kd_engine *e, const char *ref)
{
    kd_queued *q = NULL;
    size_t n = 0;
    int wanted = 0;
    if (kd_catalog_queue(e->cat, 10000, &q, &n) < 0)
        return 1;   /* unknown: the copy goes on */
    for (size_t i = 0; i < n && !wanted; i++)
        for (size_t k = 0; k < q[i].spec->n_data && !wanted; k++)
            wanted = !strcmp(q[i].spec->data[k]->ref, ref);
    kd_queued_free(q, n);
    return wanted;
}

/* Take room for what the copy has still to write, once its size is known: 1, or 0 (w->too_big and
 * w->avail set) where the disk would not keep its reserve beside the copies under way. A disk that
 * cannot be read (statvfs) is not held against the copy. */
static int reserve(copy_watch *w, const kestrel_progress *p)
{
    struct statvfs vfs;
    int64_t avail, disk, keep, need = p->bytes_total - p->bytes_done;
    if (statvfs(w->e->cfg->data_dir, &vfs) < 0)
        return 1;
    avail = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
    disk = (int64_t)vfs.f_blocks * (int64_t)vfs.f_frsize;
    keep = disk / 20 > KEEP_FREE_MIN ? disk / 20 : KEEP_FREE_MIN;
    pthread_mutex_lock(&cache_mu);
    if (need > avail - keep - copy_reserved) {
        w->too_big = p->bytes_total;
        w->avail = avail - copy_reserved;
    } else {
        copy_reserved += need;
        w->held = need;
    }
    pthread_mutex_unlock(&cache_mu);
    return w->too_big == 0;
}

static int watch(const kestrel_progress *p, void *payload)
{
    copy_watch *w = payload;
    int64_t now = kestrel__now_ms();
    if (p->bytes_total >= 0 && w->checked_ms == 0) {   /* the size known: the first call that says it */
        w->checked_ms = now;
        if (!reserve(w, p))
            return 1;
    }
    if (w->for_queued && w->checked_ms && now - w->checked_ms >= WANTED_EVERY_MS) {
        w->checked_ms = now;
        if (!still_wanted(w->e, w->ref)) {
            w->abandoned = 1;
            return 1;
        }
    }
    return 0;
}

/* Pull ref into dest from kestreld's own store, bounded as above: 0, or -1 with why (-2 when
 * for_queued and no QUEUED job asks for ref any more). */
static int pull(kd_engine *e, const char *ref, const char *dest, int for_queued, char *why, size_t wn)
{
    char url[PATH_MAX + 8];
    kestrel_client *c = NULL;
    kestrel_transfer_options o = KESTREL_TRANSFER_OPTIONS_INIT;
    copy_watch w = { e, ref, for_queued, 0, 0, 0, 0, 0 };
    int rc;
    char model[256], exact[300];
    int64_t version;
    o.progress = watch;
    o.progress_payload = &w;
    snprintf(url, sizeof(url), "file://%s", kd_store_root(e));
    /* read from the store itself: its digests settled first, as any read's are (repo_settle.h) */
    if ((rc = kestrel__store_resolve_version(e->store, ref, model, &version)) == 0 &&
        (rc = kd_settle_read(e->repo_settle, model, version)) == 0 && (rc = kestrel_client_new(&c, url, NULL)) == 0) {
        snprintf(exact, sizeof(exact), "%s@%lld", model, (long long)version);   /* the one settled */
        rc = kestrel_model_pull(c, exact, dest, &o);
    }
    kestrel_client_free(c);
    pthread_mutex_lock(&cache_mu);
    copy_reserved -= w.held;
    pthread_mutex_unlock(&cache_mu);
    if (rc == 0)
        return 0;
    if (w.too_big)
        snprintf(why, wn, "%s: %.1f GiB, and this host's data dir has %.1f GiB free beside the copies under way "
                 "(kestreld keeps %d GiB or a twentieth of the disk free)", ref, (double)w.too_big / (1 << 30), (double)w.avail / (1 << 30),
                 (int)(KEEP_FREE_MIN >> 30));
    else if (w.abandoned)
        snprintf(why, wn, "%s: no queued job asks for it any more (cancelled): its copy stopped", ref);
    else
        snprintf(why, wn, "%s: %s", ref, kestrel_error_last()->message);
    return w.abandoned ? -2 : -1;
}

/* Every file under path (ours, unreachable by jobs) read-only for all. */
static int seal(const char *path, int depth)
{
    struct stat st;
    DIR *d;
    struct dirent *de;
    int rc = 0;
    if (lstat(path, &st) < 0)
        return -1;
    if (!S_ISDIR(st.st_mode))
        return chmod(path, 0444);
    if (depth > 64 || chmod(path, 0755) < 0 || (d = opendir(path)) == NULL)
        return -1;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        char sub[PATH_MAX];
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
        rc = seal(sub, depth + 1);
    }
    closedir(d);
    return rc;
}

static int is_building(const char *hex)
{
    for (size_t i = 0; i < MAX_BUILDING; i++)
        if (!strcmp(building[i], hex))
            return 1;
    return 0;
}

static int claim(const char *hex)
{
    for (size_t i = 0; i < MAX_BUILDING; i++)
        if (!building[i][0]) {
            snprintf(building[i], sizeof(building[i]), "%s", hex);
            return 0;
        }
    return -1;
}

static void unclaim(const char *hex)
{
    for (size_t i = 0; i < MAX_BUILDING; i++)
        if (!strcmp(building[i], hex))
            building[i][0] = '\0';
    pthread_cond_broadcast(&cache_cv);
}

/* DATA/cache/data/<sha256 of ref> (and <that>.ref, the ref it holds, for the sweep): the host's one
 * copy of a dataset version, made when missing (for_queued: a prefetch, see pull). 0, -1 with why,
 * or -2 (a prefetch no job wants any more). */
static int cached(kd_engine *e, const char *ref, int for_queued, char *entry, size_t n, char *why, size_t wn)
{
    char cache[PATH_MAX], hex[65], tmp[PATH_MAX], tree[PATH_MAX + 8], refpath[PATH_MAX + 8], msg[900];
    struct stat st;
    int rc = 0;
    snprintf(cache, sizeof(cache), "%s/cache/data", e->cfg->data_dir);
    kestrel__sha256_hex(ref, strlen(ref), hex);
    snprintf(entry, n, "%s/%s", cache, hex);
    snprintf(refpath, sizeof(refpath), "%s.ref", entry);
    pthread_mutex_lock(&cache_mu);
    while (is_building(hex))
        pthread_cond_wait(&cache_cv, &cache_mu);
    if (lstat(entry, &st) == 0 || claim(hex) < 0) {
        pthread_mutex_unlock(&cache_mu);
        if (lstat(entry, &st) == 0)
            return 0;
        snprintf(why, wn, "dataset %s: too many datasets being copied at once; the job will be retried", ref);
        return -1;
    }
    pthread_mutex_unlock(&cache_mu);
    snprintf(tmp, sizeof(tmp), "%s/staging", e->cfg->data_dir);
    if (kestrel__mkdirs(tmp, 0700) < 0)
        tmp[0] = '\0';
    snprintf(tmp, sizeof(tmp), "%s/staging/data-XXXXXX", e->cfg->data_dir);
    if (kestrel__mkdirs(cache, 0700) < 0 || mkdtemp(tmp) == NULL) {
        snprintf(why, wn, "cannot stage dataset %s: %s", ref, strerror(errno));
        rc = -1;
        goto out;
    }
    snprintf(tree, sizeof(tree), "%s/tree", tmp);
    if ((rc = pull(e, ref, tree, for_queued, msg, sizeof(msg))) < 0) {
        snprintf(why, wn, "cannot copy dataset %s", msg);
    } else if (seal(tree, 0) < 0 || kestrel__write_file_atomic(refpath, ref, strlen(ref), 0600) < 0 ||
               rename(tree, entry) < 0) {
        snprintf(why, wn, "cannot keep dataset %s in %s: %s", ref, cache, strerror(errno));
        rc = -1;
    }
    kestrel__rm_tree(tmp);
out:
    pthread_mutex_lock(&cache_mu);
    unclaim(hex);
    pthread_mutex_unlock(&cache_mu);
    return rc;
}

/* A copy of a cached file, root's and read-only like it (when it has as many links as it can take). */
static int copy_file(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    struct stat st;
    if (in >= 0 && fstat(in, &st) == 0 && (out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444)) >= 0) {
        off_t left = st.st_size;
        ssize_t k = 1;
        while (left > 0 && (k = copy_file_range(in, NULL, out, NULL, (size_t)left, 0)) > 0)
            left -= k;
        rc = left == 0 && fchmod(out, 0444) == 0 ? 0 : -1;
    }
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) < 0)
        rc = -1;
    return rc;
}

void kd_stage_sweep(kd_engine *e)
{
    char cache[PATH_MAX];
    DIR *d;
    struct dirent *de;
    snprintf(cache, sizeof(cache), "%s/cache/data", e->cfg->data_dir);
    if ((d = opendir(cache)) == NULL)
        return;
    pthread_mutex_lock(&cache_mu);
    while ((de = readdir(d)) != NULL) {
        char refpath[PATH_MAX + 8], entry[PATH_MAX + 8], ref[512];
        size_t len = strlen(de->d_name);
        Kestrel__V1__Manifest *m = NULL;
        FILE *f;
        if (len != 64 + 4 || strcmp(de->d_name + 64, ".ref"))
            continue;
        snprintf(refpath, sizeof(refpath), "%s/%s", cache, de->d_name);
        snprintf(entry, sizeof(entry), "%s/%.64s", cache, de->d_name);
        if ((f = fopen(refpath, "r")) == NULL)
            continue;
        len = fread(ref, 1, sizeof(ref) - 1, f);
        fclose(f);
        ref[len] = '\0';
        if (kestrel__store_resolve(e->store, ref, &m) == 0) {
            kestrel__manifest_free(m);
            continue;
        }
        kestrel__rm_tree(entry);   /* jobs keep their links; new ones cannot name a deleted version */
        unlink(refpath);
    }
    pthread_mutex_unlock(&cache_mu);
    closedir(d);
}

void kd_stage_reset(kd_engine *e)
{
    char staging[PATH_MAX];
    snprintf(staging, sizeof(staging), "%s/staging", e->cfg->data_dir);
    kestrel__rm_tree(staging);   /* what a killed kestreld left half-made: root's, never a job's */
}

/* Mirror src (a cached dataset) at dst: directories made and given to the identity, files
 * hard-linked (copied when a file has all the links it can take). -1 with errno. */
static int link_tree(const kd_ident *id, const char *src, const char *dst, int depth)
{
    struct stat st;
    DIR *d;
    struct dirent *de;
    int rc = 0;
    if (lstat(src, &st) < 0)
        return -1;
    if (depth > 64) {
        errno = ELOOP;
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return link(src, dst) == 0 || (errno == EMLINK && copy_file(src, dst) == 0) ? 0 : -1;
    if (mkdir(dst, 0755) < 0 || kd_ident_chown(id, dst, 0) < 0 || (d = opendir(src)) == NULL)
        return -1;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        char s[PATH_MAX], t[PATH_MAX];
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(s, sizeof(s), "%s/%s", src, de->d_name);
        snprintf(t, sizeof(t), "%s/%s", dst, de->d_name);
        rc = link_tree(id, s, t, depth + 1);
    }
    closedir(d);
    return rc;
}

/* The directories leading to root/rel (rel's own last segment excluded), made for the identity. -1 with errno. */
static int parents(const kd_ident *id, const char *root, const char *rel)
{
    char path[PATH_MAX];
    size_t base = (size_t)snprintf(path, sizeof(path), "%s/", root);
    for (const char *p = strchr(rel, '/'); p; p = strchr(p + 1, '/')) {
        struct stat st;
        snprintf(path + base, sizeof(path) - base, "%.*s", (int)(p - rel), rel);
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            continue;
        if (mkdir(path, 0755) < 0 || kd_ident_chown(id, path, 0) < 0)
            return -1;
    }
    return 0;
}

int kd_stage_work(kd_engine *e, const kd_ident *id, const Kestrel__V1__JobSpec *spec, const char *work, char *why,
                  size_t n)
{
    char staging[PATH_MAX], tmp[PATH_MAX], tree[PATH_MAX + 8], msg[900];
    snprintf(staging, sizeof(staging), "%s/staging", e->cfg->data_dir);
    snprintf(tmp, sizeof(tmp), "%s/work-XXXXXX", staging);
    if (kestrel__mkdirs(staging, 0700) < 0 || mkdtemp(tmp) == NULL) {
        snprintf(why, n, "cannot stage the job's inputs in %s: %s", staging, strerror(errno));
        return -1;
    }
    snprintf(tree, sizeof(tree), "%s/tree", tmp);
    if (spec->code[0] && pull(e, spec->code, tree, 0, msg, sizeof(msg)) < 0) {
        snprintf(why, n, "cannot copy the job's code %s", msg);
        goto fail;
    }
    if (!spec->code[0] && mkdir(tree, 0700) < 0) {
        snprintf(why, n, "cannot make the work dir: %s", strerror(errno));
        goto fail;
    }
    if (kd_ident_chown(id, tree, 1) < 0) {   /* the code only: datasets' files stay root's */
        snprintf(why, n, "cannot give the job's code to %s: %s", id->name, kestrel_error_last()->message);
        goto fail;
    }
    for (size_t i = 0; i < spec->n_data; i++) {
        char entry[PATH_MAX], dst[PATH_MAX * 2];
        struct stat st;
        Kestrel__V1__Manifest *m = NULL;
        snprintf(dst, sizeof(dst), "%s/%s", tree, spec->data[i]->path);
        if (lstat(dst, &st) == 0) {
            snprintf(why, n, "dataset %s: its path %s is already taken (by the job's code)", spec->data[i]->ref,
                     spec->data[i]->path);
            goto fail;
        }
        if (kestrel__store_resolve(e->store, spec->data[i]->ref, &m) < 0) {   /* deleted since the submit */
            snprintf(why, n, "dataset %s: %s", spec->data[i]->ref, kestrel_error_last()->message);
            goto fail;
        }
        kestrel__manifest_free(m);
        if (cached(e, spec->data[i]->ref, 0, entry, sizeof(entry), why, n) < 0)
            goto fail;
        if (parents(id, tree, spec->data[i]->path) < 0 || link_tree(id, entry, dst, 0) < 0) {
            snprintf(why, n, "dataset %s at %s: %s", spec->data[i]->ref, spec->data[i]->path, strerror(errno));
            goto fail;
        }
    }
    if (rename(tree, work) < 0) {
        snprintf(why, n, "cannot move the job's inputs into %s: %s", work, strerror(errno));
        goto fail;
    }
    rmdir(tmp);
    return 0;
fail:
    kestrel__rm_tree(tmp);   /* in root's staging, never reachable by a job; links go, cached files stay */
    return -1;
}

typedef struct {
    kd_engine *e;
    char ref[420];
} prefetch;

static void *prefetch_main(void *arg)
{
    prefetch *p = arg;
    char entry[PATH_MAX], why[1024];
    if (cached(p->e, p->ref, 1, entry, sizeof(entry), why, sizeof(why)) == -1) {   /* not -2: nothing failed */
        pthread_mutex_lock(&cache_mu);
        snprintf(failed_ref, sizeof(failed_ref), "%s", p->ref);
        snprintf(failed_why, sizeof(failed_why), "%s", why);
        pthread_mutex_unlock(&cache_mu);
    }
    kd_engine_kick(p->e);   /* the jobs waiting on it may start (or fail) */
    free(p);
    return NULL;
}

int kd_stage_ready(kd_engine *e, const Kestrel__V1__JobSpec *spec, char *why, size_t n)
{
    int rc = 1;
    for (size_t i = 0; i < spec->n_data && rc == 1; i++) {
        const char *ref = spec->data[i]->ref;
        char cache[PATH_MAX], hex[65], entry[PATH_MAX + 80];
        struct stat st;
        int busy;
        snprintf(cache, sizeof(cache), "%s/cache/data", e->cfg->data_dir);
        kestrel__sha256_hex(ref, strlen(ref), hex);
        snprintf(entry, sizeof(entry), "%s/%s", cache, hex);
        if (lstat(entry, &st) == 0)
            continue;
        pthread_mutex_lock(&cache_mu);
        busy = is_building(hex);
        if (!busy && !strcmp(failed_ref, ref)) {
            snprintf(why, n, "%s", failed_why);
            failed_ref[0] = '\0';   /* reported once; a later job tries again */
            pthread_mutex_unlock(&cache_mu);
            return -1;
        }
        pthread_mutex_unlock(&cache_mu);
        if (!busy) {
            prefetch *p = calloc(1, sizeof(*p));
            pthread_t t;
            pthread_attr_t at;
            if (p == NULL)
                return 0;
            p->e = e;
            snprintf(p->ref, sizeof(p->ref), "%s", ref);
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &at, prefetch_main, p) != 0)
                free(p);
            pthread_attr_destroy(&at);
        }
        snprintf(why, n, "copying dataset %s into this host's cache", ref);
        rc = 0;
    }
    return rc;
}
