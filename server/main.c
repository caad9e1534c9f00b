/* server/main.c - kestreld: flags, data directory, admin token, start and clean stop. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "api.h"
#include "upload_mem.h"
#include "config.h"
#include "check_config.h"
#include "data_lock.h"
#include "flag_values.h"
#include "exec_local.h"
#include "exec_util.h"
#include "identity.h"
#include "slurm.h"
#include "store.h"
#include "envs.h"
#include "policy.h"
#include "stage.h"
#include "repo_runs.h"
#include "repo_settle.h"

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: kestreld [OPTIONS]\n"
        "\n"
        "The Kestrel training service: a job queue, a local executor and the HTTP API\n"
        "(protobuf for libkestrel, JSON for people and curl) on one box.\n"
        "\n"
        "Options:\n"
        "  -l, --listen ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
        "  -p, --port N             TCP port; 0 picks a free one (default 7070)\n"
        "  -d, --data-dir DIR       catalog, job work dirs and admin token (default ./kestrel-data); one\n"
        "                           kestreld a data dir: a second is refused (DATA/kestreld.lock)\n"
        "  -g, --gpus N             virtual GPU devices of the default node 'local' (default: this host's\n"
        "                           GPUs through NVML; none when there is no driver)\n"
        "      --node NAME:KEY=V,.. declare a node instead (repeatable): gpus=N, pool=P, type=T,\n"
        "                           memory=80G (per device), cc=8.0; e.g. --node a:gpus=8,type=a100,memory=80G\n"
        "      --quota user:NAME=N  at most N GPUs in use at once by user NAME (team:NAME=N per team)\n"
        "      --max-priority CLASS the highest class (normal, high, urgent) users may give jobs; repeatable,\n"
        "                           team:NAME=CLASS and user:NAME=CLASS for some (default: urgent; admins: any);\n"
        "                           --not-preemptible jobs are for those who may give urgent\n"
        "      --grace-period SECS  SIGTERM -> SIGKILL delay for cancelled and stopped jobs (default 60)\n"
        "      --max-grace SECS     the most a job's own --grace may be (default 600); above it, for those\n"
        "                           who may give urgent jobs (it holds a preemption off that long)\n"
        "      --max-jobs N         jobs running at once (default 64)\n"
        "      --max-body BYTES     largest accepted request body; larger get 413 (default 16777216)\n"
        "      --max-manifest BYTES largest version manifest a push may commit (a directory of N files needs\n"
        "                           about 200 N bytes; default 268435456)\n"
        "      --max-upload-memory BYTES  memory request bodies (and what they take decoded),\n"
        "                           streamed packs and batches of chunks being answered may hold at\n"
        "                           once, a quarter of it per user; past it, 503 and the client tries\n"
        "                           again (413 for a body whose decoding alone would pass a quarter)\n"
        "                           (at least 4 x (the larger of the two limits above + 8 MiB); by\n"
        "                           default 4 x (5 x that limit + 20 MiB), room for a manifest that\n"
        "                           large decoded (up to 4 times its bytes) beside its bytes and a\n"
        "                           push's packs, or 1073741824, whichever is more; below\n"
        "                           4 x (5 x that limit + 8 MiB), a warning at start)\n"
        "      --max-log-bytes SIZE a job's stored output (default 256M), each line counted as its\n"
        "                           bytes, 48 more (its row in the catalog) and 6 more a byte past the\n"
        "                           first of a non-ASCII character (its search index); past it the first\n"
        "                           and last halves are kept around a \"N bytes dropped\" line, with an event\n"
        "      --max-job-disk SIZE  the most a job's files (DATA/jobs/ID) may take, e.g. 50G (default 0: no\n"
        "                           bound); past it the job fails and its files are removed. Whatever the\n"
        "                           bound, a data disk below a fiftieth free (at most 1G) stops the job\n"
        "                           whose files take the most (and removes them)\n"
        "      --max-queued N       QUEUED jobs per user; more submissions get 429 (default 10000)\n"
        "      --max-metric-points N  metric points a job may hold, --max-metric-series N its names;\n"
        "                           a report past either is 413, stored not at all (5000000, 10000; 0: none)\n"
        "      --max-job-processes N  processes and threads the account of a user's jobs (or of the\n"
        "                           environment builds) may have at once, all its jobs together: a fork\n"
        "                           bomb stops there, not at the host's last pid (default a quarter of\n"
        "                           the least of pid_max, threads-max and kestreld's cgroup pids.max;\n"
        "                           0: no limit; kestreld as root, local jobs: Slurm's have Slurm's)\n"
        "      --http-threads N     the HTTP server's threads (epoll, event-driven; default 8); a long\n"
        "                           poll (wait_ms, logs -f) is a suspended connection, not a thread\n"
        "      --max-connections N  open connections in all (default 16384; the fd limit is raised)\n"
        "      --max-connections-per-ip N  from one address (default 1024); more are refused\n"
        "      --idle-timeout SECS  a connection that sends nothing this long, in its headers, its body\n"
        "                           or between requests, is closed (default 30)\n"
        "                           A job's argv and its env are at most 256 KiB each (413 above), one\n"
        "                           log line 64 KiB (longer ones are split), a listing 1000 jobs a page\n"
        "      --port-file FILE     write the bound port to FILE once listening (for tests)\n"
        "\n"
        "Monitoring:\n"
        "      --metrics-listen ADDR:PORT  also serve GET /metrics (Prometheus text) there without a\n"
        "                           token, and nothing else; on the API port /metrics needs an admin\n"
        "                           token or a metrics-scoped one (kestrel token create --scope metrics)\n"        "      --gpu-sample-interval SECS  read real GPUs this often for per-job telemetry (default 5)\n"
        "      --idle-gpu-after SECS  a job whose GPUs all stay under 5%% this long from its start gets an\n"
        "                           \"idle GPU\" event and alert (default 600; 0: never)\n"
        "      --webhook URL        POST kestreld's alerts (log policies, NaN loss, idle GPUs) there as\n"
        "                           JSON, signed: X-Kestrel-Signature: t=UNIX,v1=HMAC-SHA256(\"UNIX.\"+body);\n"
        "                           retried with backoff (12 tries over about 20 minutes)\n"
        "      --webhook-secret-file FILE  the HMAC key, 16..255 bytes (default DATA/webhook.secret,\n"
        "                           made with a random key when missing)\n"        "      --log-policy NAME:ACTION[,ACTION...]=REGEX  when a job's output line matches REGEX (POSIX\n"
        "                           extended), once a run: label (log-policy/NAME on the job), alert,\n"
        "                           no-retry, exclude-node (its retry avoids the node), retry-larger (an\n"
        "                           out-of-memory failure is retried on a device with more memory).\n"
        "                           Repeatable; built in: cuda-oom (label,alert,retry-larger), ecc\n"
        "                           (label,alert,exclude-node), nan-loss (label,alert,no-retry); the same\n"
        "                           NAME replaces a built-in\n"
        "\n"
        "Environments (a job's --environment NAME or --requirements FILE: a venv built once per distinct\n"
        "spec while the job is QUEUED, by kestrel-env-builder-XXXXXXXX (this data dir's own) when root):\n"
        "      --job-env NAME       a variable of kestreld's environment jobs get too (repeatable; NAME* for\n"
        "                           a prefix). By default only PATH, HOME, USER, LOGNAME, LANG, LANGUAGE, LC_*,\n"
        "                           TZ, LD_LIBRARY_PATH, PYTHONPATH, KERAS_*, CUDA_*, NVIDIA_*, XLA_*, JAX_*,\n"
        "                           OMP_NUM_THREADS: the rest (a cloud key, a token) stays kestreld's\n"
        "      --environment NAME=FILE  declare a standard environment from a requirements file (repeatable)\n"
        "      --env-python PATH    the interpreter venvs are made with (default /usr/bin/python3)\n"
        "      --env-python-path DIR  put DIR on every venv's path (default: where --env-python finds\n"
        "                           `import kestrel`, the bindings installed for it)\n"
        "      --env-cache-max N    built environments kept; past it the least recently used one no\n"
        "                           running job uses is removed (default 16)\n"
        "      --env-build-timeout SECS  a build step (venv, pip) running longer is stopped and its jobs\n"
        "                           fail (default 1800)\n"
        "\n"
        "      --repo-gc-grace SECS repository chunks no version names are collected once older than\n"
        "                           this (default 3600; pushes refresh the chunks they rely on)\n"
        "      --settle-digests WHEN  when a pushed file's whole SHA-256 is computed: later (default: the\n"
        "                           push is answered once its chunks are checked and durable; kestreld\n"
        "                           hashes the file after it, at idle priority once the repository has\n"
        "                           been quiet --settle-after MS (1000; none waits 10 times that), or at\n"
        "                           the version's first read, whichever comes first) or at-commit (before\n"
        "                           the push is answered: a second pass over the bytes on the push's time)\n"
        "\n"
        "Slurm (pools whose jobs a Slurm cluster places, preempts and runs; the others run here):\n"
        "      --slurm-pool POOL[=PARTITION]  hand jobs of POOL to Slurm's PARTITION (default: same\n"
        "                           name); repeatable. sbatch, scontrol, scancel and sacct must be on\n"
        "                           PATH and reach the cluster (SLURM_CONF); the data dir must be on a\n"
        "                           filesystem the nodes share\n"
        "      --slurm-grace SECS   preemption warning: USR1 to the job's wrapper that many seconds\n"
        "                           before Slurm's kill (default 10; match the QOS GraceTime)\n"
        "      --slurm-qos N,H,U    QOS names of normal, high and urgent jobs (default normal,high,urgent)\n"
        "      --slurm-poll-ms MS   how often Slurm's view of the jobs is read (default 250)\n"
        "\n"
        "TLS (HTTPS through libmicrohttpd's GnuTLS):\n"
        "      --tls-cert FILE      serve HTTPS with this PEM certificate (chain); without it, plain HTTP\n"
        "                           (kestreld warns when that listens beyond loopback)\n"
        "      --tls-key FILE       the certificate's PEM private key\n"
        "      --tls-ca FILE        the CA bundle jobs verify this server with (their KESTREL_CA_FILE;\n"
        "                           default: the system CAs). Clients: the system CAs or KESTREL_CA_FILE\n"
        "\n"
        "Configuration:\n"
        "      --config FILE        read settings from FILE: one 'key = value' a line, the keys are these\n"
        "                           long flags (node, quota, max-priority, slurm-pool, environment and\n"
        "                           log-policy repeat); '#' comments.\n"
        "                           Flags on the command line win (a repeated one replaces the file's)\n"
        "      --check-config       check the flags and the file, print what would run, exit (0: ok)\n"
        "\n"
        "  -h, --help               show this help\n"
        "  -V, --version            show the version\n"
        "\n"
        "Jobs and identities: when kestreld runs as root, every job of Kestrel user U runs as the Unix\n"
        "account U if it exists and is a regular account (uid >= 1000), else as the account kestrel-U,\n"
        "which kestreld creates once (useradd --system, own group, no home, no shell); with its primary\n"
        "group only and HOME at its job dir (DATA/jobs/ID, 0700, its own). Root is never used. DATA\n"
        "is 0711 (no listing), the catalog and tokens 0600, the repository 0700. When kestreld is not\n"
        "root, jobs run as its own user, which can read all of that: single-tenant (it warns).\n"
        "\n"
        "On first start kestreld creates the user 'admin' and writes its token to\n"
        "DIR/admin.token (mode 0600); only the token's hash is stored. Every route but\n"
        "/healthz needs 'Authorization: Bearer TOKEN'.\n"
        "\n"
        "SIGTERM or SIGINT: stop accepting requests, send SIGTERM to running jobs, SIGKILL\n"
        "after the grace period, requeue them, exit. After a crash, jobs left RUNNING are\n"
        "requeued on the next start (or failed with \"daemon restarted\" if they asked not\n"
        "to be retried).\n");
}

/* "80G", "40960M", "512" (MB) -> MB; -1 on junk. */
static int64_t parse_mb(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || x < 0)
        return -1;
    if (*end == 'G' || *end == 'g')
        x *= 1024, end++;
    else if (*end == 'M' || *end == 'm')
        end++;
    else if (*end == 'T' || *end == 't')
        x *= 1024 * 1024, end++;
    return *end ? -1 : (int64_t)x;
}

/* --node NAME:gpus=N,pool=P,type=T,memory=80G,cc=8.0 */
static int parse_node(kd_config *cfg, const char *arg)
{
    char *copy = strdup(arg), *colon, *tok, *save = NULL;
    kd_node *nodes = realloc(cfg->nodes, (cfg->nnodes + 1) * sizeof(*nodes));
    kd_node *n;
    const char *type = "virtual";
    int64_t mem = 0;
    int cc = 0, gpus = 0;
    kd_dev *devs;
    if (copy == NULL || nodes == NULL)
        return -1;
    cfg->nodes = nodes;
    n = &nodes[cfg->nnodes];
    memset(n, 0, sizeof(*n));
    n->pool = "default";
    if ((colon = strchr(copy, ':')) != NULL)
        *colon++ = '\0';
    if (!copy[0] || !kestrel__text_is_clean(copy, 63)) {
        fprintf(stderr, "kestreld: --node: bad node name in '%s'\n", arg);
        return -1;
    }
    n->name = copy;
    for (tok = colon ? strtok_r(colon, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        long v;
        if (eq == NULL) {
            fprintf(stderr, "kestreld: --node %s: expected KEY=VALUE, got '%s'\n", copy, tok);
            return -1;
        }
        *eq++ = '\0';
        if (!strcmp(tok, "gpus")) {
            if (kd_flag_int("--node gpus", eq, 0, 256, &v) < 0)
                return -1;
            gpus = (int)v;
        } else if (!strcmp(tok, "pool")) {
            n->pool = eq;
        } else if (!strcmp(tok, "type")) {
            type = eq;
        } else if (!strcmp(tok, "memory")) {
            if ((mem = parse_mb(eq)) < 0) {
                fprintf(stderr, "kestreld: --node %s: bad memory '%s' (e.g. 80G)\n", copy, eq);
                return -1;
            }
        } else if (!strcmp(tok, "cc")) {
            if ((cc = kd_sched_parse_cc(eq)) < 0) {
                fprintf(stderr, "kestreld: --node %s: bad compute capability '%s' (e.g. 8.0)\n", copy, eq);
                return -1;
            }
        } else {
            fprintf(stderr, "kestreld: --node %s: unknown key '%s' (gpus, pool, type, memory, cc)\n", copy, tok);
            return -1;
        }
    }
    if ((devs = calloc((size_t)gpus + 1, sizeof(*devs))) == NULL)
        return -1;
    for (int d = 0; d < gpus; d++)
        devs[d] = (kd_dev){ type, mem, cc };
    n->devs = devs;
    n->ndev = gpus;
    cfg->nnodes++;
    return 0;
}

/* --quota user:NAME=N | team:NAME=N (users are created when missing). */
static int parse_quota(kd_config *cfg, kd_catalog *cat, const char *arg)
{
    char *copy = strdup(arg), *colon, *eq;
    kd_quota *q = realloc(cfg->quotas, (cfg->nquotas + 1) * sizeof(*q));
    long v;
    if (copy == NULL || q == NULL)
        return -1;
    cfg->quotas = q;
    q = &cfg->quotas[cfg->nquotas];
    memset(q, 0, sizeof(*q));
    colon = strchr(copy, ':');
    eq = colon ? strchr(colon, '=') : NULL;
    if (!colon || !eq || (strncmp(copy, "user:", 5) && strncmp(copy, "team:", 5)) || eq == colon + 1) {
        fprintf(stderr, "kestreld: --quota takes user:NAME=N or team:NAME=N, got '%s'\n", arg);
        return -1;
    }
    *eq++ = '\0';
    if (kd_flag_int("--quota", eq, 0, 1 << 20, &v) < 0) {
        free(copy);
        return -1;
    }
    q->max_gpus = (int)v;
    q->is_team = copy[0] == 't';
    q->team = strdup(colon + 1);
    free(copy);
    if (q->team == NULL || (!q->is_team && kd_catalog_user_ensure(cat, q->team, 0, NULL, &q->user, NULL) < 0))
        return -1;
    cfg->nquotas++;
    return 0;
}

/* "NVIDIA A100-SXM4-80GB" -> "a100": what --gpu-type matches for a discovered GPU. */
static char *short_type(const char *name)
{
    char buf[64];
    size_t k = 0;
    if (!strncasecmp(name, "NVIDIA ", 7))
        name += 7;
    if (!strncasecmp(name, "Tesla ", 6))
        name += 6;
    for (; *name && *name != ' ' && *name != '-' && k + 1 < sizeof(buf); name++)
        buf[k++] = (char)tolower((unsigned char)*name);
    buf[k] = '\0';
    return strdup(k ? buf : "gpu");
}

/* Without --node or --gpus: the node "local" gets this host's GPUs (whole GPUs and MIG instances). */
static int discover_gpus(kd_config *cfg)
{
    kestrel_gpu_list *l = NULL;
    kd_dev *devs;
    size_t n = 0;
    if (kestrel_gpu_list_query(&l, 0) < 0)
        return -1;
    devs = calloc(kestrel_gpu_list_count(l) + 1, sizeof(*devs));
    if (devs == NULL) {
        kestrel_gpu_list_free(l);
        return -1;
    }
    for (size_t i = 0; i < kestrel_gpu_list_count(l); i++) {
        const kestrel_gpu *g = kestrel_gpu_list_get(l, i);
        if (!g->is_mig && g->mig_mode == 1)
            continue;   /* only its instances can run work */
        devs[n].type = short_type(g->name);
        devs[n].mem_mb = g->memory_total > 0 ? g->memory_total >> 20 : 0;
        devs[n].cc = g->cc_major >= 0 ? g->cc_major * 10 + g->cc_minor : 0;
        devs[n].uuid = strdup(g->uuid);
        n++;
    }
    if (kestrel_gpu_list_diagnostic(l)[0])
        fprintf(stderr, "kestreld: GPUs: %s\n", kestrel_gpu_list_diagnostic(l));
    kestrel_gpu_list_free(l);
    if (n == 0) {
        free(devs);
        return 0;
    }
    if ((cfg->nodes = calloc(1, sizeof(*cfg->nodes))) == NULL) {
        free(devs);
        return -1;
    }
    cfg->nodes[0] = (kd_node){ strdup("local"), "default", (int)n, devs };
    cfg->nnodes = 1;
    return (int)n;
}

static void free_config(kd_config *cfg)
{
    for (size_t i = 0; i < cfg->nnodes; i++) {
        free((char *)cfg->nodes[i].name);   /* the strdup'd --node argument; pool and type point into it */
        for (int d = 0; d < cfg->nodes[i].ndev; d++)
            if (cfg->nodes[i].devs[d].uuid) {   /* discovered GPUs own their strings */
                free((char *)cfg->nodes[i].devs[d].uuid);
                free((char *)cfg->nodes[i].devs[d].type);
            }
        free((kd_dev *)cfg->nodes[i].devs);
    }
    free(cfg->nodes);
    free(cfg->log_policies);   /* the strings are argv's or the config file's */
    for (size_t i = 0; i < cfg->nenvs; i++) {
        free(cfg->envs[i].name);
        free(cfg->envs[i].requirements);
    }
    free(cfg->envs);
    for (size_t i = 0; i < cfg->nslurm_pools; i++) {
        free(cfg->slurm_pools[i]);
        free(cfg->slurm_partitions[i]);
    }
    free(cfg->slurm_pools);
    free(cfg->slurm_partitions);
    for (size_t i = 0; i < cfg->nquotas; i++)
        free((char *)cfg->quotas[i].team);
    free(cfg->quotas);
    kd_priority_limits_free(&cfg->priority_limits);
}

/* --slurm-pool POOL[=PARTITION] */
static int parse_slurm_pool(kd_config *cfg, const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t plen = eq ? (size_t)(eq - arg) : strlen(arg);
    const char *part = eq ? eq + 1 : arg;
    char **p, **q;
    if (plen == 0 || plen > 63 || !*part || strcspn(part, " ,\t\n") != strlen(part)) {
        fprintf(stderr, "kestreld: --slurm-pool takes POOL or POOL=PARTITION, got '%s'\n", arg);
        return -1;
    }
    for (size_t i = 0; i < cfg->nslurm_pools; i++)
        if (strlen(cfg->slurm_pools[i]) == plen && !strncmp(cfg->slurm_pools[i], arg, plen)) {
            fprintf(stderr, "kestreld: --slurm-pool: pool '%.*s' given twice\n", (int)plen, arg);
            return -1;
        }
    p = realloc(cfg->slurm_pools, (cfg->nslurm_pools + 1) * sizeof(*p));
    if (p)
        cfg->slurm_pools = p;
    q = realloc(cfg->slurm_partitions, (cfg->nslurm_pools + 1) * sizeof(*q));
    if (q)
        cfg->slurm_partitions = q;
    if (p == NULL || q == NULL || (p[cfg->nslurm_pools] = strndup(arg, plen)) == NULL)
        return -1;
    if ((q[cfg->nslurm_pools] = strdup(part)) == NULL) {
        free(p[cfg->nslurm_pools]);
        return -1;
    }
    cfg->nslurm_pools++;
    return 0;
}

/* --slurm-qos NORMAL,HIGH,URGENT (pointers into the argument) */
static int parse_slurm_qos(kd_config *cfg, char *arg)
{
    char *save = NULL, *t;
    int k = 0;
    for (t = strtok_r(arg, ",", &save); t && k < 3; t = strtok_r(NULL, ",", &save))
        cfg->slurm_qos[k++] = t;
    if (k != 3 || t) {
        fprintf(stderr, "kestreld: --slurm-qos takes three names: NORMAL,HIGH,URGENT\n");
        return -1;
    }
    return 0;
}

static int bootstrap_admin(kd_catalog *cat, const char *data_dir)
{
    char path[PATH_MAX], token[80], line[96];
    kd_token t;
    int64_t uid;
    int created = 0;
    if (kd_catalog_user_ensure(cat, "admin", 1, NULL, &uid, &created) < 0)
        return -1;
    if (!created)
        return 0;
    snprintf(path, sizeof(path), "%s/admin.token", data_dir);
    memset(&t, 0, sizeof(t));
    t.user_id = uid;
    t.scope = KD_SCOPE_ADMIN;
    snprintf(t.name, sizeof(t.name), "bootstrap (admin.token)");
    if (kd_token_issue_for(cat, &t, token, sizeof(token), NULL) < 0)
        return -1;
    snprintf(line, sizeof(line), "%s\n", token);
    if (kestrel__write_file_atomic(path, line, strlen(line), 0600) < 0) {
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        return -1;
    }
    fprintf(stderr, "kestreld: created user 'admin'; its token is in %s\n", path);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "listen", required_argument, NULL, 'l' }, { "port", required_argument, NULL, 'p' },
        { "data-dir", required_argument, NULL, 'd' }, { "gpus", required_argument, NULL, 'g' },
        { "grace-period", required_argument, NULL, 1 }, { "max-jobs", required_argument, NULL, 2 },
        { "max-body", required_argument, NULL, 3 }, { "port-file", required_argument, NULL, 4 },
        { "node", required_argument, NULL, 5 }, { "quota", required_argument, NULL, 6 },
        { "repo-gc-grace", required_argument, NULL, 7 }, { "slurm-pool", required_argument, NULL, 8 },
        { "slurm-grace", required_argument, NULL, 9 }, { "slurm-qos", required_argument, NULL, 10 },
        { "slurm-poll-ms", required_argument, NULL, 11 }, { "tls-cert", required_argument, NULL, 12 },
        { "tls-key", required_argument, NULL, 13 }, { "tls-ca", required_argument, NULL, 14 },
        { "config", required_argument, NULL, 15 }, { "check-config", no_argument, NULL, 16 },
        { "max-log-bytes", required_argument, NULL, 17 }, { "max-queued", required_argument, NULL, 18 },
        { "http-threads", required_argument, NULL, 19 }, { "max-connections", required_argument, NULL, 20 },
        { "max-connections-per-ip", required_argument, NULL, 21 }, { "idle-timeout", required_argument, NULL, 22 },
        { "environment", required_argument, NULL, 23 }, { "env-python", required_argument, NULL, 24 },
        { "env-python-path", required_argument, NULL, 25 }, { "env-cache-max", required_argument, NULL, 26 },
        { "env-build-timeout", required_argument, NULL, 27 }, { "metrics-listen", required_argument, NULL, 28 },
        { "gpu-sample-interval", required_argument, NULL, 29 }, { "idle-gpu-after", required_argument, NULL, 30 },
        { "webhook", required_argument, NULL, 31 }, { "webhook-secret-file", required_argument, NULL, 32 },
        { "log-policy", required_argument, NULL, 33 }, { "max-manifest", required_argument, NULL, 34 },
        { "max-upload-memory", required_argument, NULL, 35 }, { "max-job-processes", required_argument, NULL, 36 },
        { "max-priority", required_argument, NULL, 37 }, { "max-metric-points", required_argument, NULL, 38 },
        { "max-metric-series", required_argument, NULL, 39 }, { "max-grace", required_argument, NULL, 40 },
        { "max-job-disk", required_argument, NULL, 41 }, { "job-env", required_argument, NULL, 42 },
        { "settle-digests", required_argument, NULL, 43 }, { "settle-after", required_argument, NULL, 44 },
        { "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 }
    };
    kd_config cfg = { "127.0.0.1", 7070, "./kestrel-data", 0, 60, 64, 16u << 20, NULL, NULL, 0, NULL, 0, 3600,
                      NULL, NULL, 0, 10, { "normal", "high", "urgent" }, 250 };
    const char *quota_args[64];
    cfg.max_manifest = 256u << 20;
    size_t nquota_args = 0;
    int gpus_given = 0, check_only = 0;
    char data_dir[PATH_MAX], db[PATH_MAX + 16], portbuf[32];
    kd_catalog *cat = NULL;
    kd_engine engine;
    kd_api *api = NULL;
    sigset_t stop;
    int c, port, sig;
    long v;

    cfg.max_log_bytes = 256LL << 20;
    cfg.max_queued = 10000;
    cfg.max_grace_s = 600;
    cfg.max_metric_points = 5000000;
    cfg.max_metric_series = 10000;
    cfg.max_job_procs = kd_exec_default_max_procs();
    cfg.http_threads = 8;
    cfg.max_connections = 16384;
    cfg.max_connections_per_ip = 1024;
    cfg.idle_timeout_s = 30;
    cfg.env_python = "/usr/bin/python3";
    cfg.env_cache_max = 16;
    cfg.env_build_timeout_s = 1800;
    cfg.gpu_sample_s = 5;
    cfg.idle_gpu_s = 600;
    cfg.settle_after_ms = 1000;
    if (kestrel_init() < 0) {   /* the library's own client: a job's code is copied through it */
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        return 1;
    }
    if (kd_config_merge(argc, argv, opts, &argc, &argv) < 0)
        return 2;
    while ((c = getopt_long(argc, argv, "l:p:d:g:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'l': cfg.listen = optarg; break;
        case 'p': if (kd_flag_int("--port", optarg, 0, 65535, &v) < 0) return 2; cfg.port = (int)v; break;
        case 'd': cfg.data_dir = optarg; break;
        case 'g': if (kd_flag_int("--gpus", optarg, 0, 256, &v) < 0) return 2; cfg.gpus = (int)v; gpus_given = 1; break;
        case 1: if (kd_flag_int("--grace-period", optarg, 0, 86400, &v) < 0) return 2; cfg.grace_s = (int)v; break;
        case 2: if (kd_flag_int("--max-jobs", optarg, 1, 100000, &v) < 0) return 2; cfg.max_jobs = (int)v; break;
        case 3: if (kd_flag_int("--max-body", optarg, 1024, 1L << 30, &v) < 0) return 2; cfg.max_body = (size_t)v; break;
        case 4: cfg.port_file = optarg; break;
        case 5: if (parse_node(&cfg, optarg) < 0) return 2; break;
        case 7: if (kd_flag_int("--repo-gc-grace", optarg, 0, 30L * 86400, &v) < 0) return 2; cfg.repo_gc_grace_s = (int)v; break;
        case 8: if (parse_slurm_pool(&cfg, optarg) < 0) return 2; break;
        case 9: if (kd_flag_int("--slurm-grace", optarg, 0, 86400, &v) < 0) return 2; cfg.slurm_grace_s = (int)v; break;
        case 10: if (parse_slurm_qos(&cfg, optarg) < 0) return 2; break;
        case 11: if (kd_flag_int("--slurm-poll-ms", optarg, 10, 60000, &v) < 0) return 2; cfg.slurm_poll_ms = (int)v; break;
        case 12: cfg.tls_cert = optarg; break;
        case 13: cfg.tls_key = optarg; break;
        case 14: cfg.tls_ca = optarg; break;
        case 15: break;   /* merged by kd_config_merge */
        case 17: if (kd_flag_size("--max-log-bytes", optarg, 1 << 20, (int64_t)1 << 40, "256M", &cfg.max_log_bytes) < 0) return 2; break;
        case 41: if (kd_flag_size("--max-job-disk", optarg, 0, (int64_t)1 << 50, "50G", &cfg.max_job_disk) < 0) return 2; break;
        case 37: if (kd_priority_limits_parse(&cfg.priority_limits, optarg) < 0) return 2; break;
        case 38: if (kd_flag_int("--max-metric-points", optarg, 0, 1L << 40, &v) < 0) return 2; cfg.max_metric_points = v; break;
        case 39: if (kd_flag_int("--max-metric-series", optarg, 0, 1L << 30, &v) < 0) return 2; cfg.max_metric_series = v; break;
        case 40: if (kd_flag_int("--max-grace", optarg, 0, 86400, &v) < 0) return 2; cfg.max_grace_s = (int)v; break;
        case 18: if (kd_flag_int("--max-queued", optarg, 1, 10000000, &v) < 0) return 2; cfg.max_queued = (int)v; break;
        case 36:
            if (kd_flag_int("--max-job-processes", optarg, 0, 1L << 30, &v) < 0)
                return 2;
            if (v > 0 && v < 16) {   /* a job's interpreter and its threads: nothing would run */
                fprintf(stderr, "kestreld: --max-job-processes: %ld is too few (0 for no limit, else 16 or more)\n", v);
                return 2;
            }
            cfg.max_job_procs = v;
            break;
        case 19: if (kd_flag_int("--http-threads", optarg, 1, KD_HTTP_THREADS_MAX, &v) < 0) return 2; cfg.http_threads = (int)v; break;
        case 20: if (kd_flag_int("--max-connections", optarg, 16, 1000000, &v) < 0) return 2; cfg.max_connections = (int)v; break;
        case 21: if (kd_flag_int("--max-connections-per-ip", optarg, 1, 1000000, &v) < 0) return 2; cfg.max_connections_per_ip = (int)v; break;
        case 22: if (kd_flag_int("--idle-timeout", optarg, 1, 3600, &v) < 0) return 2; cfg.idle_timeout_s = (int)v; break;
        case 23: if (kd_envs_declare(&cfg, optarg) < 0) return 2; break;
        case 42: if (kd_exec_job_env_pass(&cfg, optarg) < 0) return 2; break;
        case 43:
            if (strcmp(optarg, "later") && strcmp(optarg, "at-commit")) {
                fprintf(stderr, "kestreld: --settle-digests: '%s': later or at-commit\n", optarg);
                return 2;
            }
            cfg.settle_at_commit = !strcmp(optarg, "at-commit");
            break;
        case 44: if (kd_flag_int("--settle-after", optarg, 0, 3600000, &v) < 0) return 2; cfg.settle_after_ms = v; break;
        case 24: cfg.env_python = optarg; break;
        case 25: cfg.env_python_path = optarg; break;
        case 26: if (kd_flag_int("--env-cache-max", optarg, 1, 100000, &v) < 0) return 2; cfg.env_cache_max = (int)v; break;
        case 27: if (kd_flag_int("--env-build-timeout", optarg, 10, 86400, &v) < 0) return 2; cfg.env_build_timeout_s = (int)v; break;
        case 28: cfg.metrics_listen = optarg; break;
        case 29: if (kd_flag_int("--gpu-sample-interval", optarg, 1, 3600, &v) < 0) return 2; cfg.gpu_sample_s = (int)v; break;
        case 30: if (kd_flag_int("--idle-gpu-after", optarg, 0, 7 * 86400, &v) < 0) return 2; cfg.idle_gpu_s = (int)v; break;
        case 31: cfg.webhook_url = optarg; break;
        case 32: cfg.webhook_secret_file = optarg; break;
        case 33: {
            char **grown;
            if (kd_policy_parse_check(optarg) < 0) {
                fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
                return 2;
            }
            if ((grown = realloc(cfg.log_policies, (cfg.nlog_policies + 1) * sizeof(*grown))) == NULL)
                return 1;
            cfg.log_policies = grown;
            cfg.log_policies[cfg.nlog_policies++] = optarg;
            break;
        }
        case 34: if (kd_flag_int("--max-manifest", optarg, 1024, 1L << 32, &v) < 0) return 2; cfg.max_manifest = (size_t)v; break;
        case 35:
            if (kd_flag_int("--max-upload-memory", optarg, 1L << 20, 1L << 40, &v) < 0)
                return 2;
            cfg.max_upload_memory = (uint64_t)v;
            break;
        case 16: check_only = 1; break;
        case 6:
            if (nquota_args == sizeof(quota_args) / sizeof(quota_args[0])) {
                fprintf(stderr, "kestreld: too many --quota flags\n");
                return 2;
            }
            quota_args[nquota_args++] = optarg;
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("kestreld %s\n", KESTREL_VERSION_STRING); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kestreld: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (!cfg.tls_cert != !cfg.tls_key) {
        fprintf(stderr, "kestreld: --tls-cert and --tls-key go together\n");
        return 2;
    }
    if (cfg.tls_ca && !cfg.tls_cert) {
        fprintf(stderr, "kestreld: --tls-ca names the CA of this server's --tls-cert: give both\n");
        return 2;
    }
    if (cfg.tls_ca) {   /* jobs run elsewhere: an absolute path */
        static char ca[PATH_MAX];
        if (realpath(cfg.tls_ca, ca) == NULL) {
            fprintf(stderr, "kestreld: --tls-ca %s: %s\n", cfg.tls_ca, strerror(errno));
            return 2;
        }
        cfg.tls_ca = ca;
    }
    {   /* one user's quarter must hold the largest body it may send, and a pack beside it; by default
         * also that body decoded (kd_body: a real manifest takes 2.4 to 4 times its bytes,
         * tests/unit/test_wire_cost.c), so that the largest commit fits as it did before its decoding
         * was counted. A budget given below that is kept (it may be a deployment's since before):
         * the largest commits are refused 413, which the warning says. */
        uint64_t body = kd_config_largest_body(&cfg);
        uint64_t need = 4 * (body + KD_RUN_LEAST_ROOM), room = 4 * (5 * body + KD_RUN_LEAST_ROOM);
        if (cfg.max_upload_memory == 0)   /* and a push's packs, runs 16 deep */
            cfg.max_upload_memory = KD_RUN_DEEP_BUDGET(body) > (1ull << 30) ? KD_RUN_DEEP_BUDGET(body) : 1ull << 30;
        else if (cfg.max_upload_memory < room && cfg.max_upload_memory >= need)
            fprintf(stderr, "kestreld: warning: --max-upload-memory %llu: a commit's manifest decoded takes up to 4 "
                    "times its bytes, so one of more than about %llu MiB may be refused (413) though under "
                    "--max-manifest (%llu MiB); give %llu to take every one\n",
                    (unsigned long long)cfg.max_upload_memory,
                    (unsigned long long)(cfg.max_upload_memory / 4 / 5 >> 20),
                    (unsigned long long)(cfg.max_manifest >> 20), (unsigned long long)room);
        else if (cfg.max_upload_memory < need) {
            fprintf(stderr, "kestreld: --max-upload-memory %llu is too small: a user's quarter must hold a body "
                    "of --max-manifest/--max-body (%llu bytes) and a pack; give at least %llu\n",
                    (unsigned long long)cfg.max_upload_memory, (unsigned long long)body, (unsigned long long)need);
            return 2;
        }
    }
    if (gpus_given && cfg.nnodes) {
        fprintf(stderr, "kestreld: use --gpus for the default node or --node ...,gpus=N, not both\n");
        return 2;
    }
    if (cfg.nnodes == 0 && !gpus_given && discover_gpus(&cfg) < 0) {
        fprintf(stderr, "kestreld: out of memory while listing GPUs\n");
        return 1;
    }
    if (cfg.nnodes == 0) {
        char def[64];
        snprintf(def, sizeof(def), "local:gpus=%d", cfg.gpus);
        if (parse_node(&cfg, def) < 0)
            return 2;
    }
    for (size_t i = 0; i < cfg.nnodes; i++)
        for (size_t k = 0; k < i; k++)
            if (!strcmp(cfg.nodes[i].name, cfg.nodes[k].name)) {
                fprintf(stderr, "kestreld: node '%s' is declared twice\n", cfg.nodes[i].name);
                return 2;
            }
    {   /* every connection is a descriptor: take what the hard limit allows */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    kd_exec_set_max_procs(cfg.max_job_procs);
    kd_exec_set_job_env(&cfg);
    if (kd_ident_available() && !kd_exec_private_tmp())
        fprintf(stderr, "kestreld: no mount namespace here: jobs share the host's /tmp and /var/tmp, where what "
                "they write is not measured (--max-job-disk)\n");
    if (!check_only && kd_check_slurm_data_dir(&cfg) < 0) {
        free_config(&cfg);
        return 2;
    }
    if (check_only) {
        int rc = kd_check_config(&cfg);
        free_config(&cfg);
        return rc;
    }
    if (mkdir(cfg.data_dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "kestreld: cannot create %s: %s\n", cfg.data_dir, strerror(errno));
        free_config(&cfg);
        return 1;
    }
    if (realpath(cfg.data_dir, data_dir) == NULL) {
        fprintf(stderr, "kestreld: %s: %s\n", cfg.data_dir, strerror(errno));
        free_config(&cfg);
        return 1;
    }
    cfg.data_dir = data_dir;
    if (kd_data_dir_lock(data_dir) < 0 || kd_data_dir_catalog_check(data_dir) < 0 ||
        kd_ident_secure_data_dir(data_dir) < 0) {
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        free_config(&cfg);
        return 1;
    }

    /* SIGTERM/SIGINT are taken synchronously by main; every thread inherits the mask */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    snprintf(db, sizeof(db), "%s/catalog.db", data_dir);
    /* the admin first: a --quota naming a new user must not take the first start's place */
    if (kd_catalog_open(&cat, db) < 0 || bootstrap_admin(cat, data_dir) < 0) {
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        kd_catalog_close(cat);
        return 1;
    }
    for (size_t i = 0; i < nquota_args; i++)
        if (parse_quota(&cfg, cat, quota_args[i]) < 0) {
            kd_catalog_close(cat);
            return 2;
        }
    if (kd_engine_init(&engine, &cfg, cat, &kd_exec_local) < 0 || kd_engine_recover(&engine) < 0 ||
        kestrel__store_open(&engine.store, kd_store_root(&engine)) < 0 || kestrel__store_claim(engine.store) < 0) {
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        kd_catalog_close(cat);
        return 1;
    }
    engine.repo_runs = kd_runs_new();   /* NULL: every commit reads its files back instead */
    if ((engine.repo_settle = kd_settle_new(engine.store, engine.metrics, !cfg.settle_at_commit, cfg.settle_after_ms)) == NULL)
        kestrel_error_clear();   /* out of memory: what an earlier kestreld left unsettled stays so */
    kd_stage_reset(&engine);   /* no job runs yet: nothing is being staged */
    if (kd_envs_new(&engine.envs, &engine) < 0) {
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        kd_runs_free(engine.repo_runs);
        kd_settle_free(engine.repo_settle);
        kestrel__store_close(engine.store);
        kd_catalog_close(cat);
        return 1;
    }
    if (kd_api_start(&api, &engine, &cfg, &port) < 0) {
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        kd_runs_free(engine.repo_runs);
        kd_settle_free(engine.repo_settle);
        kestrel__store_close(engine.store);
        kd_engine_fini(&engine);
        kd_catalog_close(cat);
        free_config(&cfg);
        return 1;
    }
    snprintf(engine.url, sizeof(engine.url), "%s://%s:%d", cfg.tls_cert ? "https" : "http",
             strcmp(cfg.listen, "0.0.0.0") ? cfg.listen : "127.0.0.1", port);
    if (!cfg.tls_cert && strncmp(cfg.listen, "127.", 4))
        fprintf(stderr, "kestreld: warning: listening on %s without TLS: bearer tokens cross the network in "
                        "clear; use --tls-cert and --tls-key\n", cfg.listen);
    kd_engine_set_external(&engine, &kd_exec_slurm);
    if (kd_engine_start(&engine) < 0) {
        fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        kd_api_stop(api);
        kd_engine_fini(&engine);
        kd_catalog_close(cat);
        return 1;
    }
    if (cfg.port_file) {
        snprintf(portbuf, sizeof(portbuf), "%d\n", port);
        if (kestrel__write_file_atomic(cfg.port_file, portbuf, strlen(portbuf), 0644) < 0)
            fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
    }
    fprintf(stderr, "kestreld %s listening on %s (data %s)\n", KESTREL_VERSION_STRING, engine.url, data_dir);
    for (size_t i = 0; i < cfg.nnodes; i++)
        fprintf(stderr, "kestreld: node %s: pool %s, %d x %s\n", cfg.nodes[i].name, cfg.nodes[i].pool,
                cfg.nodes[i].ndev, cfg.nodes[i].ndev ? cfg.nodes[i].devs[0].type : "-");
    if (cfg.priority_limits.everyone || cfg.priority_limits.n) {   /* a right: said where it is in force */
        char caps[2048];
        kd_priority_limits_describe(&cfg.priority_limits, caps, sizeof(caps));
        fprintf(stderr, "kestreld: priority classes (--max-priority): %s\n", caps);
    }
    for (size_t i = 0; i < cfg.nslurm_pools; i++)
        fprintf(stderr, "kestreld: pool %s: Slurm partition %s (QOS %s/%s/%s)\n", cfg.slurm_pools[i],
                cfg.slurm_partitions[i], cfg.slurm_qos[0], cfg.slurm_qos[1], cfg.slurm_qos[2]);

    while (sigwait(&stop, &sig) != 0)
        ;
    fprintf(stderr, "kestreld: %s: stopping (grace period %d s)\n", strsignal(sig), cfg.grace_s);
    kd_engine_quiesce(&engine);
    kd_api_stop(api);
    kd_engine_stop(&engine);
    kd_envs_free(engine.envs);
    kd_runs_free(engine.repo_runs);   /* the API is stopped: no pack feeds one */
    kd_settle_free(engine.repo_settle);   /* nor reads or commits: left unsettled, a version settles at its first read */
    kestrel__store_close(engine.store);
    kd_engine_fini(&engine);
    kd_catalog_close(cat);
    free_config(&cfg);
    fprintf(stderr, "kestreld: stopped\n");
    return 0;
}
