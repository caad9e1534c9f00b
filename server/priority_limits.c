/* server/priority_limits.c - the highest priority class each user may give a job (see priority_limits.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kestrel.h>
#include "priority_limits.h"

const char *kd_priority_name(int cls)
{
    return cls == KESTREL_PRIORITY_URGENT ? "urgent" : cls == KESTREL_PRIORITY_HIGH ? "high" : "normal";
}

static int class_of(const char *s)
{
    return !strcmp(s, "normal") ? KESTREL_PRIORITY_NORMAL : !strcmp(s, "high") ? KESTREL_PRIORITY_HIGH
         : !strcmp(s, "urgent") ? KESTREL_PRIORITY_URGENT : 0;
}

int kd_priority_limits_parse(kd_priority_limits *l, const char *arg)
{
    const char *eq = strchr(arg, '='), *cls_s = eq ? eq + 1 : arg;
    int cls = class_of(cls_s), is_team = !strncmp(arg, "team:", 5);
    size_t len;
    kd_priority_limit *grown;
    if (cls == 0) {
        fprintf(stderr, "kestreld: --max-priority: the class must be normal, high or urgent, got '%s'\n", cls_s);
        return -1;
    }
    if (eq == NULL) {
        l->everyone = cls;
        return 0;
    }
    len = (size_t)(eq - arg);
    if ((!is_team && strncmp(arg, "user:", 5)) || len <= 5 || len - 5 >= 128) {
        fprintf(stderr, "kestreld: --max-priority takes CLASS, team:NAME=CLASS or user:NAME=CLASS, got '%s'\n", arg);
        return -1;
    }
    for (size_t i = 0; i < l->n; i++)   /* named again: the later one holds */
        if (l->list[i].is_team == is_team && strlen(l->list[i].name) == len - 5 &&
            !strncmp(l->list[i].name, arg + 5, len - 5)) {
            l->list[i].max_class = cls;
            return 0;
        }
    if ((grown = realloc(l->list, (l->n + 1) * sizeof(*grown))) == NULL) {
        fprintf(stderr, "kestreld: out of memory\n");
        return -1;
    }
    l->list = grown;
    if ((grown[l->n].name = strndup(arg + 5, len - 5)) == NULL) {
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

int kd_priority_limit_of(const kd_priority_limits *l, const kd_principal *who, char *from, size_t n)
{
    const kd_priority_limit *team = NULL;
    if (who->owner_admin) {
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
