/* tests/fuzz/pack_fuzzer.c - any byte stream as the body of POST /api/v1/chunks/pack, fed to the
 * streaming verifier in two pieces split anywhere: no crash, no leak, at most one chunk in memory,
 * and only chunks whose bytes match their digest are ever stored. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

static kd_engine engine;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    kd_pack *p;
    size_t cut = len ? data[0] % (len + 1) : 0;
    if (engine.store == NULL) {
        char dir[] = "/tmp/kestrel-pack-fuzz-XXXXXX";
        if (mkdtemp(dir) == NULL || kestrel__store_open(&engine.store, dir) < 0)
            abort();
    }
    if ((p = kd_pack_begin(&engine)) == NULL)
        return 0;
    kd_pack_feed(p, (const char *)data, cut);
    kd_pack_feed(p, (const char *)data + cut, len - cut);
    kd_pack_free(p);
    return 0;
}
