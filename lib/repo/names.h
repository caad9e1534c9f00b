/* lib/repo/names.h - what a repository's names are: a model's, an alias's, a SHA-256 digest's
 * (names.c). Below everything in the wing. */
#ifndef KESTREL_NAMES_H
#define KESTREL_NAMES_H

#include <stddef.h>

#define KESTREL__HEX_LEN 64

/* "team/resnet": lowercase [a-z0-9._-] segments starting with a letter or digit, <= 200 bytes; no
 * segment after the first is "versions" or "aliases" (a model's own folders, its routes' words). */
int kestrel__repo_name_valid(const char *name);
#define KESTREL__NAME_RULE \
    "lowercase [a-z0-9._-] segments joined by '/', each starting with a letter or digit, none after the first " \
    "named 'versions' or 'aliases'"
/* An alias: one such segment, not starting with a digit, without ".tmp." (the store's temp names). */
int kestrel__alias_valid(const char *alias);
#define KESTREL__ALIAS_RULE "lowercase letters, digits, '.', '_' and '-', starting with a letter, without '.tmp.'"

/* SHA-256 of data in lowercase hex; "" when OpenSSL fails (it then equals no digest). */
void kestrel__sha256_hex(const void *data, size_t len, char hex[KESTREL__HEX_LEN + 1]);
/* 1 when s is 64 lowercase hex digits (a chunk's or a file's SHA-256). */
int kestrel__is_sha256_hex(const char *s);

#endif
