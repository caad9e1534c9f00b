/* cli/registry.c - every command of the kestrel CLI in one table: its handler, one-line summary,
 * help text and option table. `kestrel help`, `CMD --help`, the usage line after a flag error,
 * did-you-mean, shell completion and the man page are all made from it. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

extern const char cli_help_submit[], cli_help_logs[], cli_help_alerts[], cli_help_token[], cli_help_ui[];
extern const struct option cli_opts_jobs[], cli_opts_wait[], cli_opts_devices[], cli_opts_logs[], cli_opts_alerts[],
    cli_opts_job[], cli_opts_metrics[], cli_opts_push[], cli_opts_pull[], cli_opts_gc[], cli_opts_submit[], cli_opts_token_create[],
    cli_opts_token_list[], cli_opts_ui[];

static const struct option no_opts[] = { { NULL, 0, NULL, 0 } };
/* the flags of the commands that read their arguments by hand */
static const struct option envs_opts[] = { { "packages", no_argument, NULL, 0 }, { NULL, 0, NULL, 0 } };
static const struct option model_opts[] = { { "visibility", required_argument, NULL, 0 }, { NULL, 0, NULL, 0 } };
static const struct option user_opts[] = { { "team", required_argument, NULL, 0 }, { NULL, 0, NULL, 0 } };
static const struct option login_opts[] = { { "token", required_argument, NULL, 0 }, { NULL, 0, NULL, 0 } };

static const cli_command commands[] = {
    { "submit", cmd_submit, "queue a job", cli_help_submit, cli_opts_submit, NULL, 1 },
    { "jobs", cmd_jobs, "list your jobs, newest first",
      "Usage: kestrel jobs [--state S] [--name N] [--label K=V] [--param K=V] [--limit N]\n"
      "\n"
      "Your jobs (an admin: everyone's), newest first.\n"
      "  --state S      queued, running, succeeded, failed, cancelled or preempted\n"
      "  --name N       that exact name\n"
      "  --label K=V    jobs with that label\n"
      "  --param K=V    jobs run with that parameter\n"
      "  --limit N      at most N jobs (default 50)\n"
      "Columns: id, name, user, state, class, GPUs, node, age, reason (a waiting job: why it waits);\n"
      "-o wide adds command, labels and params; -o json is the API's JobList.\n",
      cli_opts_jobs, NULL },
    { "status", cmd_status, "show a job and its state history",
      "Usage: kestrel status ID\n\nA job: its spec, state, node, reason, exit code, params, GPU use and every state change.\n",
      no_opts, NULL },
    { "rerun", cmd_rerun, "queue a job again with what it ran with",
      "Usage: kestrel rerun ID\n\nQueue job ID again: the same code version, datasets, params, argv, env and environment.\n",
      no_opts, NULL },
    { "reproduce", cmd_rerun, "rerun the job that pushed a model version",
      "Usage: kestrel reproduce NAME[@REF]\n\nQueue again the job whose run pushed that version (its lineage names it).\n",
      no_opts, NULL },
    { "envs", cmd_envs, "the server's standard environments and their packages",
      "Usage: kestrel envs [--packages]\n\nThe environments kestreld declares (kestreld --environment NAME=FILE): name, state,\n"
      "digest. A job's own --requirements venv is not listed: kestrel status ID shows its digest.\n"
      "  --packages     each one's packages (pip freeze)\n",
      envs_opts, NULL },
    { "logs", cmd_logs, "print a job's output, or find lines in every job", cli_help_logs, cli_opts_logs, NULL },
    { "wait", cmd_wait, "wait for a job to end; exit 0 only if it SUCCEEDED",
      "Usage: kestrel wait [--timeout SECS] ID\n\nWait for job ID to end. Exit status: 0 SUCCEEDED, 1 FAILED or CANCELLED,\n"
      "124 when --timeout passed first.\n",
      cli_opts_wait, NULL },
    { "cancel", cmd_cancel, "cancel a queued or running job",
      "Usage: kestrel cancel ID\n\nCancel job ID: a queued job leaves the queue; a running one gets SIGTERM, then SIGKILL\n"
      "after its grace period.\n",
      no_opts, NULL },
    { "explain", cmd_explain, "queue position and why a job waits",
      "Usage: kestrel explain ID\n\nWhere job ID stands in the queue and the reason it waits (GPUs, quota, dependencies).\n",
      no_opts, NULL },
    { "queue", cmd_queue, "your queued jobs in scheduling order, with reasons",
      "Usage: kestrel queue\n\nQueued jobs in the order the scheduler will try them, with each one's position and reason.\n",
      no_opts, NULL },
    { "job", cmd_job, "change a queued job (job update ID --priority CLASS)",
      "Usage: kestrel job update ID --priority CLASS\n\nMove queued job ID to another class: normal, high or urgent.\n",
      cli_opts_job, "update" },
    { "ack", cmd_ack, "acknowledge a checkpoint (from inside the job)",
      "Usage: kestrel ack ID\n\nFrom inside a job told to stop: say its checkpoint is written (its token may call it).\n",
      no_opts, NULL },
    { "metrics", cmd_metrics, "the metrics a job reported: by step, as curves, or its GPUs' use",
      "Usage: kestrel metrics [--name NAME] [--plot | --flat] ID\n       kestrel metrics --gpu ID\n\n"
      "The metrics job ID reported, a row a step and a column a metric. Series named FAMILY/NAME\n"
      "(Keras' batch/loss) count their own steps (batches, not epochs): each family is its own table.\n"
      "  --name NAME    only that metric\n"
      "  --plot         each metric as a curve against step, drawn in the terminal (Unicode braille)\n"
      "  --flat         one line a point: NAME STEP VALUE\n"
      "  --gpu          its GPUs' utilisation and memory as kestreld sampled them\n",
      cli_opts_metrics, NULL },
    { "compare", cmd_compare, "several jobs' params and final metrics side by side",
      "Usage: kestrel compare ID ID [ID...]\n\n"
      "2 to 10 jobs side by side: name, state, every param (* where they differ) and the last value of\n"
      "every metric. -o json: each job's JSON with its final metrics.\n",
      no_opts, NULL },
    { "alerts", cmd_alerts, "kestreld's alerts: log policies, NaN loss, idle GPUs", cli_help_alerts, cli_opts_alerts, NULL },
    { "ui", cmd_ui, "the web console's address, logged in (a one-time code)", cli_help_ui, cli_opts_ui, NULL },
    { "push", cmd_push, "push a file or directory as a model's next version",
      "Usage: kestrel push NAME PATH [--alias A] [--meta K=V]\n\n"
      "Push PATH (a file or a directory) as the next version of model NAME; only chunks the server\n"
      "lacks travel. Says: pushed NAME@N (SIZE, NEW new). PATH's name goes in the version's\n"
      "metadata as filename (kestrel pull writes to it).\n"
      "  --alias A      also point alias A at the new version\n"
      "  --meta K=V     metadata of the version (repeatable)\n",
      cli_opts_push, NULL },
    { "pull", cmd_pull, "pull a version, verified",
      "Usage: kestrel pull REF [DEST] [--replace]\n\nPull NAME, NAME@N or NAME@ALIAS (a file or a directory), every byte\n"
      "verified, to DEST (a file version replaces a file or link there). Without DEST, or when DEST is an\n"
      "existing directory, the version goes in the current directory or in DEST under the name it was\n"
      "pushed from (kestrel push records it; a hidden name, one starting with '-', or with a separator, a\n"
      "control character or a bidirectional mark is not taken), else the model's last name segment.\n"
      "The pushed name, being the pusher's choice, replaces nothing already there unless --replace.\n"
      "So a directory pulled under its pushed name is replaced by naming its parent:\n"
      "kestrel pull NAME@2 PARENT --replace.\n"
      "  --dest PATH    DEST as a flag (-o PATH, --output PATH: its older spelling, still taken)\n"
      "  --replace      let the pushed name replace the file or directory already there\n",
      cli_opts_pull, NULL },
    { "models", cmd_models, "model names, or a model's versions",
      "Usage: kestrel models [NAME]\n\nThe models you may read, or NAME's versions with size, digest and aliases.\n", no_opts, NULL },
    { "alias", cmd_alias, "point an alias at a version",
      "Usage: kestrel alias NAME VERSION ALIAS\n\nPoint NAME@ALIAS at VERSION (the writers of NAME's namespace may).\n", no_opts, NULL },
    { "rm", cmd_rm, "delete a version",
      "Usage: kestrel rm NAME@VERSION\n\nDelete one version (its chunks go at the next repository gc).\n", no_opts, NULL },
    { "gc", cmd_gc, "collect the repository: chunks no version names, killed writers' temps",
      "Usage: kestrel gc [--grace DURATION]\n\nRemove the chunks no version names once older than the grace (a push\n"
      "in flight relies only on younger ones, and its commit checks them), and temp files of killed\n"
      "writers once older than the grace and an hour. A kestreld: an admin's token (its\n"
      "--repo-gc-grace by default); a file:// store: collected here, safe beside pushes from other\n"
      "processes and hosts (1h by default).\n"
      "  --grace D      30d, 12h, 90m or seconds\n",
      cli_opts_gc, NULL },
    { "nodes", cmd_nodes, "the server's nodes, devices and allocations",
      "Usage: kestrel nodes\n\nThe nodes kestreld schedules on: their pool, devices, memory, utilisation and holders.\n",
      no_opts, NULL },
    { "devices", cmd_devices, "this host's GPUs, and a selection by criteria",
      "Usage: kestrel devices [--all] [--cuda] [--select N] [--min-memory SIZE] [--min-free SIZE] [--min-cc X.Y]\n"
      "                       [--max-util PCT] [--name TEXT] [--exclude IDX] [--nvlink] [--mig]\n\n"
      "This host's GPUs (NVML and CUDA, loaded at run time: none is fine). With criteria, the devices\n"
      "chosen and the reason each other one was not.\n"
      "  --all          every device, busy ones too     --cuda         CUDA's view (driver API)\n"
      "  --select N     pick N devices                  --min-memory SIZE, --min-free SIZE (40G, 512M)\n"
      "  --min-cc X.Y   compute capability at least     --max-util PCT  utilisation at most\n"
      "  --name TEXT    the GPU's name holds TEXT       --exclude IDX   never this index (repeatable)\n"
      "  --nvlink       the picked devices share NVLink --mig           MIG instances too\n",
      cli_opts_devices, NULL },
    { "model", cmd_model, "who may read a model (model set NAME --visibility ...)",
      "Usage: kestrel model set NAME --visibility all|team|private\n\nWho may read model NAME (its writers decide).\n",
      model_opts, "set" },
    { "token", cmd_token, "tokens: scoped, expiring, revocable", cli_help_token, NULL, "create list revoke" },
    { "user", cmd_user, "move a user to another team (admins)",
      "Usage: kestrel user set NAME --team TEAM\n\nMove user NAME to team TEAM (admins; TEAM \"\" takes the user out of its team).\n", user_opts, "set" },
    { "login", cmd_login, "check and store URL and token in the config file",
      "Usage: kestrel login URL [--token TOKEN]\n\nCheck that URL answers and TOKEN works, then store both in\n"
      "~/.config/kestrel/config (mode 0600).\n",
      login_opts, NULL },
    { "admin", cmd_admin, "online backup of the catalog and repository (admins)",
      "Usage: kestrel admin backup DIR | kestrel admin fsck\n\nbackup: a consistent copy of the catalog and the repository in DIR, while kestreld runs.\n"
      "fsck: check every stored chunk against its digest; damaged ones are moved aside and reported.\n",
      no_opts, "backup fsck" },
    { "version", NULL, "print client and server versions",
      "Usage: kestrel version\n\nThis client's and libkestrel's versions, then the server's (kestrel --version: the client's\n"
      "alone, no server needed).\n",
      no_opts, NULL },
    { "help", NULL, "help on a command (help CMD)",
      "Usage: kestrel help [CMD]\n\nThe commands, or one command's help (also: kestrel CMD --help).\n", no_opts, NULL },
    { "completion", NULL, "a bash or zsh completion script",
      "Usage: kestrel completion bash|zsh\n\nPrint a completion script for bash or zsh, made from the commands' own option tables:\n"
      "  bash: source <(kestrel completion bash)    (or put it in /etc/bash_completion.d/kestrel)\n"
      "  zsh:  source <(kestrel completion zsh)\n",
      no_opts, "bash zsh" },
};

const cli_command *cli_commands(size_t *n)
{
    *n = sizeof(commands) / sizeof(commands[0]);
    return commands;
}

const cli_command *cli_command_find(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

/* Optimal string alignment distance (a swap of two letters counts 1), for did-you-mean. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), d[34][34];
    if (la > 32 || lb > 32)
        return 99;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1], v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *cli_suggest_command(const char *typed)
{
    const char *best = NULL;
    size_t best_d = 3;   /* at most 2 edits away */
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        size_t d = distance(typed, commands[i].name);
        if (d < best_d) {
            best_d = d;
            best = commands[i].name;
        }
    }
    return best;
}

const char *cli_suggest_option(const cli_command *cmd, const char *typed)
{
    const char *best = NULL;
    size_t best_d = 3;
    for (const struct option *o = cmd->opts; o && o->name; o++) {
        size_t d = distance(typed, o->name);
        if (d < best_d) {
            best_d = d;
            best = o->name;
        }
    }
    return best;
}

void cli_print_usage_line(FILE *f, const cli_command *cmd)
{
    const char *h = cmd->help, *end = strstr(h, "\n\n");
    if (!strncmp(h, "Usage: ", 7))
        h += 7;
    fprintf(f, "usage: %.*s\n", (int)(end ? end - h : (long)strlen(h)), h);
}

int cli_usage_error(const char *name)
{
    const cli_command *cmd = cli_command_find(name);
    if (cmd)
        cli_print_usage_line(stderr, cmd);
    fprintf(stderr, "see 'kestrel %s --help'\n", name);
    return 2;
}

/* The option "--name" (name: len bytes) means, as getopt reads it: an exact name, else a unique
 * prefix. *hits: 1 found, 0 unknown, more: ambiguous (then the last prefix matched). */
static const struct option *find_option(const struct option *opts, const char *name, size_t len, int *hits)
{
    const struct option *match = NULL;
    *hits = 0;
    for (const struct option *o = opts; o->name; o++) {
        if (strlen(o->name) == len && !strncmp(o->name, name, len)) {
            *hits = 1;
            return o;
        }
        if (!strncmp(o->name, name, len)) {
            match = o;
            (*hits)++;
        }
    }
    return match;
}

int cli_takes_value(const cli_command *cmd, const char *a)
{
    const struct option *hit;
    size_t len;
    int hits;
    if (cmd->opts == NULL || a[0] != '-' || !a[1])
        return 0;
    if (a[1] != '-') {   /* -X: by the short letter its long option carries, when its value is apart */
        for (const struct option *o = cmd->opts; o->name; o++)
            if (o->val == a[1] && o->flag == NULL)
                return o->has_arg == required_argument && !a[2];
        return 0;
    }
    len = strcspn(a + 2, "=");
    if (a[2 + len])
        return 0;   /* --name=value */
    hit = find_option(cmd->opts, a + 2, len, &hits);
    return hits == 1 && hit->has_arg == required_argument;
}

int cli_scan_end(const cli_command *cmd, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            return i;
        if (cmd->stops_at_program && (argv[i][0] != '-' || !argv[i][1]))
            return i;
        if (cli_takes_value(cmd, argv[i]))
            i++;
    }
    return argc;
}

char **cli_normalize_options(const cli_command *cmd, int *argc, char **argv)
{
    static char pool[8192];   /* the spelled-out flags: no heap, nothing to free */
    size_t used = 0;
    int end = cli_scan_end(cmd, *argc, argv), n = 0;
    char **out;
    if (cmd->opts == NULL || (out = calloc((size_t)*argc * 2 + 1, sizeof(*out))) == NULL)
        return NULL;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        const struct option *hit;
        size_t len, need;
        int hits = 0;
        if (i == 0 || i >= end || strncmp(a, "--", 2) || !a[2]) {
            out[n++] = argv[i];
            continue;
        }
        len = strcspn(a + 2, "=");
        hit = find_option(cmd->opts, a + 2, len, &hits);
        need = hit ? strlen(hit->name) + 3 : 0;
        if (hits != 1 || (a[2 + len] == '=' && hit->has_arg != required_argument) || used + need > sizeof(pool)) {
            out[n++] = argv[i];   /* unknown, ambiguous or odd: as it came, for the check to name */
            continue;
        }
        snprintf(pool + used, need, "--%s", hit->name);
        out[n++] = pool + used;
        used += need;
        if (a[2 + len] == '=')
            out[n++] = (char *)a + 2 + len + 1;   /* --name=value: two words */
        else if (hit->has_arg == required_argument && i + 1 < *argc)
            out[n++] = argv[++i];
    }
    out[n] = NULL;
    *argc = n;
    return out;
}

int cli_check_options(const cli_command *cmd, int argc, char **argv)
{
    int end = cli_scan_end(cmd, argc, argv);
    for (int i = 1; i < end; i++) {
        const char *a = argv[i];
        const struct option *match;
        size_t len;
        int prefix_hits;
        if (strncmp(a, "--", 2) || cmd->opts == NULL)
            continue;
        len = strcspn(a + 2, "=");
        match = find_option(cmd->opts, a + 2, len, &prefix_hits);
        if (prefix_hits == 1) {
            if (match->has_arg == required_argument && !a[2 + len])
                i++;   /* its value, whatever it looks like */
            continue;
        }
        if (prefix_hits == 0) {
            char typed[64];
            const char *s;
            snprintf(typed, sizeof(typed), "%.*s", (int)(len < 63 ? len : 63), a + 2);
            s = cli_suggest_option(cmd, typed);
            fprintf(stderr, "kestrel %s: unknown option '--%s'", cmd->name, typed);
            if (s)
                fprintf(stderr, "; did you mean '--%s'?", s);
            fputc('\n', stderr);
            return cli_usage_error(cmd->name);
        }
        /* ambiguous: getopt says which ones */
    }
    return 0;
}

void cli_print_commands(FILE *f)
{
    fprintf(f, "Commands (kestrel help CMD, or kestrel CMD --help, for each one's options):\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}
