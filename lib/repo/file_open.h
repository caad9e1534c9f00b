/* lib/repo/file_open.h - opening a file a push reads (the hasher, both senders, the read-back). */
#ifndef KESTREL_FILE_OPEN_H
#define KESTREL_FILE_OPEN_H

#include <sys/stat.h>

/* Open path for reading without waiting: a FIFO put where a file was is opened at once (and is
 * then no regular file: the caller refuses it), never as a controlling terminal, and with nofollow
 * (a member of a pushed directory, whose listing refused links, by the directory's resolved path)
 * a symbolic link is refused (ELOOP): the file, or any folder in its path (where Linux has openat2).
 * A regular file is then in blocking mode. Returns the descriptor with *st filled in (the caller
 * checks S_ISREG), or -1 with errno. */
int kestrel__file_open(const char *path, int nofollow, struct stat *st);
/* The same for a file that must be regular (fd >= 0: opened already by kestrel__file_open, only
 * checked here), with one error for each way it is not: KESTREL_EINVALID for a symbolic link
 * (nofollow: in its path too) or anything but a regular file (the descriptor closed), KESTREL_EIO with the system's
 * reason when it cannot be opened. Returns the descriptor or the error. */
int kestrel__file_open_regular(int fd, const char *path, int nofollow, struct stat *st);
/* The folder sub ("": top itself) inside folder top (itself no link), found without a link out of
 * top (openat2's RESOLVE_BENEATH; where Linux has none, no link at all) and without "..": an O_PATH
 * descriptor, or -1 with errno. kestreld's check of a job's --workdir, made as root. */
int kestrel__open_beneath(const char *top, const char *sub);

#endif
