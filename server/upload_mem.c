/* server/upload_mem.c - the budget of memory request bodies hold (upload_mem.h). */
#include <pthread.h>
#include <stdlib.h>
#include "upload_mem.h"
#include "internal.h"

typedef struct {
    int64_t user;
    uint64_t held;
} holder;

struct kd_upload_mem {
    pthread_mutex_t mu;
    uint64_t total, held;
    holder *users;   /* those holding something (as many as requests at most) */
    size_t n, cap;
};

kd_upload_mem *kd_upload_mem_new(uint64_t total)
{
    kd_upload_mem *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    m->total = total;
    return m;
}

void kd_upload_mem_free(kd_upload_mem *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m->users);
    free(m);
}

static holder *find(kd_upload_mem *m, int64_t user)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->users[i].user == user)
            return &m->users[i];
    return NULL;
}

int kd_upload_mem_take(kd_upload_mem *m, int64_t user, uint64_t bytes)
{
    holder *h;
    int rc = -1;
    if (m == NULL || bytes == 0)
        return 0;
    pthread_mutex_lock(&m->mu);
    h = find(m, user);
    if (bytes <= m->total - m->held && bytes <= m->total / 4 - (h ? h->held : 0)) {
        if (h == NULL && kestrel__array_grow(&m->users, &m->cap, m->n + 1, sizeof(*m->users)) == 0) {
            h = &m->users[m->n++];
            *h = (holder){ user, 0 };
        }
        if (h) {
            h->held += bytes;
            m->held += bytes;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void kd_upload_mem_give(kd_upload_mem *m, int64_t user, uint64_t bytes)
{
    holder *h;
    if (m == NULL || bytes == 0)
        return;
    pthread_mutex_lock(&m->mu);
    if ((h = find(m, user)) != NULL) {
        h->held -= bytes < h->held ? bytes : h->held;
        m->held -= bytes < m->held ? bytes : m->held;
        if (h->held == 0)
            *h = m->users[--m->n];
    }
    pthread_mutex_unlock(&m->mu);
}

uint64_t kd_upload_mem_total(const kd_upload_mem *m)
{
    return m->total;
}

void kd_upload_mem_state(kd_upload_mem *m, int64_t user, uint64_t *mine, uint64_t *held, uint64_t *total)
{
    holder *h;
    *mine = *held = *total = 0;
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    if ((h = find(m, user)) != NULL)
        *mine = h->held;
    *held = m->held;
    *total = m->total;
    pthread_mutex_unlock(&m->mu);
}

int kd_upload_mem_fit(kd_upload_mem *m, int64_t user, uint64_t *held, kestrel_buf *buf, uint64_t n, int doubling,
                      uint64_t cap)
{
    uint64_t want = n + 1;
    if (want <= *held)
        return 0;
    if (doubling && want < 2 * *held) {   /* but never past cap, the largest body (a hostile test: one */
        want = 2 * *held;                   /* within its bound was refused, doubled past it) */
        if (want > cap)
            want = cap > n + 1 ? cap : n + 1;
    }
    if (kd_upload_mem_take(m, user, want - *held) < 0)
        return -1;
    if (kestrel__buf_reserve(buf, (size_t)want) < 0) {
        kd_upload_mem_give(m, user, want - *held);
        return KESTREL_ENOMEM;
    }
    *held = want;
    return 0;
}
