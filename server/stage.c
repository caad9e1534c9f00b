/* server/stage.c - a job's repository inputs put in place before it starts: its code (a fresh copy of
 * a directory version) becomes its work dir. Root builds the copy where no job can reach (DATA/staging,
 * 0700) and hands the finished tree over by rename, so it never writes inside a tree a job controls. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kestrel.h"
#include "stage.h"
#include "store.h"

int kd_stage_code(kd_engine *e, const kd_ident *id, const char *ref, const char *work, char *why, size_t n)
{
    char staging[PATH_MAX], tmp[PATH_MAX], tree[PATH_MAX + 8], url[PATH_MAX + 8];
    kestrel_client *c = NULL;
    int rc;
    snprintf(staging, sizeof(staging), "%s/staging", e->cfg->data_dir);
    snprintf(tmp, sizeof(tmp), "%s/code-XXXXXX", staging);
    if (kestrel__mkdirs(staging, 0700) < 0 || mkdtemp(tmp) == NULL) {
        snprintf(why, n, "cannot stage the job's code in %s: %s", staging, strerror(errno));
        return -1;
    }
    snprintf(tree, sizeof(tree), "%s/tree", tmp);
    snprintf(url, sizeof(url), "file://%s", kd_store_root(e));
    if ((rc = kestrel_client_new(&c, url, NULL)) < 0 || (rc = kestrel_model_pull(c, ref, tree, NULL)) < 0) {
        snprintf(why, n, "cannot copy the job's code %s: %s", ref, kestrel_error_last()->message);
        goto fail;
    }
    if (kd_ident_chown(id, tree, 1) < 0) {
        snprintf(why, n, "cannot give the job's code to %s: %s", id->name, kestrel_error_last()->message);
        goto fail;
    }
    if (rename(tree, work) < 0) {
        snprintf(why, n, "cannot move the job's code into %s: %s", work, strerror(errno));
        goto fail;
    }
    kestrel_client_free(c);
    rmdir(tmp);
    return 0;
fail:
    kestrel_client_free(c);
    kestrel__rm_tree(tmp);   /* root's own, never reachable by a job */
    return -1;
}
