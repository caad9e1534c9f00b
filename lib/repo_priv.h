/* lib/repo_priv.h - what the file:// and HTTP repository paths share. */
#ifndef KESTREL_REPO_PRIV_H
#define KESTREL_REPO_PRIV_H

#include "client.h"
#include "wire.h"

typedef struct {
    kestrel_progress p;
    kestrel_progress_cb cb;
    void *payload;
    int64_t last_ms;
    /* a directory push: the files before this one, and the whole tree's size (0: a single file) */
    int64_t base_bytes, base_chunks, tree_total;
    /* a directory push of these files only (relative paths; kestrel_code_push), NULL: all of them */
    char *const *select;
    size_t nselect;
} kestrel__progress;

/* Call the progress callback (at most every 100 ms unless final); KESTREL_ECANCELLED / EUSER when it says stop. */
int kestrel__progress_report(kestrel__progress *pr, int final);

/* One chunk of a file: its digest and where it lies. */
typedef struct {
    char hex[65];
    int64_t offset;
    uint32_t len;
    int missing;
} kestrel__chunk_ref;

struct stat;
/* Open path for reading; it must be a regular file. Returns the fd or a negative error. */
int kestrel__open_regular(const char *path, struct stat *st);
/* Close *fd and remove the temp file tmp (a pulled directory's blob, once split); tmp becomes "". */
void kestrel__drop_temp(int *fd, char *tmp);
/* Sync and close the complete temp file fd, then rename it to dest. fd is closed either way. */
int kestrel__install_file(int fd, const char *tmp, const char *dest);

/* Fill in the hex digest of count chunks that lie in buf (buf[0] is file offset buf_at), the
 * work split across the caller's thread and one helper (lib/chunk_hash.c). */
void kestrel__hash_chunks(const uint8_t *buf, int64_t buf_at, kestrel__chunk_ref *refs, size_t count);

/* Called with each read buffer's chunks (hashed) while the buffer is in memory. */
typedef int (*kestrel__chunk_sink)(void *ctx, const uint8_t *buf, int64_t buf_at, kestrel__chunk_ref *refs,
                                   size_t count);

/* Chunk and hash a whole file: chunk list and whole-file SHA-256 hex. sink (may be NULL) sees the
 * bytes of each buffer's chunks: the file:// push stores them from there, the HTTP push asks the
 * server first and reads back only what it lacks. */
int kestrel__chunk_file(const char *path, kestrel__chunk_ref **out, size_t *n, int64_t *size, char sha[65],
                        kestrel__progress *pr, kestrel__chunk_sink sink, void *sink_ctx);

/* The HTTP push of a file (files NULL) or of a directory's files (path is the directory). */
/* kestrel_model_push of a directory's selected files only (select NULL: all of them). */
int kestrel__model_push(int64_t *version_out, kestrel_client *c, const char *name, const char *path,
                        const kestrel_transfer_options *in, char *const *select, size_t nselect);
int kestrel__repo_http_push(int64_t *version_out, kestrel_client *c, const char *name, const char *path,
                            const kestrel_transfer_options *o, kestrel__progress *pr);
int kestrel__repo_http_pull(kestrel_client *c, const char *ref, const char *dest, kestrel__progress *pr);
int kestrel__repo_http_versions(kestrel_client *c, const char *name, ProtobufCMessage **out);
int kestrel__repo_http_list(kestrel_client *c, kestrel_buf *out);
int kestrel__repo_http_alias(kestrel_client *c, const char *name, const char *alias, int64_t version, int del);
int kestrel__repo_http_delete(kestrel_client *c, const char *name, int64_t version);

#endif
