/* lib/repo/store_pb.c - versions/N.pb: each manifest again as protobuf, beside its N.json, for the
 * reads that serve it (a pull's resolve). N.json stays the truth: it is what a commit links and a
 * delete removes, and what a collection and fsck read (kestrel__store_manifest_json). The JSON
 * mapper makes a cJSON tree of the whole text: a 20,000-file dataset's manifest took kestreld
 * 37.5 MB to read (massif), its protobuf form a third of that. N.pb is written at the commit, or
 * at the first read of a version an earlier build committed; it is used only while its N.json
 * exists (one a killed delete left goes at the next collection) and only when it reads as N's. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include "repo.h"
#include "store.h"

static void pb_path(kestrel__store *s, const char *name, int64_t version, const char *ext, char *out, size_t n)
{
    snprintf(out, n, "%s/models/%s/versions/%lld.%s", kestrel__store_root(s), name, (long long)version, ext);
}

int kestrel__store_pb_write(kestrel__store *s, const char *name, const Kestrel__V1__Manifest *m)
{
    char path[PATH_MAX];
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc;
    pb_path(s, name, m->version, "pb", path, sizeof(path));
    if ((rc = kestrel__wire_pack(&b, &m->base)) == 0)
        rc = kestrel__write_file_atomic(path, b.ptr ? b.ptr : "", b.size, 0);
    kestrel_buf_dispose(&b);
    return rc;
}

Kestrel__V1__Manifest *kestrel__store_pb_read(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX];
    kestrel_buf b = KESTREL_BUF_INIT;
    ProtobufCMessage *pm = NULL;
    Kestrel__V1__Manifest *m = NULL;
    pb_path(s, name, version, "pb", path, sizeof(path));
    if (kestrel__store_read_text(path, &b) == 0 &&
        kestrel__wire_unpack(&pm, &kestrel__v1__manifest__descriptor, (const uint8_t *)b.ptr, b.size) == 0) {
        m = (Kestrel__V1__Manifest *)pm;
        pb_path(s, name, version, "json", path, sizeof(path));
        if (m->version != version || access(path, F_OK) != 0) {   /* not N's, or N is gone */
            kestrel__manifest_free(m);
            m = NULL;
        }
    }
    kestrel_buf_dispose(&b);
    kestrel_error_clear();
    return m;
}

void kestrel__store_pb_remove(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX];
    pb_path(s, name, version, "pb", path, sizeof(path));
    unlink(path);
}
