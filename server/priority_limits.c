/* server/priority_limits.c - the highest priority class each user may give a job (see priority_limits.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kestrel.h>
#include "priority_limits.h"

int kd_priority_limits_parse(kd_priority_limits *l, const char *arg)
{
    const char *eq = strrchr(arg, '='), *cls_s = eq ? eq + 1 : arg;   /* a name may hold '=', a class not */
    int named = !strncmp(arg, "user:", 5) || !strncmp(arg, "team:", 5), is_team = !strncmp(arg, "team:", 5), cls;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    char name[65];
    kd_priority_limit *grown;
    if (named != (eq != NULL)) {
        fprintf(stderr, "kestreld: --max-priority takes CLASS, team:NAME=CLASS or user:NAME=CLASS, got '%.200s'\n", arg);
        return -1;
    }
    if (kestrel_priority_parse(&cls, cls_s) < 0) {   /* the library's names, as --priority takes them */
        kestrel_error_clear();
        fprintf(stderr, "kestreld: --max-priority: the class must be normal, high or urgent, got '%.200s'\n", cls_s);
        return -1;
    }
    if (!named) {
        l->everyone = cls;
        return 0;
    }
    /* a name as users and teams are named (kd_name_ok): one that could never match is an error */
    snprintf(name, sizeof(name), "%.*s", (int)(len - 5 < sizeof(name) ? len - 5 : sizeof(name) - 1), arg + 5);
    if (len - 5 >= sizeof(name) || !kd_name_ok(name)) {
        fprintf(stderr, "kestreld: --max-priority: a %s name is 1..64 printable bytes without spaces or '/' (not "
                        "env-builder...), got "
                        "'%.*s'\n", is_team ? "team" : "user", (int)(len - 5 > 200 ? 200 : len - 5), arg + 5);
        return -1;
    }
    for (size_t i = 0; i < l->n; i++)   /* named again: the later one holds */
        if (l->list[i].is_team == is_team && !strcmp(l->list[i].name, name)) {
            l->list[i].max_class = cls;
            return 0;
        }
    if ((grown = realloc(l->list, (l->n + 1) * sizeof(*grown))) == NULL) {
        fprintf(stderr, "kestreld: out of memory\n");
        return -1;
    }
    l->list = grown;
    if ((grown[l->n].name = strdup(name)) == NULL) {
        fprintf(stderr, "kestreld: out of memory\n");
        return -1;
    }
    grown[l->n].is_team = is_team;
    grown[l->n++].max_class = cls;
    return 0;
}

void kd_priority_limits_free(kd_priority_limits *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->list[i].name);
    free(l->list);
    l->list = NULL;
    l->n = 0;
}

void kd_priority_limits_describe(const kd_priority_limits *l, char *out, size_t n)
{
    size_t at = (size_t)snprintf(out, n, "up to %s for everyone", kd_priority_name(l->everyone ? l->everyone
                                                                                              : KESTREL_PRIORITY_URGENT));
    for (size_t i = 0; i < l->n && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, ", %s for %s %s", kd_priority_name(l->list[i].max_class),
                               l->list[i].is_team ? "team" : "user", l->list[i].name);
    if (at < n)
        snprintf(out + at, n - at, " (admins: any)");
}

int kd_priority_limit_of(const kd_priority_limits *l, const kd_principal *who, char *from, size_t n)
{
    const kd_priority_limit *team = NULL;
    if (who->is_admin) {   /* an admin with an admin-scoped token, as everywhere: its write token is a user's */
        snprintf(from, n, "admin");
        return KESTREL_PRIORITY_URGENT;
    }
    for (size_t i = 0; i < l->n; i++) {
        if (!l->list[i].is_team && !strcmp(l->list[i].name, who->user)) {
            snprintf(from, n, "user %s", who->user);
            return l->list[i].max_class;
        }
        if (l->list[i].is_team && who->team[0] && !strcmp(l->list[i].name, who->team))
            team = &l->list[i];
    }
    if (team) {
        snprintf(from, n, "team %s", team->name);
        return team->max_class;
    }
    snprintf(from, n, "everyone");
    return l->everyone ? l->everyone : KESTREL_PRIORITY_URGENT;
}
