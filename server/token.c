/* server/token.c - bearer tokens: random, shown once, stored only as SHA-256. */
#include <stdio.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include "engine.h"

int kd_token_hash(const char *token, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(token, strlen(token), md, &n, EVP_sha256(), NULL) != 1 || n != 32) {
        hex[0] = '\0';
        return kestrel__error_set(KESTREL_ERROR, "OpenSSL could not hash a token");
    }
    kestrel__hex(md, 32, hex);
    return 0;
}

/* A new random token for t (its hint is set here); t->created_ms is now when 0. */
int kd_token_issue_for(kd_catalog *cat, kd_token *t, char *out, size_t outlen, int64_t *id_out)
{
    unsigned char raw[32];
    char hash[65];
    size_t k;
    if (outlen < 4 + 2 * sizeof(raw) + 1)
        return kestrel__error_set(KESTREL_EINVALID, "token buffer too small");
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return kestrel__error_set(KESTREL_ERROR, "no randomness for a token");
    k = (size_t)snprintf(out, outlen, t->job_id ? "ksj_" : "kst_");
    kestrel__hex(raw, sizeof(raw), out + k);   /* outlen holds it: checked above */
    k += 2 * sizeof(raw);
    snprintf(t->hint, sizeof(t->hint), "%s", out + k - 4);
    if (t->created_ms == 0)
        t->created_ms = kestrel__now_ms();
    if (kd_token_hash(out, hash) < 0)
        return KESTREL_ERROR;
    return kd_catalog_token_insert(cat, hash, t, id_out);
}

int kd_token_issue(kd_catalog *cat, int64_t user_id, int64_t job_id, char *out, size_t outlen)
{
    kd_token t;
    memset(&t, 0, sizeof(t));
    t.user_id = user_id;
    t.job_id = job_id;
    t.scope = KD_SCOPE_WRITE;
    return kd_token_issue_for(cat, &t, out, outlen, NULL);
}
