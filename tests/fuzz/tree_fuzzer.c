/* tests/fuzz/tree_fuzzer.c - a manifest (JSON or protobuf) as a client would commit it, through
 * the checks kestreld makes before a version commits (kestrel__manifest_check_commit, then
 * kestrel__manifest_check once the digests are filled in), and the store's
 * form on disk (its proto3 JSON): no crash, no leak; what passes the checks round-trips through
 * that JSON with the same listing digest and passes them again. The same bytes also go through the
 * reader of the store's form before format 2 (store_legacy.c), and a protobuf manifest through a
 * pull's reader (manifest_file.c: a temp file read a record at a time), whose verdict must be the
 * whole check's and whose windows must hold every file and chunk once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "manifest_file.h"
#include "repo.h"
#include "store.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

/* The bytes of whole, read back as a pull reads them. */
static void as_pulled(const Kestrel__V1__Manifest *whole, const uint8_t *data, size_t len)
{
    kestrel__mfile *f;
    const Kestrel__V1__Manifest *w;
    size_t files = 0, chunks = 0;
    int ok;
    if (kestrel__mfile_open(&f) < 0)
        return;
    if (pwrite(kestrel__mfile_fd(f), data, len, 0) != (ssize_t)len || kestrel__mfile_scan(f) != 0)
        abort();   /* what unpacks whole reads a record at a time */
    ok = kestrel__mfile_check(f) == 0;
    if (ok != (kestrel__manifest_check(whole) == 0))
        abort();
    kestrel__mfile_rewind(f, 3, 5);
    while (ok && kestrel__mfile_next(f, &w) == 1) {
        files += w->n_files;
        chunks += w->n_chunks;
    }
    if (ok && (files != whole->n_files || chunks != whole->n_chunks))
        abort();
    kestrel__mfile_close(f);
}

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
    if (kestrel__wire_unpack(&m, &kestrel__v1__manifest__descriptor, data, len) == 0) {
        as_pulled((Kestrel__V1__Manifest *)m, data, len);
        protobuf_c_message_free_unpacked(m, NULL);
        m = NULL;
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
