/* lib/repo/manifest_file.h - a pulled manifest, kept as the repository sent it (protobuf) in an
 * unlinked temp file and read a window of files at a time. A pull of 50,000 small files held the
 * decoded manifest, about 340 bytes a file, and while it was decoded its 8 MiB body beside it: what a
 * pull holds now is one window of the listing (4,096 files, 16,384 chunks at most), whatever the count.
 * A transport writes the manifest into kestrel__mfile_fd (its resolve); the pull reads it through
 * once for its other fields (scan), once to check it (check: kestrel__mcheck, the checks kestreld
 * makes at a commit), and then a window at a time to fetch and install it. */
#ifndef KESTREL_MANIFEST_FILE_H
#define KESTREL_MANIFEST_FILE_H

#include "repo.h"

typedef struct kestrel__mfile kestrel__mfile;

/* An empty one, in $TMPDIR (else /var/tmp, else /tmp: chunk_spool.h kestrel__temp_fd). */
int kestrel__mfile_open(kestrel__mfile **out);
/* Where the manifest is written, from offset 0. */
int kestrel__mfile_fd(const kestrel__mfile *m);
/* Read it through once: its fields other than the two lists (kestrel__mfile_head), and how many
 * chunks and files it lists. KESTREL_EPROTO where it is not a manifest. */
int kestrel__mfile_scan(kestrel__mfile *m);
/* After a scan: the manifest without its lists (n_chunks and n_files 0), and how many files it lists. */
const Kestrel__V1__Manifest *kestrel__mfile_head(const kestrel__mfile *m);
size_t kestrel__mfile_files(const kestrel__mfile *m);
/* Read it through with kestrel__mcheck: 0, or KESTREL_EINVALID naming the field (as
 * kestrel__manifest_check would); KESTREL_EPROTO where a record is not what its field holds. */
int kestrel__mfile_check(kestrel__mfile *m);
/* Windows from the first file: kestrel__mfile_rewind, then kestrel__mfile_next until it gives 0.
 * A window is the next files (max_files at most; whole files, as many as max_chunks holds, and one
 * at least) and their chunks, as a manifest of those two lists whose size is their bytes (its other
 * fields unset); after the files, the chunks no file claims, and of a file version its chunks,
 * max_chunks at a time. *win is m's until the next call. */
void kestrel__mfile_rewind(kestrel__mfile *m, size_t max_files, size_t max_chunks);
/* A pull's window, and the check's: a pull holds the records of at most these many files and chunks,
 * whatever the version's count (about 1 MB of them). */
#define KESTREL__WINDOW_FILES 4096
#define KESTREL__WINDOW_CHUNKS 16384
/* The fields besides the two lists (name, digest, metadata, aliases) are held in memory: more than
 * this is refused. */
#define KESTREL__MANIFEST_HEAD_MAX (4u << 20)
int kestrel__mfile_next(kestrel__mfile *m, const Kestrel__V1__Manifest **win);
void kestrel__mfile_close(kestrel__mfile *m);

#endif
