/* lib/device/gpu_cuda.c - CUDA-only facts from a child process (kestrel-gpu-probe): this process must
 * stay free to choose CUDA_VISIBLE_DEVICES, which CUDA reads once, at cuInit. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "gpu_priv.h"

extern char **environ;

void kestrel__gpu_cuda_probe(kestrel__gpu_entry *dev, size_t n, char *diag, size_t dlen)
{
    const char *probe = secure_getenv("KESTREL_GPU_PROBE");
    char *argv[2], **env, out[8192];
    size_t nenv = 0, k = 0, len = 0;
    posix_spawn_file_actions_t fa;
    int p[2], status = 0;
    ssize_t r;
    pid_t pid;

    if (probe == NULL || !*probe)
        probe = KESTREL_GPU_PROBE_PATH;
    for (char **v = environ; *v; v++)
        nenv++;
    if ((env = calloc(nenv + 2, sizeof(char *))) == NULL || pipe2(p, O_CLOEXEC) < 0) {
        free(env);
        return;
    }
    /* the child sees every device, in PCI order: the inventory is not the caller's view */
    for (char **v = environ; *v; v++)
        if (strncmp(*v, "CUDA_VISIBLE_DEVICES=", 21) && strncmp(*v, "CUDA_DEVICE_ORDER=", 18))
            env[k++] = *v;
    env[k++] = "CUDA_DEVICE_ORDER=PCI_BUS_ID";
    env[k] = NULL;
    argv[0] = (char *)probe;
    argv[1] = NULL;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid, probe, &fa, NULL, argv, env) != 0) {
        size_t dl = strlen(diag);
        snprintf(diag + dl, dlen - dl, "%scannot run %s", dl ? "; " : "", probe);
        posix_spawn_file_actions_destroy(&fa);
        close(p[0]);
        close(p[1]);
        free(env);
        return;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    while (len + 1 < sizeof(out) && ((r = read(p[0], out + len, sizeof(out) - 1 - len)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0)
            len += (size_t)r;
    out[len] = '\0';
    close(p[0]);
    waitpid(pid, &status, 0);
    free(env);
    for (char *line = out; line && *line;) {
        char uuid[96];
        int sms;
        char *nl = strchr(line, '\n');
        if (sscanf(line, "%95s %d", uuid, &sms) == 2)
            for (size_t i = 0; i < n; i++)
                if (!dev[i].pub.is_mig && !strcasecmp(dev[i].uuid, uuid))
                    dev[i].pub.multiprocessors = sms;
        line = nl ? nl + 1 : NULL;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        size_t dl = strlen(diag);
        snprintf(diag + dl, dlen - dl, "%sCUDA probe failed (no CUDA driver?)", dl ? "; " : "");
    }
}
