/* tests/fuzz/config_fuzzer.c - any file as `kestreld --config FILE`: the merge of its settings
 * with the command line never crashes or leaks, and every setting it yields is a known long flag. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

static const struct option opts[] = {
    { "listen", required_argument, NULL, 'l' }, { "port", required_argument, NULL, 'p' },
    { "node", required_argument, NULL, 5 }, { "quota", required_argument, NULL, 6 },
    { "tls-cert", required_argument, NULL, 12 }, { "config", required_argument, NULL, 15 },
    { "check-config", no_argument, NULL, 16 }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    int fd = memfd_create("kestreld.conf", MFD_CLOEXEC), argc2 = 0;
    char path[64], **argv2 = NULL;
    char *argv[] = { "kestreld", "--config", path, "--node", "cli:gpus=1", NULL };
    if (fd < 0)
        return 0;
    if (write(fd, data, len) != (ssize_t)len) {
        close(fd);
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    if (kd_config_merge(5, argv, opts, &argc2, &argv2) == 0 && argv2 != argv) {
        for (int i = 1; i < argc2; i++) {
            const char *a = argv2[i];
            size_t n = strcspn(a + 2, "=");
            const struct option *o = opts;
            if (a == argv[1] || a == argv[2] || a == argv[3] || a == argv[4])
                continue;
            if (strncmp(a, "--", 2))
                abort();
            for (; o->name && (strlen(o->name) != n || strncmp(o->name, a + 2, n)); o++)
                ;
            if (!o->name || !strcmp(o->name, "node"))   /* the command line's --node replaces the file's */
                abort();
            free(argv2[i]);
        }
        free(argv2);
    }
    close(fd);
    return 0;
}
