/* lib/repo/push_sender.h - the push's sender: a thread that asks the repository which of the chunks
 * the push hands it it lacks and sends those, batch after batch, while the push goes on reading and
 * hashing the next ones (push.c); and the digests kestreld gives the chunks of a big new file that
 * the push sends unnamed, without hashing them. */
#ifndef KESTREL_PUSH_SENDER_H
#define KESTREL_PUSH_SENDER_H

#include <pthread.h>
#include "transport.h"

#define KESTREL__PUSH_BATCH_BYTES (64u * 1024 * 1024)   /* hashed bytes handed to the sender at once */
#define KESTREL__PUSH_BATCH_CHUNKS 4096
/* Chunks sent unnamed: a file of at least KESTREL__PUSH_UNNAMED_MIN bytes whose first KESTREL__PUSH_PROBE_BYTES kestreld
 * lacked entirely (its answer to missing) is taken for new, and its later chunks go unnamed where
 * kestreld names chunks (transport.h): kestreld hashes every chunk it receives anyway, so the push
 * does not hash bytes it sends. A 1 GiB push spent 0.6 of its 1.7 s of client CPU on those digests
 * (perf), on a machine whose two cores the push filled. Where kestreld answers that it held some of
 * the chunks sent unnamed (a file new here, but not to it), the rest of the file is hashed again;
 * what was sent meanwhile is stored once all the same. A re-push of a changed file, whose first
 * chunks are stored, is hashed as before: it sends only what changed. */
#define KESTREL__PUSH_UNNAMED_MIN (64 * 1024 * 1024)
#define KESTREL__PUSH_PROBE_BYTES ((int64_t)8 * 1024 * 1024)   /* push.c: its first batch */

/* The sender: a thread that asks which of the chunks hashed so far the repository lacks and sends
 * those, batch after batch, while the push goes on hashing the next ones. */
typedef struct kestrel__sender {
    kestrel__transport *t;
    const kestrel__push_files *files;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kestrel__chunk_ref *q;      /* handed over, not yet taken */
    size_t nq, capq;
    int64_t qread;              /* the bytes of them the push read (not the stat cache's) */
    int closing;
    int rc;                     /* its first failure (atomic), and that failure's error: */
    kestrel__error_kept err;
    kestrel__progress pr;       /* what it sent (its callback only says whether to stop) */
    kestrel__progress *tick_was;   /* the transport's tick before it (restored by finish) */
    int abort;                  /* set (atomic): stop sending at the next chunk or pack */
    int done;                   /* set under mu when the thread ends */
    pthread_t th;
    int running;
    /* under mu: what missing said of the current file's chunks (probe_file), and the digests of its
     * chunks sent unnamed, by seq (named[seq], filled of them set) */
    uint32_t probe_file;
    int64_t probe_missing, probe_found;
    struct stat probe_st;       /* the probe file as the push opened it */
    char (*named)[65];
    size_t named_cap, filled;
} kestrel__sender;

/* Start the sender of a push to t of files (s is the caller's; t->tick is its progress meanwhile). */
int kestrel__sender_start(kestrel__sender *s, kestrel__transport *t, const kestrel__push_files *files);
/* Wait for the sender to send what it has (stop: tell it to give up first), reporting its progress
 * on this thread as it goes (a callback that says stop stops it), then free it. */
int kestrel__sender_finish(kestrel__sender *s, int stop, kestrel__progress *pr);
/* The sender's failure (its error restored), or 0. */
int kestrel__sender_failed(kestrel__sender *s);
/* Hand refs[0, n) to the sender (copied; read: the bytes of them read from the files), waiting while
 * it has more than it may hold, reporting progress on pr meanwhile. */
int kestrel__sender_put(kestrel__sender *s, const kestrel__chunk_ref *refs, size_t n, int64_t read, kestrel__progress *pr);
/* What the sender sent so far, into pr's bytes_new and chunks_new. */
void kestrel__sender_progress(kestrel__sender *s, kestrel__progress *pr);
/* Ask which of refs the repository lacks, then send each of those once, in file order, and every
 * ref marked unnamed (*sent: how many that was; NULL: not asked). s (NULL: none): the sender, told
 * what missing said of its probe file's chunks and given the digests of those sent unnamed. */
int kestrel__send_missing(kestrel__transport *t, const kestrel__chunk_ref *refs, size_t n,
                          const kestrel__push_files *files, kestrel__progress *pr, size_t *sent, kestrel__sender *s);

/* A file is being read (st: as opened, the file its unnamed chunks must still be when they are
 * sent): what missing says of its chunks is counted from now. Returns how many
 * chunks sent unnamed the repository said it held so far (kestrel__sender_unnamed_now compares). */
int64_t kestrel__sender_file_begin(kestrel__sender *s, uint32_t file, const struct stat *st);
/* The next chunks of file go unnamed: kestreld names chunks, it lacked each of the file's first
 * KESTREL__PUSH_PROBE_BYTES (or more) it was asked about, and held none of those sent unnamed since found. */
int kestrel__sender_unnamed_now(kestrel__sender *s, uint32_t file, int64_t found);
/* Room for n digests of the current file's unnamed chunks. */
int kestrel__sender_unnamed_room(kestrel__sender *s, size_t n);
/* The end of a file whose chunks from refs[0] on (n of them) include count sent unnamed, all handed
 * over: wait until the sender has sent them and kestreld named them (or the sender failed), put
 * their digests in refs, and forget them. */
int kestrel__sender_names(kestrel__sender *s, kestrel__chunk_ref *refs, size_t n, uint32_t count, kestrel__progress *pr);

#endif
