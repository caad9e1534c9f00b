/* cli/output.c - the output format: -o table|wide|json|yaml anywhere on the line (before "--"),
 * for every command. yaml is the command's JSON, converted by libyaml's emitter: one document, or
 * a document a line for the commands that print JSON lines (logs, logs --grep). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <yaml.h>
#include "cli.h"

static int format_of(const char *v, cli_ctx *ctx)
{
    int wide = !strcmp(v, "wide"), json = !strcmp(v, "json"), yaml = !strcmp(v, "yaml");
    if (!wide && !json && !yaml && strcmp(v, "table") && strcmp(v, "text"))
        return -1;
    ctx->wide = wide;
    ctx->json = json || yaml;   /* yaml: the command prints JSON, converted on the way out */
    ctx->yaml = yaml;
    return 0;
}

int cli_output_flag(cli_ctx *ctx, const char *value)
{
    if (format_of(value, ctx) < 0) {
        fprintf(stderr, "kestrel: -o takes table, wide, json or yaml, not '%s'\n", value);
        return 2;
    }
    return 0;
}

int cli_take_output_flags(cli_ctx *ctx, const cli_command *command, int *argc, char **argv)
{
    int out = 1, pull = !strcmp(command->name, "pull"), i, end = cli_scan_end(command, *argc, argv);
    for (i = 1; i < end; i++) {
        const char *v = NULL;
        int used = 1;
        if (strcmp(argv[i], "-o") && strcmp(argv[i], "--output") && cli_takes_value(command, argv[i])) {
            argv[out++] = argv[i];   /* an option and its value ("--name -otter"): not ours */
            if (i + 1 < end)
                argv[out++] = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            v = i + 1 < *argc ? argv[i + 1] : NULL;
            used = 2;
        } else if (!strncmp(argv[i], "--output=", 9)) {
            v = argv[i] + 9;
        } else if (!strncmp(argv[i], "-o", 2) && argv[i][2]) {
            v = argv[i] + 2;
        }
        if (v == NULL || (pull && format_of(v, &(cli_ctx){ 0 }) < 0)) {
            /* pull -o PATH: the destination's old spelling, left to pull (which says the new one) */
            if (v == NULL && used == 2) {
                fprintf(stderr, "kestrel: -o needs a format: table, wide, json or yaml\n");
                return 2;
            }
            for (int k = 0; k < used && i < *argc; k++)
                argv[out++] = argv[i + k];
            i += used - 1;
            continue;
        }
        if (cli_output_flag(ctx, v) != 0)
            return 2;
        i += used - 1;
    }
    for (; i < *argc; i++)
        argv[out++] = argv[i];
    argv[out] = NULL;
    *argc = out;
    return 0;
}

/* Percent-encode a query value onto f. */
static void put_query_value(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-._~", c))
            fputc(c, f);
        else
            fprintf(f, "%%%02X", c);
    }
}

int cli_api_path(char *out, size_t n, const char *path, const char *const *query)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int first = 1, rc = 0;
    if (f == NULL)
        return -1;
    fputs(path, f);
    for (size_t i = 0; query && query[i]; i += 2)
        if (query[i + 1] && *query[i + 1]) {
            fprintf(f, "%c%s=", first ? '?' : '&', query[i]);
            put_query_value(f, query[i + 1]);
            first = 0;
        }
    fclose(f);
    if (buf == NULL || len >= n)
        rc = -1;
    else
        memcpy(out, buf, len + 1);
    free(buf);
    return rc;
}

/* The server's JSON, parsed (one value, nothing after it) and written again, each control character
 * and bidirectional mark as \uXXXX: a hostile server's reply went to the terminal as it came (OSC 52
 * wrote the clipboard, ESC[2J cleared the screen, bytes trailed the value: a hostile test). cJSON
 * escapes C0; DEL, C1 and the marks (cli_control_len) are escaped here. */
int cli_put_json(const char *text, size_t len)
{
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    char *out = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    while (out && end < text + len && *end && strchr(" \t\r\n", *end))
        end++;
    if (out == NULL || end != text + len) {
        cJSON_free(out);
        return -1;
    }
    for (const unsigned char *p = (const unsigned char *)out, *stop = p + strlen(out); p < stop;) {
        size_t n = cli_control_len(p, (size_t)(stop - p));
        if (n)
            printf("\\u%04x", cli_control_code(p, n));
        else
            putchar(*p);
        p += n ? n : 1;
    }
    putchar('\n');
    cJSON_free(out);
    return 0;
}

int cli_print_api_json(cli_ctx *ctx, const char *path)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc = kestrel_client_get_json(&b, ctx->client, path);
    if (rc == KESTREL_EUNSUPPORTED)   /* a file:// repository: no server to ask */
        return 1;
    if (rc < 0)
        return cli_fail(path, rc) + 1;   /* 2: said, and the caller returns 1 */
    rc = cli_put_json(b.ptr, b.size) < 0 ? 2 : 0;
    kestrel_buf_dispose(&b);
    if (rc)
        fprintf(stderr, "kestrel: %s: the server's reply is not one JSON value\n", path);
    return rc;
}

/* A plain scalar when YAML reads it back as the same string; else double-quoted. */
static yaml_scalar_style_t style_for(const char *s)
{
    static const char *const words[] = { "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~", NULL };
    if (!*s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == '/'))
        return YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_./-@", *p)))
            return YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    for (size_t i = 0; words[i]; i++)
        if (!strcasecmp(s, words[i]))
            return YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    return YAML_PLAIN_SCALAR_STYLE;
}

static int scalar(yaml_emitter_t *em, const char *s, yaml_scalar_style_t style)
{
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1, style);
    return yaml_emitter_emit(em, &ev) ? 0 : -1;
}

static int emit(yaml_emitter_t *em, const cJSON *v)
{
    yaml_event_t ev;
    const cJSON *c;
    if (cJSON_IsObject(v)) {
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        if (!yaml_emitter_emit(em, &ev))
            return -1;
        cJSON_ArrayForEach(c, v)
            if (scalar(em, c->string, style_for(c->string)) < 0 || emit(em, c) < 0)
                return -1;
        yaml_mapping_end_event_initialize(&ev);
        return yaml_emitter_emit(em, &ev) ? 0 : -1;
    }
    if (cJSON_IsArray(v)) {
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        if (!yaml_emitter_emit(em, &ev))
            return -1;
        cJSON_ArrayForEach(c, v)
            if (emit(em, c) < 0)
                return -1;
        yaml_sequence_end_event_initialize(&ev);
        return yaml_emitter_emit(em, &ev) ? 0 : -1;
    }
    if (cJSON_IsString(v))
        return scalar(em, v->valuestring, style_for(v->valuestring));
    if (cJSON_IsNull(v))
        return scalar(em, "null", YAML_PLAIN_SCALAR_STYLE);
    if (cJSON_IsBool(v))
        return scalar(em, cJSON_IsTrue(v) ? "true" : "false", YAML_PLAIN_SCALAR_STYLE);
    {
        char *num = cJSON_PrintUnformatted(v);
        int rc = num ? scalar(em, num, YAML_PLAIN_SCALAR_STYLE) : -1;
        cJSON_free(num);
        return rc;
    }
}

static int write_out(void *data, unsigned char *buf, size_t size)
{
    return fwrite(buf, 1, size, (FILE *)data) == size;
}

/* JSON text (one value, or one a line) to YAML documents on f. */
static int json_to_yaml(const char *text, FILE *f)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    const char *p = text, *end = NULL;
    int rc = 0;
    if (!yaml_emitter_initialize(&em))
        return -1;
    yaml_emitter_set_output(&em, write_out, f);
    yaml_emitter_set_unicode(&em, 1);
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    rc = yaml_emitter_emit(&em, &ev) ? 0 : -1;
    while (rc == 0) {
        cJSON *doc;
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
            p++;
        if (!*p)
            break;
        if ((doc = cJSON_ParseWithOpts(p, &end, 0)) == NULL) {
            rc = -1;
            break;
        }
        yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 0);
        rc = yaml_emitter_emit(&em, &ev) ? emit(&em, doc) : -1;
        yaml_document_end_event_initialize(&ev, 1);
        if (rc == 0 && !yaml_emitter_emit(&em, &ev))
            rc = -1;
        cJSON_Delete(doc);
        p = end;
    }
    if (rc == 0) {
        yaml_stream_end_event_initialize(&ev);
        rc = yaml_emitter_emit(&em, &ev) ? 0 : -1;
    }
    yaml_emitter_delete(&em);
    return rc;
}

int cli_run_as_yaml(cli_ctx *ctx, const cli_command *cmd, int argc, char **argv)
{
    FILE *cap = tmpfile();
    int saved = dup(STDOUT_FILENO), rc;
    char *text = NULL;
    long len;
    if (cap == NULL || saved < 0) {
        if (cap)
            fclose(cap);
        return cmd->run(ctx, argc, argv);
    }
    fflush(stdout);
    dup2(fileno(cap), STDOUT_FILENO);
    rc = cmd->run(ctx, argc, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    len = ftell(cap);
    if (len > 0 && (text = malloc((size_t)len + 1)) != NULL) {
        char *yaml = NULL;
        size_t ylen = 0;
        FILE *y = open_memstream(&yaml, &ylen);
        rewind(cap);
        text[fread(text, 1, (size_t)len, cap)] = '\0';
        if (y && json_to_yaml(text, y) == 0 && fclose(y) == 0) {
            fwrite(yaml, 1, ylen, stdout);
        } else {   /* not JSON (a command with none): as it came */
            if (y)
                fclose(y);
            fputs(text, stdout);
        }
        free(yaml);
    }
    free(text);
    fclose(cap);
    return rc;
}
