/* tests/fuzz/pack_fuzzer.c - any byte stream as the body of POST /api/v1/chunks/pack, fed to the
 * streaming verifier in two pieces split anywhere: no crash, no leak, at most one chunk in memory
 * (and the up to 15 its run holds), and only chunks whose bytes match their digest are ever stored.
 * Inputs with an odd first byte also advance a run (repo_runs.h) with what they verify, 16 buffers
 * deep where the first byte's second bit is set (a budget that holds them: 128 MiB beside 1 MiB
 * bodies), else 5 (64 MiB). The chunk buffers come from that budget (upload_mem.h): every byte taken
 * is given back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "repo_runs.h"
#include "store.h"
#include "upload_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

static kd_engine engine;
static kd_config cfg;
static kd_upload_mem *mems[2];   /* 64 MiB: runs 5 deep; 128 MiB: 16 deep */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    kd_pack *p;
    kd_upload_mem *mem;
    uint64_t mine, held, total;
    int busy;
    size_t cut = len ? data[0] % (len + 1) : 0;
    if (engine.store == NULL) {
        char dir[] = "/tmp/kestrel-pack-fuzz-XXXXXX";
        if (mkdtemp(dir) == NULL || kestrel__store_open(&engine.store, dir) < 0)
            abort();
        engine.repo_runs = kd_runs_new();
        cfg.max_body = cfg.max_manifest = 1u << 20;
        engine.cfg = &cfg;
        mems[0] = kd_upload_mem_new(64u << 20);
        mems[1] = kd_upload_mem_new(128u << 20);
    }
    mem = mems[len && (data[0] & 2)];
    if ((p = kd_pack_begin(&engine, mem, 1, "00112233445566778899aabbccddeeff", len && (data[0] & 1) ? "0" : NULL,
                           len && (data[0] & 4) ? "0" : NULL, &busy)) == NULL)
        abort();   /* nothing else holds the budget */
    kd_pack_feed(p, (const char *)data, cut);
    kd_pack_feed(p, (const char *)data + cut, len - cut);
    kd_pack_free(p);
    kd_upload_mem_state(mem, 1, &mine, &held, &total);
    if (held != 0)
        abort();
    return 0;
}
