/* lib/repo/own_dir.h - the user's own folders: where the client's caches live (KESTREL_CACHE_DIR,
 * XDG_CACHE_HOME or ~/.cache, and whether they are on), where they may live (a folder only this user
 * can change, under a home that is really theirs), and the umask files are made with. Both caches
 * (push_cache.c, chunk_cache.c) take their folders from here. */
#ifndef KESTREL_OWN_DIR_H
#define KESTREL_OWN_DIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The process umask, read without changing it (umask(2) would, for every thread); 077 when /proc
 * does not say. */
mode_t kestrel__umask(void);
/* 1 when dir is a folder that only this user (or root) can change: it and every folder above it
 * are owned by this user or root and writable by no one else (a folder others may write counts
 * only with its sticky bit, like /tmp: no one else can rename or remove what is ours in it), and
 * so is every link on the way and every folder a link leads through. */
int kestrel__dir_own(const char *dir);
/* The directory of one of the local caches (leaf "chunks", "stat"): KESTREL_CACHE_DIR + env_suffix,
 * else $XDG_CACHE_HOME/kestrel/LEAF or ~/.cache/kestrel/LEAF. 0 when the caches are off
 * (KESTREL_CACHE_DIR="" or KESTREL_CACHE_MAX=0). */
int kestrel__cache_dir(char *out, size_t n, const char *env_suffix, const char *leaf);
/* KESTREL_CACHE_MAX in bytes (a number with an optional K, M, G or T): the pull cache's bound, 0 for
 * no caches; 10 GiB when unset or not a size. */
int64_t kestrel__cache_max(void);

#endif
