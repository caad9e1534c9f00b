/* server/data_lock.h - one kestreld a data dir.
 *
 * Two daemons on one data dir would each recover the other's running jobs as orphans, collect
 * chunks the other's pushes rely on and sync only what they themselves wrote. So kestreld takes
 * DATA/kestreld.lock (flock, exclusive) before it touches anything there and keeps it until it
 * exits: the kernel frees it when the process ends, kill -9 included, so a crash never leaves a
 * stale lock. The file holds the holder's pid, for the second daemon's error.
 * Limits: on NFS flock becomes a POSIX lock (no lock daemon: kestreld does not start, "No locks
 * available"; a mount with local_lock or nolock excludes only daemons on the same host); a job
 * of the daemon's own account (kestreld not root) could remove the file under a running daemon. */
#ifndef KD_DATA_LOCK_H
#define KD_DATA_LOCK_H

/* The lock's descriptor (kept open, close-on-exec: jobs never hold it), or < 0 with the error set:
 * KESTREL_EEXISTS when another process holds it, KESTREL_EIO when the file cannot be opened. */
int kd_data_dir_lock(const char *data_dir);

/* Under the lock, before the catalog opens: KESTREL_EINVALID when DATA/repo/models holds a model but
 * DATA/catalog.db is missing. Who may read each model is in the catalog (a model without a row there
 * is readable by every user): a repository started beside a new catalog made every private model
 * public (a hostile test, a restore that forgot the catalog). */
int kd_data_dir_catalog_check(const char *data_dir);

#endif
