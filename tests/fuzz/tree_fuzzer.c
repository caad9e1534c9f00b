/* tests/fuzz/tree_fuzzer.c - a manifest (JSON or protobuf) as a client would commit it, through
 * the checks kestreld makes before a version commits (kestrel__manifest_check_commit, then
 * kestrel__manifest_check once the digests are filled in), and the store's
 * form on disk (its proto3 JSON): no crash, no leak; what passes the checks round-trips through
 * that JSON with the same listing digest and passes them again. The same bytes also go through the
 * reader of the store's form before format 2 (store_legacy.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "repo.h"
#include "store.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    ProtobufCMessage *m = NULL, *back = NULL;
    Kestrel__V1__Manifest *mf, *bk;
    kestrel_buf j = KESTREL_BUF_INIT;
    char d1[65], d2[65], *text = malloc(len + 1);
    Kestrel__V1__Manifest *legacy = NULL;
    if (text) {   /* the old on-disk form: whatever it reads must pass or fail the checks cleanly */
        memcpy(text, data, len);
        text[len] = '\0';
        if (kestrel__store_legacy_manifest(text, &legacy) == 0) {
            (void)kestrel__manifest_check(legacy);
            kestrel__manifest_free(legacy);
        }
        free(text);
    }
    if (kestrel__wire_from_json(&m, &kestrel__v1__manifest__descriptor, (const char *)data, len) != 0 &&
        kestrel__wire_unpack(&m, &kestrel__v1__manifest__descriptor, data, len) != 0)
        return 0;
    mf = (Kestrel__V1__Manifest *)m;
    {   /* the check of a commit, where whole-file digests may be open, is never stricter than the full
         * one, and with none open it is the full one */
        int full = kestrel__manifest_check(mf) == 0, commit = kestrel__manifest_check_commit(mf) == 0;
        if ((full && !commit) || (commit && !full && !kestrel__manifest_digests_open(mf)))
            abort();
    }
    if (kestrel__manifest_check(mf) == 0 && kestrel__wire_to_json(&j, m, 0) == 0) {
        if (kestrel__wire_from_json(&back, &kestrel__v1__manifest__descriptor, j.ptr, j.size) != 0)
            abort();
        bk = (Kestrel__V1__Manifest *)back;
        kestrel__manifest_tree_digest(mf->files, mf->n_files, d1);
        kestrel__manifest_tree_digest(bk->files, bk->n_files, d2);
        if (strcmp(d1, d2) || bk->n_chunks != mf->n_chunks || kestrel__manifest_check(bk) != 0)
            abort();
        protobuf_c_message_free_unpacked(back, NULL);
    }
    kestrel_buf_dispose(&j);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
