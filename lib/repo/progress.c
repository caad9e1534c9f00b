/* lib/repo/progress.c - a transfer's progress, reported to the caller's callback (repo.h): by the push,
 * the pull and the transports as they wait, at most every 100 ms; the callback may stop the transfer. */
#include <time.h>
#include "internal.h"
#include "repo.h"

int kestrel__progress_report(kestrel__progress *pr, int final)
{
    int64_t now;
    int r;
    if (pr->cb == NULL)
        return 0;
    now = kestrel__now_ms();
    if (!final && now - pr->last_ms < 100 && pr->last_ms)
        return 0;
    pr->last_ms = now;
    r = pr->cb(&pr->p, pr->payload);
    if (r == KESTREL_EUSER)   /* returned as it is; recorded, so that no older error is taken for it */
        return kestrel__error_set(KESTREL_EUSER, "the progress callback stopped the transfer");
    return r ? kestrel__error_set(KESTREL_ECANCELLED, "the progress callback cancelled the transfer") : 0;
}

int kestrel__progress_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    return pthread_cond_timedwait(cv, mu, &until);
}
