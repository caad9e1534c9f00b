/* lib/repo/chunk_spool.h - a push's two lists, its chunks and (of a directory) its files, in order,
 * kept in an unlinked temp file rather than in memory: a push of 200,000 small files held 200,000
 * chunk entries of about 150 bytes each (a message, its digest string, a pointer) and as many file
 * entries until its commit. They are kept as the records of the manifest's `chunks` and `files`
 * fields (lib/wire.c kestrel__wire_pack_element), each file's chunks and then the file, so that the
 * commit sends them as they lie: a manifest packed without its lists, followed by these bytes, is the
 * whole manifest. The file goes in $TMPDIR (else /var/tmp, else /tmp) and vanishes when closed, or
 * when the process dies. */
#ifndef KESTREL_CHUNK_SPOOL_H
#define KESTREL_CHUNK_SPOOL_H

#include "records.h"
#include "repo.h"

typedef struct kestrel__spool kestrel__spool;

/* An unlinked temp file, read and write, in $TMPDIR (else /var/tmp, else /tmp): its descriptor, or
 * KESTREL_EIO naming what it was for and the first directory tried. */
int kestrel__temp_fd(const char *what);

int kestrel__spool_open(kestrel__spool **out);
/* Append n chunks (digest, size), in order; a directory's file after its chunks. */
int kestrel__spool_add(kestrel__spool *s, const kestrel__chunk_ref *refs, size_t n);
int kestrel__spool_add_file(kestrel__spool *s, const Kestrel__V1__TreeFile *f);
/* How many bytes its records take. */
int64_t kestrel__spool_bytes(const kestrel__spool *s);
/* Read the records back in order from the first: kestrel__spool_rewind, then kestrel__spool_next
 * until it gives 0 (the end): 1 a chunk (hex, len), 2 a file (*file, the caller's to free with
 * protobuf_c_message_free_unpacked); KESTREL_EIO: the temp file is damaged. */
int kestrel__spool_rewind(kestrel__spool *s);
int kestrel__spool_next(kestrel__spool *s, char hex[65], uint32_t *len, Kestrel__V1__TreeFile **file);
/* n bytes of the records from offset at (the commit's body); what it read (0: at the end). */
int64_t kestrel__spool_pread(kestrel__spool *s, int64_t at, void *buf, size_t n);
/* Every chunk and file into m, which holds none (a transport that needs the whole manifest in
 * memory: the local store, which holds it there to commit it anyway). On a failure m may hold some:
 * it is only good to free then. */
int kestrel__spool_fill(kestrel__spool *s, Kestrel__V1__Manifest *m);
void kestrel__spool_close(kestrel__spool *s);

#endif
