/* lib/repo/chunk.c - FastCDC (Xia et al., 2016/2020): a gear rolling hash, cut where the hash's masked
 * bits are zero, with a stricter mask before the average size and a looser one after it
 * (normalized chunking), never below the minimum or above the maximum. The gear table comes from
 * splitmix64 with a fixed seed, so every build cuts the same bytes the same way. */
#include <pthread.h>
#include "chunk.h"

static uint64_t gear[256];
static pthread_once_t gear_once = PTHREAD_ONCE_INIT;

static void gear_init(void)
{
    uint64_t x = 0x6b657374726c3031ull;   /* "kestrl01" */
    for (int i = 0; i < 256; i++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        gear[i] = z ^ (z >> 31);
    }
}

/* average 2^18: 20 bits must be zero before it, 16 after it (NC level 2), top bits of the hash */
#define MASK_S (((1ull << 20) - 1) << 44)
#define MASK_L (((1ull << 16) - 1) << 48)

size_t kestrel__chunk_next(const uint8_t *data, size_t len, int eof)
{
    size_t i, normal = KESTREL__CHUNK_AVG, end = len < KESTREL__CHUNK_MAX ? len : KESTREL__CHUNK_MAX;
    uint64_t h = 0;
    pthread_once(&gear_once, gear_init);
    if (len <= KESTREL__CHUNK_MIN)
        return len;   /* the tail, or too little data to cut */
    if (end < normal)
        normal = end;
    for (i = KESTREL__CHUNK_MIN; i < normal; i++) {
        h = (h << 1) + gear[data[i]];
        if (!(h & MASK_S))
            return i + 1;
    }
    for (; i < end; i++) {
        h = (h << 1) + gear[data[i]];
        if (!(h & MASK_L))
            return i + 1;
    }
    (void)eof;
    return end;
}
