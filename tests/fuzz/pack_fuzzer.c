/* tests/fuzz/pack_fuzzer.c - any byte stream as the body of POST /api/v1/chunks/pack, fed to the
 * streaming verifier in two pieces split anywhere: no crash, no leak, at most one chunk in memory
 * (and the few its run hashes), and only chunks whose bytes match their digest are ever stored.
 * Inputs with an odd first byte also advance a run (repo_runs.h) with what they verify. The chunk
 * buffers come from a budget (upload_mem.h) of 64 MiB: every byte taken is given back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "repo_runs.h"
#include "store.h"
#include "upload_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

static kd_engine engine;
static kd_upload_mem *mem;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    kd_pack *p;
    uint64_t mine, held, total;
    int busy;
    size_t cut = len ? data[0] % (len + 1) : 0;
    if (engine.store == NULL) {
        char dir[] = "/tmp/kestrel-pack-fuzz-XXXXXX";
        if (mkdtemp(dir) == NULL || kestrel__store_open(&engine.store, dir) < 0)
            abort();
        engine.repo_runs = kd_runs_new();
        mem = kd_upload_mem_new(64u << 20);
    }
    if ((p = kd_pack_begin(&engine, mem, 1, "00112233445566778899aabbccddeeff", len && (data[0] & 1) ? "0" : NULL,
                           &busy)) == NULL)
        abort();   /* nothing else holds the budget */
    kd_pack_feed(p, (const char *)data, cut);
    kd_pack_feed(p, (const char *)data + cut, len - cut);
    kd_pack_free(p);
    kd_upload_mem_state(mem, 1, &mine, &held, &total);
    if (held != 0)
        abort();
    return 0;
}
