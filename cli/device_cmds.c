/* cli/device_cmds.c - `kestrel devices` (this host's GPUs, the selector) and `kestrel nodes` (the server's). */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static void print_gpu(const kestrel_gpu *g, const char *mark, const char *reason)
{
    char util[16] = "-", cc[24] = "-";
    if (g->utilization_gpu >= 0)
        snprintf(util, sizeof(util), "%d%%", g->utilization_gpu);
    if (g->cc_major >= 0 && g->multiprocessors > 0)
        snprintf(cc, sizeof(cc), "%d.%d/%dSM", g->cc_major, g->cc_minor, g->multiprocessors);
    else if (g->cc_major >= 0)
        snprintf(cc, sizeof(cc), "%d.%d", g->cc_major, g->cc_minor);
    cli_row("%-2s %-44s %-28.28s %-13s %4s %8" PRId64 " %8" PRId64 " %5s %s", mark, g->uuid, g->name, g->pci_bus_id, cc,
           g->memory_total >= 0 ? g->memory_total >> 20 : -1, g->memory_free >= 0 ? g->memory_free >> 20 : -1, util,
           reason);
}

const struct option cli_opts_devices[] = {
    { "all", no_argument, NULL, 'a' }, { "select", required_argument, NULL, 's' },
    { "min-memory", required_argument, NULL, 'm' }, { "min-free", required_argument, NULL, 'f' },
    { "min-cc", required_argument, NULL, 'c' }, { "max-util", required_argument, NULL, 'u' },
    { "name", required_argument, NULL, 'n' }, { "exclude", required_argument, NULL, 'x' },
    { "nvlink", no_argument, NULL, 'l' }, { "mig", no_argument, NULL, 'g' },
    { "cuda", no_argument, NULL, 'C' }, { NULL, 0, NULL, 0 }
};

int cmd_devices(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_devices;
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    const char *exclude[65] = { NULL };
    unsigned flags = 0;
    int c, nx = 0, select = 0, rc;
    kestrel_gpu_list *l;
    kestrel_gpu_selection *sel = NULL;

    while ((c = getopt_long(argc, argv, "as:m:f:c:u:n:x:lgC", opts, NULL)) != -1) {
        int maj, min, used = 0;
        switch (c) {
        case 'a': flags |= KESTREL_GPU_QUERY_ALL; break;
        case 's': select = 1; o.count = atoi(optarg); if (o.count < 1) { fprintf(stderr, "kestrel: --select takes a count\n"); return 2; } break;
        case 'm': select = 1; if (cli_parse_size(optarg, &o.min_total_memory) < 0) { fprintf(stderr, "kestrel: --min-memory takes a size such as 40G\n"); return 2; } break;
        case 'f': select = 1; if (cli_parse_size(optarg, &o.min_free_memory) < 0) { fprintf(stderr, "kestrel: --min-free takes a size such as 8G\n"); return 2; } break;
        case 'c':
            select = 1;
            if (sscanf(optarg, "%d.%d%n", &maj, &min, &used) != 2 || optarg[used]) {
                fprintf(stderr, "kestrel: --min-cc takes MAJOR.MINOR\n");
                return 2;
            }
            o.min_cc_major = maj;
            o.min_cc_minor = min;
            break;
        case 'u': select = 1; o.max_utilization = atoi(optarg); break;
        case 'n': select = 1; o.name_pattern = optarg; break;
        case 'x': select = 1; if (nx < 64) exclude[nx++] = optarg; break;
        case 'l': select = 1; o.prefer_nvlink = 1; break;
        case 'g': select = 1; o.allow_mig = 1; break;
        case 'C': flags |= KESTREL_GPU_QUERY_CUDA; break;
        default:
            fprintf(stderr, "Usage: kestrel devices [--all] [--cuda] [--select N] [--min-memory SIZE] [--min-free SIZE] [--min-cc X.Y]\n"
                            "                       [--max-util PCT] [--name GLOB] [--exclude UUID|BUS]... [--nvlink] [--mig]\n");
            return 2;
        }
    }
    o.exclude = nx ? exclude : NULL;
    (void)ctx;
    if ((rc = kestrel_gpu_list_query(&l, flags)) < 0)
        return cli_fail("devices", rc);
    if (kestrel_gpu_list_count(l) == 0) {
        printf("no GPUs%s%s\n", kestrel_gpu_list_diagnostic(l)[0] ? ": " : "", kestrel_gpu_list_diagnostic(l));
        kestrel_gpu_list_free(l);
        return select ? 1 : 0;
    }
    if (select)
        rc = kestrel_gpu_select(&sel, l, &o);
    cli_row("%-2s %-44s %-28s %-13s %4s %8s %8s %5s %s", "", "UUID", "NAME", "PCI", "CC", "MEM MiB", "FREE MiB", "UTIL",
           select ? "WHY NOT" : "");
    for (size_t i = 0; i < kestrel_gpu_list_count(l); i++) {
        const kestrel_gpu *g = kestrel_gpu_list_get(l, i);
        const char *why = sel ? kestrel_gpu_selection_reason(sel, i) : "";
        int chosen = sel && select && !why[0] && rc == 0;
        print_gpu(g, chosen ? "*" : (g->is_mig ? " >" : ""), sel ? why : (g->visible ? "" : "hidden by CUDA_VISIBLE_DEVICES"));
    }
    if (kestrel_gpu_list_diagnostic(l)[0])
        printf("note: %s\n", kestrel_gpu_list_diagnostic(l));
    if (select) {
        kestrel_buf v = KESTREL_BUF_INIT;
        if (rc == 0 && kestrel_gpu_selection_visible_devices(&v, sel) == 0)
            printf("CUDA_VISIBLE_DEVICES=%s CUDA_DEVICE_ORDER=PCI_BUS_ID\n", v.ptr);
        else
            fprintf(stderr, "kestrel: devices: %s\n", kestrel_error_last()->message);
        kestrel_buf_dispose(&v);
    }
    kestrel_gpu_selection_free(sel);
    kestrel_gpu_list_free(l);
    return rc == 0 ? 0 : 1;
}

int cmd_nodes(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_node_list *l;
    int rc;
    (void)argv;
    if (argc != 1) {
        return cli_usage_error("nodes");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json && (rc = cli_print_api_json(ctx, "/api/v1/nodes")) != 1)   /* the API's NodeList */
        return rc ? 1 : 0;
    if ((rc = kestrel_node_list_get(&l, ctx->client)) < 0)
        return cli_fail("nodes", rc);
    for (size_t i = 0; i < kestrel_node_list_count(l); i++) {
        size_t used = 0, n = kestrel_node_device_count(l, i);
        for (size_t k = 0; k < n; k++)
            used += kestrel_node_device_at(l, i, k)->job_id != 0;
        printf("node %s (pool %s): %zu devices, %zu allocated\n", kestrel_node_name(l, i), kestrel_node_pool(l, i), n, used);
        for (size_t k = 0; k < n; k++) {
            const kestrel_node_device *d = kestrel_node_device_at(l, i, k);
            char job[32] = "-", freem[32] = "-", util[16] = "-";
            if (d->job_id)
                snprintf(job, sizeof(job), "job %" PRId64, d->job_id);
            if (d->memory_free_mb >= 0)
                snprintf(freem, sizeof(freem), "%" PRId64, d->memory_free_mb);
            if (d->utilization >= 0)
                snprintf(util, sizeof(util), "%d%%", d->utilization);
            printf("  %2d %-44s %-10s %8" PRId64 " MiB  free %8s  util %4s  cc %d.%d  %s\n", d->index, d->uuid, d->type,
                   d->memory_total_mb, freem, util, d->cc_major, d->cc_minor, job);
        }
    }
    kestrel_node_list_free(l);
    return 0;
}
