/* server/envs_decl.c - kestreld --environment NAME=FILE: a standard environment's name and the
 * requirements file's text, read once at start (envs.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "envs.h"
#include "internal.h"

int kd_envs_declare(kd_config *cfg, const char *arg)
{
    const char *eq = strchr(arg, '=');
    char name[80];
    kestrel_buf text = KESTREL_BUF_INIT;
    kd_env_decl *grown;
    FILE *f;
    size_t n;
    char buf[8192];
    if (eq == NULL || eq == arg || (size_t)(eq - arg) >= 65) {
        fprintf(stderr, "kestreld: --environment takes NAME=FILE (NAME up to 64 bytes), got '%s'\n", arg);
        return -1;
    }
    snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
    if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9'))) {
        fprintf(stderr, "kestreld: --environment %s: a name starts with a lowercase letter or digit\n", name);
        return -1;
    }
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.')) {
            fprintf(stderr, "kestreld: --environment %s: names are lowercase [a-z0-9._-]\n", name);
            return -1;
        }
    for (size_t i = 0; i < cfg->nenvs; i++)
        if (!strcmp(cfg->envs[i].name, name)) {
            fprintf(stderr, "kestreld: --environment %s is declared twice\n", name);
            return -1;
        }
    if ((f = fopen(eq + 1, "r")) == NULL) {
        fprintf(stderr, "kestreld: --environment %s: cannot read %s: %s\n", name, eq + 1, strerror(errno));
        return -1;
    }
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0 && text.size <= 64 * 1024)
        kestrel__buf_put(&text, buf, n);
    fclose(f);
    if (text.size == 0 || text.size > 64 * 1024 || !kestrel__utf8_valid(text.ptr, text.size) || memchr(text.ptr, 0, text.size)) {
        fprintf(stderr, "kestreld: --environment %s: %s must be a requirements file of text, 1 byte to 64 KiB\n", name,
                eq + 1);
        kestrel_buf_dispose(&text);
        return -1;
    }
    if ((grown = realloc(cfg->envs, (cfg->nenvs + 1) * sizeof(*grown))) == NULL) {
        kestrel_buf_dispose(&text);
        return -1;
    }
    cfg->envs = grown;
    cfg->envs[cfg->nenvs].name = strdup(name);
    cfg->envs[cfg->nenvs].requirements = text.ptr;   /* NUL-terminated by kestrel_buf */
    cfg->nenvs++;
    return 0;
}
