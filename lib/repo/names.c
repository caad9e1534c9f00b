/* lib/repo/names.c - what a repository's names are: models, aliases, SHA-256 digests (names.h). */
#include <string.h>
#include <openssl/evp.h>
#include "internal.h"
#include "names.h"

/* 1 when the segment at s (up to '/' or the end) is word. */
static int segment_is(const char *s, const char *word)
{
    size_t n = strlen(word);
    return !strncmp(s, word, n) && (s[n] == '/' || s[n] == '\0');
}

/* Segments of [a-z0-9._-] joined by '/', each starting with a letter or digit, <= 200 bytes. */
static int segments_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    int seg_start = 1;
    if (n == 0 || n > 200 || name[n - 1] == '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (c == '/') {
            if (seg_start)
                return 0;   /* empty segment */
            seg_start = 1;
            continue;
        }
        if (seg_start && !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            return 0;       /* also rules out "." and ".." */
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
        seg_start = 0;
    }
    return 1;
}

int kestrel__repo_name_valid(const char *name)
{
    if (!segments_valid(name))
        return 0;
    /* after the first segment, not a model's own folder (versions/, aliases/: "m/versions" would live
     * in m's) nor a word its routes cut at (.../NAME/versions, .../NAME/aliases/A) */
    for (const char *q = strchr(name, '/'); q; q = strchr(q + 1, '/'))
        if (segment_is(q + 1, "versions") || segment_is(q + 1, "aliases"))
            return 0;
    return 1;
}

int kestrel__alias_valid(const char *alias)
{
    /* ".tmp." marks the store's temp files (an alias is a file of its name): the collector removes them */
    return alias && !strchr(alias, '/') && segments_valid(alias) && (alias[0] < '0' || alias[0] > '9') &&
           !strstr(alias, ".tmp.");
}

void kestrel__sha256_hex(const void *data, size_t len, char hex[KESTREL__HEX_LEN + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32)
        hex[0] = '\0';   /* OpenSSL failed: equal to no digest, so nothing is taken for checked */
    else
        kestrel__hex(md, 32, hex);
}

int kestrel__is_sha256_hex(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return i == KESTREL__HEX_LEN;
}
