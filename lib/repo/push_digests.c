/* lib/repo/push_digests.c - whole-file digests filled in by the push (see push_digests.h). */
#include <string.h>
#include <openssl/evp.h>
#include "filehash.h"
#include "push_digests.h"
#include "store.h"

/* f's digest, when it is left empty: its one chunk's (first), else its bytes read back. */
static int fill(Kestrel__V1__TreeFile *f, const char first[65], const char *path)
{
    kestrel__filehash *h;
    char hex[65];
    int rc;
    if (f->sha256[0])
        return 0;
    if (f->chunks == 1)
        return kestrel__wire_set_string(&f->sha256, first);
    if ((rc = kestrel__filehash_start(&h, path, 1)) < 0 || (rc = kestrel__filehash_finish(h, f->size, hex)) < 0)
        return rc;
    return kestrel__wire_set_string(&f->sha256, hex);
}

int kestrel__push_digests_here(kestrel__spool **lists, const kestrel__push_files *files, int64_t size, char sha[65])
{
    kestrel__filehash *h;
    kestrel__spool *out = NULL;
    Kestrel__V1__TreeFile *f = NULL;
    EVP_MD_CTX *ctx = NULL;
    kestrel__chunk_ref r;
    char first[65] = "", path[KESTREL__PUSH_PATH_MAX];
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    uint32_t i = 0;
    int64_t in_file = 0;   /* chunks of file i read so far */
    int rc;
    if (files->list == NULL) {
        if (sha[0])
            return 0;
        if ((rc = kestrel__filehash_start(&h, kestrel__push_file_path(files, 0, path), 1)) < 0)
            return rc;
        return kestrel__filehash_finish(h, size, sha);
    }
    if ((rc = kestrel__spool_open(&out)) < 0 || (rc = kestrel__spool_rewind(*lists)) < 0)
        goto done;
    if ((ctx = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        rc = kestrel__error_oom();
        goto done;
    }
    memset(&r, 0, sizeof(r));
    while ((rc = kestrel__spool_next(*lists, r.hex, &r.len, &f)) > 0) {
        if (rc == 1) {   /* a chunk of file i: its records come before the file's */
            if (in_file++ == 0)
                memcpy(first, r.hex, sizeof(first));
            rc = i < files->list->n ? kestrel__spool_add(out, &r, 1)
                                    : kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
        } else {         /* file i */
            if (i >= files->list->n || strcmp(f->path, kestrel__listed_path(files->list, i)) || f->chunks != in_file)
                rc = kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
            else if ((rc = fill(f, first, kestrel__push_file_path(files, i, path))) == 0) {
                kestrel__manifest_tree_digest_file(ctx, f);
                rc = kestrel__spool_add_file(out, f);
            }
            protobuf_c_message_free_unpacked(&f->base, NULL);
            i++;
            in_file = 0;
        }
        if (rc < 0)
            break;
    }
    if (rc == 0 && i != files->list->n)
        rc = kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
    if (rc == 0 && EVP_DigestFinal_ex(ctx, md, &mdn) != 1)
        rc = kestrel__error_oom();
    if (rc == 0) {
        kestrel__hex(md, 32, sha);
        kestrel__spool_close(*lists);
        *lists = out;
        out = NULL;
    }
done:
    EVP_MD_CTX_free(ctx);
    kestrel__spool_close(out);
    return rc;
}
