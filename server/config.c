/* server/config.c - kestreld --config FILE: the same keys as the long flags, one per line.
 *
 *   # comment
 *   listen = 0.0.0.0
 *   node = a:gpus=8,type=a100        (repeatable keys may appear several times)
 *   tls-cert = /etc/kestrel/cert.pem
 *   single-flag-without-value        (e.g. a boolean flag; none yet)
 *
 * The file's settings become flags placed before the command line's, so a flag given on the
 * command line wins: a scalar is overridden, and a repeatable key given there replaces all of
 * the file's entries for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"

#define MAX_LINE 4096
#define MAX_ENTRIES 1024

static char **merged;   /* the settings point into it for the process's life */

static char *trim(char *s)
{
    char *e;
    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* The long option named on the command line by arg ("--name", "--name=v"), or NULL. */
static const char *flag_name(const char *arg, size_t *len)
{
    if (strncmp(arg, "--", 2) || !arg[2])
        return NULL;
    *len = strcspn(arg + 2, "=");
    return arg + 2;
}

/* The option a command-line flag of len bytes names, as getopt_long reads it: its exact name, else
 * the one option it abbreviates (ambiguous: none, and getopt_long refuses it). */
static const struct option *resolve(const struct option *opts, const char *f, size_t len)
{
    const struct option *found = NULL;
    int many = 0;
    for (const struct option *o = opts; o->name; o++) {
        size_t l = strlen(o->name);
        if (l < len || strncmp(o->name, f, len))
            continue;
        if (l == len)
            return o;
        many += found != NULL;
        found = o;
    }
    return many ? NULL : found;
}

static int on_command_line(int argc, char **argv, const struct option *opts, const char *key)
{
    for (int i = 1; i < argc; i++) {
        size_t n;
        const char *f = flag_name(argv[i], &n);
        const struct option *o;
        if (!strcmp(argv[i], "--"))
            break;
        if (f && (o = resolve(opts, f, n)) != NULL && !strcmp(o->name, key))
            return 1;
    }
    return 0;
}

/* The file --config names (abbreviated too, as getopt_long takes it: "--conf F" read no file, a
 * review found), or NULL. */
static const char *config_path(int argc, char **argv, const struct option *opts)
{
    for (int i = 1; i < argc; i++) {
        size_t n;
        const char *f = flag_name(argv[i], &n);
        const struct option *o;
        if (!strcmp(argv[i], "--"))
            break;
        if (f == NULL || (o = resolve(opts, f, n)) == NULL || strcmp(o->name, "config"))
            continue;
        return f[n] == '=' ? f + n + 1 : i + 1 < argc ? argv[i + 1] : NULL;
    }
    return NULL;
}

int kd_config_merge(int argc, char **argv, const struct option *opts, int *argc_out, char ***argv_out)
{
    const char *path = config_path(argc, argv, opts);
    char line[MAX_LINE], **out, said[256] = { 0 };   /* said[i]: opts[i] named on the command line */
    int n = 0, lineno = 0;
    FILE *f;
    *argc_out = argc;
    *argv_out = argv;
    if (path == NULL)
        return 0;
    if ((f = fopen(path, "r")) == NULL) {
        fprintf(stderr, "kestreld: --config %s: %s\n", path, strerror(errno));
        return -1;
    }
    if ((out = calloc((size_t)argc + MAX_ENTRIES + 1, sizeof(*out))) == NULL) {
        fclose(f);
        return -1;
    }
    out[n++] = argv[0];
    while (fgets(line, sizeof(line), f)) {
        char *key, *eq, *val = NULL, *arg;
        const struct option *o;
        lineno++;
        if (strlen(line) == sizeof(line) - 1 && line[sizeof(line) - 2] != '\n') {
            fprintf(stderr, "kestreld: %s:%d: line longer than %d bytes\n", path, lineno, MAX_LINE - 2);
            goto fail;
        }
        key = trim(line);
        if (!*key || *key == '#')
            continue;
        if ((eq = strchr(key, '=')) != NULL) {
            *eq = '\0';
            val = trim(eq + 1);
            key = trim(key);
        }
        for (o = opts; o->name && strcmp(o->name, key); o++)
            ;
        if (!o->name || !strcmp(key, "config") || !strcmp(key, "check-config") || !strcmp(key, "help") ||
            !strcmp(key, "version")) {
            fprintf(stderr, "kestreld: %s:%d: unknown setting '%s' (the keys are kestreld's long flags, "
                            "see kestreld --help)\n", path, lineno, key);
            goto fail;
        }
        if ((o->has_arg == required_argument) != (val != NULL && *val)) {
            fprintf(stderr, "kestreld: %s:%d: '%s' %s\n", path, lineno, key,
                    o->has_arg == required_argument ? "needs '= VALUE'" : "takes no value");
            goto fail;
        }
        if (on_command_line(argc, argv, opts, key)) {   /* the command line wins: said once a key */
            if (o - opts >= (long)sizeof(said) || !said[o - opts])
                fprintf(stderr, "kestreld: %s:%d: '%s' is given on the command line too, which replaces every '%s' "
                                "of this file\n", path, lineno, key, key);
            if (o - opts < (long)sizeof(said))
                said[o - opts] = 1;
            continue;
        }
        if (n >= MAX_ENTRIES) {
            fprintf(stderr, "kestreld: %s: more than %d settings\n", path, MAX_ENTRIES);
            goto fail;
        }
        if ((val ? asprintf(&arg, "--%s=%s", key, val) : asprintf(&arg, "--%s", key)) < 0)
            goto fail;
        out[n++] = arg;   /* lives as long as the process: the parsed settings point into it */
    }
    fclose(f);
    for (int i = 1; i < argc; i++)
        out[n++] = argv[i];
    out[n] = NULL;
    *argc_out = n;
    *argv_out = merged = out;
    return 0;
fail:
    fclose(f);
    for (int i = 1; i < n; i++)
        free(out[i]);
    free(out);
    return -1;
}
