/* lib/repo/files.h - files written whole or not at all (a temp name beside them, synced, renamed),
 * and the folders around them (files.c). Below everything in the wing but names.h. */
#ifndef KESTREL_FILES_H
#define KESTREL_FILES_H

#include <sys/types.h>
#include "internal.h"
#include "wire.h"

/* KESTREL_EIO: "what path: strerror(errno)". */
int kestrel__io_error(const char *what, const char *path);
/* mkdir -p: 0, or -1 with errno. */
int kestrel__mkdirs(const char *path, mode_t mode);
/* Write data to path: a temp name next to it, fsync, chmod mode, rename. 0 or an error. */
int kestrel__write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);
/* The same for msg as JSON (json set: kestrel__wire_to_json's form) or protobuf, written a block at a
 * time as it is made (kestrel__wire_to_json_fd, kestrel__wire_pack_fd), never held whole. */
int kestrel__write_message_atomic(const char *path, const ProtobufCMessage *msg, int json, mode_t mode);
/* rm -rf path (best effort: what cannot be removed stays). */
void kestrel__rm_tree(const char *path);
/* What fills a temp file: bytes, or a message written by the wire's writers a block at a time. */
typedef struct {
    const void *data;
    size_t len;
    const ProtobufCMessage *msg;
    int json;   /* msg as JSON, else as protobuf */
} kestrel__temp_fill;
/* Write what into a unique temp file next to final (the caller renames or links it), its name in
 * tmp. flags: bit 0 fsync; the bits above it, when not 0, the file's mode (set on the descriptor, so a
 * name swapped meanwhile in a folder someone else may write is never followed). */
int kestrel__write_temp_fill(const char *final, const kestrel__temp_fill *what, char *tmp, size_t tn, int flags);
/* The same for len bytes of data. */
int kestrel__write_temp(const char *final, const void *data, size_t len, char *tmp, size_t tn, int flags);
/* path's bytes, NUL-terminated (KESTREL_ENOTFOUND, unset, when it does not exist). */
int kestrel__read_text(const char *path, kestrel_buf *out);

#endif
