/* server/check_config.c - kestreld --check-config: what it would run with (see check_config.h). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "check_config.h"
#include "exec_util.h"
#include "identity.h"

int kd_check_slurm_data_dir(const kd_config *cfg)
{
    char real[PATH_MAX];   /* what goes into --output: the path with its links resolved (a review) */
    if (!cfg->nslurm_pools || (!strpbrk(cfg->data_dir, "%\\") &&
                               !(realpath(cfg->data_dir, real) && strpbrk(real, "%\\"))))
        return 0;
    fprintf(stderr, "kestreld: --data-dir %s holds '%%' or '\\', which sbatch reads in a job's output path as a "
            "pattern (%%u: the user's name): its jobs' output would go elsewhere and be lost; give a data dir "
            "without them to use Slurm pools\n", cfg->data_dir);
    return -1;
}

/* --check-config: what kestreld would run with, after every check that needs no start. */
int kd_check_config(const kd_config *cfg)
{
    const char *pem[2] = { cfg->tls_cert, cfg->tls_key };
    int bad = kd_check_slurm_data_dir(cfg) < 0;
    for (int i = 0; i < 2; i++) {
        char head[64] = "";
        FILE *f = pem[i] ? fopen(pem[i], "r") : NULL;
        if (pem[i] && (f == NULL || !fgets(head, sizeof(head), f) || strncmp(head, "-----BEGIN ", 11))) {
            fprintf(stderr, "kestreld: %s %s: %s\n", i ? "--tls-key" : "--tls-cert", pem[i],
                    f ? "not a PEM file" : strerror(errno));
            bad = 1;
        }
        if (f)
            fclose(f);
    }
    printf("listen     %s:%d (%s)\n", cfg->listen, cfg->port, cfg->tls_cert ? "HTTPS" : "HTTP");
    printf("data dir   %s\n", cfg->data_dir);
    printf("jobs run   %s\n", kd_ident_available() ? "as their users' own Unix accounts (kestreld is root)"
                                                    : "as this daemon's user: single-tenant");
    if (kd_ident_available() && cfg->max_job_procs > 0)
        printf("processes  %ld at most of each account (--max-job-processes)\n", cfg->max_job_procs);
    else if (kd_ident_available())
        printf("processes  no limit (--max-job-processes 0)\n");
    if (cfg->max_job_disk > 0)
        printf("job disk   %lld MiB at most of each job's files (--max-job-disk)\n", (long long)(cfg->max_job_disk >> 20));
    else
        printf("job disk   no bound of its own (--max-job-disk 0); a full data disk stops the largest job\n");
    printf("job /tmp   %s\n", kd_exec_tmp_own(cfg->data_dir) ? "each job's own (DATA/jobs/ID/tmp, measured with its files)"
                                : kd_exec_private_tmp() ? "the host's (the data dir is below /tmp or /var/tmp; not measured)"
                                : "the host's (no mount namespace here; not measured)");
    printf("digests    %s\n", cfg->settle_at_commit
                                  ? "each pushed file's SHA-256 before its push is answered (--settle-digests at-commit)"
                                  : "a pushed file's SHA-256 after its push is answered: idle, or at its first read "
                                    "(--settle-digests later)");
    for (size_t i = 0; i < cfg->nnodes; i++)
        printf("node       %s: pool %s, %d GPUs\n", cfg->nodes[i].name, cfg->nodes[i].pool, cfg->nodes[i].ndev);
    {
        char caps[2048];
        kd_priority_limits_describe(&cfg->priority_limits, caps, sizeof(caps));
        printf("priority   %s\n", caps);
    }
    for (size_t i = 0; i < cfg->nslurm_pools; i++)
        printf("slurm      pool %s -> partition %s\n", cfg->slurm_pools[i], cfg->slurm_partitions[i]);
    printf("%s\n", bad ? "config: errors above" : "config: ok");
    return bad ? 2 : 0;
}
