/* cli/cli.h - the kestrel command-line tool (uses only include/kestrel.h). */
#ifndef KESTREL_CLI_H
#define KESTREL_CLI_H

#include <stdio.h>
#include <kestrel.h>

typedef struct {
    const char *url;
    const char *token;
    int json;                 /* -o json */
    int wide;                 /* -o wide: tables with more columns */
    int yaml;                 /* -o yaml: json set too; main converts the command's JSON */
    kestrel_client *client;
} cli_ctx;

/* Print the library's last error for a failed call; returns 1 (the exit code). */
int cli_fail(const char *what, int rc);
int cli_parse_size(const char *v, int64_t *out);
/* "30d", "12h", "90m", "3600" -> seconds; -1 on junk. */
int64_t cli_parse_duration(const char *v);
/* kestrel jobs as a table (jobs_table.c); "3m 05s" */
void cli_print_jobs_table(cli_ctx *ctx, kestrel_job_page *page, int wide);
void cli_fmt_duration(char *out, size_t n, int64_t ms);
/* table.c: a terminal's columns (0 when stdout is not one); s in a cell of width columns appended at
 * *at (UTF-8 kept whole, cut with '~' when cut, padded); a table line, fitted to a terminal's width
 * and whole when piped; cli_row: the same, printf-style (a trailing newline is dropped). */
int cli_term_columns(void);
void cli_cell(char *out, size_t n, size_t *at, const char *s, int width, int cut);
void cli_put_line(const char *line);
void cli_row(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* metrics_view.c: kestrel metrics ID pivoted by step, --plot in braille; kestrel compare */
void cli_metrics_pivot(const kestrel_metric_list *m);
void cli_metrics_plot(const kestrel_metric_list *m);
int cmd_compare(cli_ctx *ctx, int argc, char **argv);
/* Print a job as the API's JSON; wait for a job's end and exit like `kestrel wait`. */
int cli_print_job_json(const kestrel_job *job);
int cli_wait_exit(cli_ctx *ctx, int64_t id, long timeout_ms);
/* Parse a positive job id; prints a usage error and returns -1 on junk. */
int cli_job_id(const char *s, int64_t *out);
/* The server's URL and the token to use (owned copies; *token may be NULL): --url/--token, then
 * KESTREL_URL/KESTREL_TOKEN, then the config file. -1 (said on stderr) when no URL is known. */
int cli_resolve(const cli_ctx *ctx, char **url, char **token);
/* Connect (lazily) with the resolved URL and token. */
int cli_connect(cli_ctx *ctx);
/* logs_json.c: kestrel logs -o json, the API's LogLine objects one a line from its pages (stream
 * "STDOUT"/"STDERR" or NULL: all; since_ms, tail: 0 for none; rank: "[rank R] " or ""); --grep: the API's LogSearchResult
 * pages, one a line (state: the --state word or NULL). Exit codes as kestrel logs. */
int cli_logs_json(cli_ctx *ctx, int64_t id, int64_t offset, int follow, const char *stream, int64_t since_ms,
                  long tail, const char *rank);
int cli_log_search_json(cli_ctx *ctx, const char *pattern, const kestrel_log_search_options *o, const char *state);
/* Write s as a JSON string literal. */
void cli_json_string(FILE *f, const char *s);

/* safe_out.c: the bytes of a control character (C0, DEL, C1) or bidirectional mark at p (left bytes
 * there), else 0; s written to f with each of them as a visible escape (^[, <U+202E>; tab kept);
 * the human formats' stdout through the same filter (tab and newline kept), and back as it was
 * (logs --raw). */
size_t cli_control_len(const unsigned char *p, size_t left);
/* The code point of the control sequence p[0..len) cli_control_len found. */
unsigned cli_control_code(const unsigned char *p, size_t len);
/* JSON text (len bytes) checked to be one value with nothing after it, written again to stdout with
 * each control character and bidirectional mark as \uXXXX: 0, or -1 when it is no JSON (output.c). */
int cli_put_json(const char *text, size_t len);
void cli_fputs_safe(FILE *f, const char *s);
void cli_safe_stdout(void);
void cli_raw_stdout(void);
/* The command table (registry.c): help, usage lines, did-you-mean, completion and man page come
 * from it. run is NULL for the commands main.c answers itself (version, help, completion). */
struct option;
typedef struct {
    const char *name;
    int (*run)(cli_ctx *ctx, int argc, char **argv);
    const char *summary;            /* one line, for the command list */
    const char *help;               /* "Usage: kestrel NAME ...\n\n" then what it does and its options */
    const struct option *opts;      /* its long options (NULL: checked by the command itself) */
    const char *subs;               /* its subcommands, space separated, or NULL */
    int stops_at_program;           /* its first plain word starts the job's argv (submit) */
} cli_command;
const cli_command *cli_commands(size_t *n);
const cli_command *cli_command_find(const char *name);
/* The nearest command or option name (at most 2 edits away), or NULL. */
const char *cli_suggest_command(const char *typed);
const char *cli_suggest_option(const cli_command *cmd, const char *typed);
void cli_print_usage_line(FILE *f, const cli_command *cmd);
void cli_print_commands(FILE *f);
/* After a usage error of command name: its usage line and "see 'kestrel NAME --help'"; returns 2. */
int cli_usage_error(const char *name);
/* Every --long option before "--" must be one of cmd's (or a unique prefix): else say which it
 * may have meant, with the usage line, and return 2. */
int cli_check_options(const cli_command *cmd, int argc, char **argv);
/* Where our own flags end on cmd's line: at "--", or for submit at its program (its first plain word
 * that is not an option's value). The pre-scans (help, -o, the option check) stop there. */
int cli_scan_end(const cli_command *cmd, int argc, char **argv);
/* The line with every --flag spelled out in full and --flag=value as two words (the commands that
 * read their arguments by hand take both forms then). A new argv (free it; its strings are argv's
 * or static), or NULL: use argv as it is. */
char **cli_normalize_options(const cli_command *cmd, int *argc, char **argv);
/* 1 when the option argv[i] takes the next word as its value (by cmd's option table). */
int cli_takes_value(const cli_command *cmd, const char *arg);
/* output.c: -o FORMAT anywhere before "--" (taken out of argv; pull keeps a -o PATH for itself);
 * -o yaml runs the command for JSON and prints it as YAML. */
int cli_output_flag(cli_ctx *ctx, const char *value);
int cli_take_output_flags(cli_ctx *ctx, const cli_command *command, int *argc, char **argv);
int cli_run_as_yaml(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv);
/* -o json of a read command: the server's own reply to GET path (kestrel -o json X | jq is curl's
 * JSON). 0 printed; 1 no server to ask (a file:// repository: the caller prints its own); 2 failed
 * (said on stderr). cli_api_path: path plus "?k=v&..." of the non-empty pairs of query (NULL-ended
 * key, value list), values percent-encoded; -1 when it does not fit n. */
int cli_print_api_json(cli_ctx *ctx, const char *path);
int cli_api_path(char *out, size_t n, const char *path, const char *const *query);
/* docs.c: bash and zsh completion, and the man page, from the table. */
void cli_completion_bash(FILE *f);
void cli_completion_zsh(FILE *f);
void cli_man_page(FILE *f);

int cmd_submit(cli_ctx *ctx, int argc, char **argv);
int cmd_rerun(cli_ctx *ctx, int argc, char **argv);
int cmd_envs(cli_ctx *ctx, int argc, char **argv);
int cmd_jobs(cli_ctx *ctx, int argc, char **argv);
int cmd_status(cli_ctx *ctx, int argc, char **argv);
int cmd_logs(cli_ctx *ctx, int argc, char **argv);
int cmd_wait(cli_ctx *ctx, int argc, char **argv);
int cmd_cancel(cli_ctx *ctx, int argc, char **argv);
int cmd_explain(cli_ctx *ctx, int argc, char **argv);
int cmd_queue(cli_ctx *ctx, int argc, char **argv);
int cmd_job(cli_ctx *ctx, int argc, char **argv);
int cmd_ack(cli_ctx *ctx, int argc, char **argv);
int cmd_metrics(cli_ctx *ctx, int argc, char **argv);
int cmd_push(cli_ctx *ctx, int argc, char **argv);
int cmd_pull(cli_ctx *ctx, int argc, char **argv);
int cmd_models(cli_ctx *ctx, int argc, char **argv);
int cmd_alias(cli_ctx *ctx, int argc, char **argv);
int cmd_rm(cli_ctx *ctx, int argc, char **argv);
int cmd_gc(cli_ctx *ctx, int argc, char **argv);
int cmd_devices(cli_ctx *ctx, int argc, char **argv);
int cmd_nodes(cli_ctx *ctx, int argc, char **argv);
int cmd_token(cli_ctx *ctx, int argc, char **argv);
int cmd_user(cli_ctx *ctx, int argc, char **argv);
int cmd_login(cli_ctx *ctx, int argc, char **argv);
int cmd_model(cli_ctx *ctx, int argc, char **argv);
int cmd_admin(cli_ctx *ctx, int argc, char **argv);
int cmd_alerts(cli_ctx *ctx, int argc, char **argv);
int cmd_ui(cli_ctx *ctx, int argc, char **argv);
/* kestrel metrics --gpu ID */
int cli_print_gpu_telemetry(cli_ctx *ctx, int64_t id);

#endif
