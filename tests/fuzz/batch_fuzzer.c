/* tests/fuzz/batch_fuzzer.c - any bytes as the answer to POST /api/v1/chunks/fetch, fed to the
 * client's parser (lib/repo/fetch_batch.c) in two pieces split anywhere: no crash, no leak, each
 * chunk handed on once, in the order asked, never more than 4 MiB of it, and nothing after the last
 * (its size and bytes are the pull's to check, as for a GET).
 * The chunks "asked for" are those the input's own heads name (up to 8, found by walking its
 * framing), so well-formed answers reach every path; the first byte is not part of the answer: it
 * says where to split it and, with bit 0, asks for the last chunk with one byte more than its head
 * says, with bit 1, for another chunk than the first head names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "chunk.h"
#include "fetch_batch.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

typedef struct {
    const kestrel__want *want;
    size_t next;
} seen;

static int got(void *ctx, const kestrel__want *w, const void *bytes, size_t n)
{
    seen *s = ctx;
    if (w != &s->want[s->next] || n > 4 * KESTREL__CHUNK_MAX || (n && bytes == NULL))
        abort();   /* out of order, twice, or more than a chunk can be */
    s->next++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    kestrel__want want[8];
    char hex[8][65];
    kestrel__batch b;
    seen s = { want, 0 };
    const uint8_t *body = len ? data + 1 : data;
    size_t blen = len ? len - 1 : 0, n = 0, at = 1, cut = len ? data[0] % (blen + 1) : 0;
    int rc;
    while (n < 8 && len >= 36 && at <= len - 36) {   /* the heads, as the answer's framing places them */
        uint32_t size = (uint32_t)data[at + 32] << 24 | (uint32_t)data[at + 33] << 16 | (uint32_t)data[at + 34] << 8 |
                        data[at + 35];
        kestrel__hex(data + at, 32, hex[n]);
        want[n] = (kestrel__want){ hex[n], size, n };
        n++;
        if (size > len - at - 36)
            break;
        at += 36 + size;
    }
    if (n && (data[0] & 1))
        want[n - 1].size++;
    if (n && (data[0] & 2))
        hex[0][0] = hex[0][0] == '0' ? '1' : '0';   /* the first head names another chunk */
    kestrel__batch_init(&b, want, n, got, &s);
    rc = kestrel__batch_feed(&b, body, cut);
    if (rc == 0)
        rc = kestrel__batch_feed(&b, body + cut, blen - cut);
    if (rc == 0 && kestrel__batch_end(&b) == 0 && s.next != n)
        abort();   /* ended well, yet a chunk never came */
    kestrel__batch_dispose(&b);
    return 0;
}
