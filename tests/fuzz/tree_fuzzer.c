/* tests/fuzz/tree_fuzzer.c - a manifest (JSON or protobuf) as a client would commit it, through
 * the checks kestreld makes before a directory version commits, and the listing's JSON form
 * on disk: no crash, no leak; what passes the checks round-trips through JSON unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "tree.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    ProtobufCMessage *m = NULL;
    Kestrel__V1__Manifest *mf;
    kestrel__tree_file *f, *back = NULL;
    size_t nback = 0;
    char d1[65], d2[65];
    cJSON *j;
    if (kestrel__wire_from_json(&m, &kestrel__v1__manifest__descriptor, (const char *)data, len) != 0 &&
        kestrel__wire_unpack(&m, &kestrel__v1__manifest__descriptor, data, len) != 0)
        return 0;
    mf = (Kestrel__V1__Manifest *)m;
    if ((f = kestrel__tree_of_pb(mf)) != NULL) {
        if (kestrel__tree_check(f, mf->n_files, mf->size, mf->n_chunks) == 0) {
            kestrel__tree_digest(f, mf->n_files, d1);
            if ((j = kestrel__tree_to_json(f, mf->n_files)) != NULL) {
                if (kestrel__tree_from_json(j, &back, &nback) != 0 || nback != mf->n_files)
                    abort();
                kestrel__tree_digest(back, nback, d2);
                if (strcmp(d1, d2))
                    abort();
                kestrel__tree_free(back, nback);
                cJSON_Delete(j);
            }
        }
        free(f);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
