/* lib/device/gpu_visible.c - CUDA_VISIBLE_DEVICES as CUDA reads it: indices, GPU-UUID prefixes, MIG UUIDs.
 *
 * Unset: every device. Empty or "NoDevFiles": none. Otherwise a comma list whose form is set by
 * its first element: integers (parsed like strtoul; the first invalid or negative entry ends the
 * list; a repeated index empties it), GPU-<uuid> prefixes (must be unique; an unknown or
 * ambiguous one ends the list), or MIG-<uuid>. Indices count whole GPUs in PCI order, which is
 * CUDA's order when CUDA_DEVICE_ORDER=PCI_BUS_ID (the order kestreld always sets). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_priv.h"

static void note(char *diag, size_t dlen, const char *fmt, const char *token)
{
    size_t len = strlen(diag);
    snprintf(diag + len, dlen - len, "%s", len ? "; " : "");
    len = strlen(diag);
    snprintf(diag + len, dlen - len, fmt, token);
}

/* Position of the GPU (not MIG) whose UUID starts with prefix; -1 none, -2 ambiguous. */
static long find_uuid(const kestrel__gpu_entry *dev, size_t n, const char *prefix, size_t plen, int mig)
{
    long found = -1;
    for (size_t i = 0; i < n; i++) {
        if (dev[i].pub.is_mig != mig || strncasecmp(dev[i].uuid, prefix, plen))
            continue;
        if (strlen(dev[i].uuid) == plen)
            return (long)i;   /* exact */
        if (found >= 0)
            return -2;
        found = (long)i;
    }
    return found;
}

void kestrel__gpu_apply_visible(kestrel__gpu_entry *dev, size_t n, const char *value, char *diag, size_t dlen)
{
    const char *p;
    int by_index;
    if (value == NULL) {
        for (size_t i = 0; i < n; i++)
            dev[i].pub.visible = 1;
        return;
    }
    for (size_t i = 0; i < n; i++)
        dev[i].pub.visible = 0;
    while (isspace((unsigned char)*value))
        value++;
    if (!*value || !strcmp(value, "NoDevFiles"))
        return;
    by_index = isdigit((unsigned char)*value);
    p = value;
    while (*p) {
        size_t len = strcspn(p, ",");
        char token[128];
        snprintf(token, sizeof(token), "%.*s", (int)(len < sizeof(token) ? len : sizeof(token) - 1), p);
        if (by_index) {
            char *end;
            unsigned long k, seen = 0;
            if (!isdigit((unsigned char)token[0]))
                break;   /* negative or junk ends the list, as in CUDA */
            k = strtoul(token, &end, 10);
            for (size_t i = 0; i < n; i++) {
                if (dev[i].pub.is_mig)
                    continue;
                if (seen++ == k) {
                    if (dev[i].pub.visible) {   /* a repeated index: CUDA sees nothing at all */
                        for (size_t m = 0; m < n; m++)
                            dev[m].pub.visible = 0;
                        note(diag, dlen, "CUDA_VISIBLE_DEVICES repeats %s: no device is visible", token);
                        return;
                    }
                    dev[i].pub.visible = 1;
                    for (size_t m = 0; m < n; m++)   /* its MIG instances go with it */
                        if (dev[m].pub.parent == (int)i)
                            dev[m].pub.visible = 1;
                    break;
                }
            }
            if (k >= seen) {
                note(diag, dlen, "CUDA_VISIBLE_DEVICES index %s does not exist: the list stops there", token);
                break;
            }
        } else {
            int mig = !strncasecmp(token, "MIG-", 4);
            long i;
            if (!mig && strncasecmp(token, "GPU-", 4)) {
                note(diag, dlen, "CUDA_VISIBLE_DEVICES entry %s is not a UUID: the list stops there", token);
                break;
            }
            i = find_uuid(dev, n, token, strlen(token), mig);
            if (i < 0) {
                note(diag, dlen, i == -2 ? "CUDA_VISIBLE_DEVICES prefix %s is ambiguous: the list stops there"
                                         : "CUDA_VISIBLE_DEVICES entry %s matches no device: the list stops there",
                     token);
                break;
            }
            dev[i].pub.visible = 1;
            for (size_t m = 0; m < n && !mig; m++)
                if (dev[m].pub.parent == (int)i)
                    dev[m].pub.visible = 1;
        }
        p += len;
        if (*p == ',')
            p++;
    }
}
