/* server/token.c - bearer tokens: random, shown once, stored only as SHA-256. */
#include <stdio.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include "engine.h"

void kd_token_hash(const char *token, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(token, strlen(token), md, &n, EVP_sha256(), NULL);
    for (unsigned int i = 0; i < n && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[64] = '\0';
}

int kd_token_issue(kd_catalog *cat, int64_t user_id, int64_t job_id, char *out, size_t outlen)
{
    unsigned char raw[32];
    char hash[65];
    size_t k;
    if (outlen < 4 + 2 * sizeof(raw) + 1)
        return kestrel__error_set(KESTREL_EINVALID, "token buffer too small");
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return kestrel__error_set(KESTREL_ERROR, "no randomness for a token");
    k = (size_t)snprintf(out, outlen, job_id ? "ksj_" : "kst_");
    for (size_t i = 0; i < sizeof(raw); i++)
        k += (size_t)snprintf(out + k, outlen - k, "%02x", raw[i]);
    kd_token_hash(out, hash);
    return kd_catalog_token_add(cat, hash, user_id, job_id);
}
