/* lib/job/job_policy.c - what a job spec says about failure: log policies, retries, excluded nodes. */
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include "job_priv.h"

static const char *const actions[] = { "label", "alert", "no-retry", "exclude-node", "retry-larger", NULL };

int kestrel__log_policy_action_valid(const char *a)
{
    for (size_t i = 0; actions[i]; i++)
        if (!strcmp(a, actions[i]))
            return 1;
    return 0;
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.'))
            return 0;
    return 1;
}

int kestrel__regex_bounded(const char *re)
{
    double product = 1;
    for (const char *p = re; *p; p++) {
        if (*p == '\\' && p[1]) {
            if (p[1] >= '1' && p[1] <= '9')
                return kestrel__error_set(KESTREL_EINVALID, "back-references (\\%c) are not allowed: their matching "
                                          "cost has no bound", p[1]);
            p++;
        } else if (*p == '{') {
            char *end;
            long lo = strtol(p + 1, &end, 10), hi = lo;
            if (*end == ',')
                hi = end[1] == '}' ? lo : strtol(end + 1, &end, 10);
            if (lo > KESTREL__REGEX_REPEAT_MAX || hi > KESTREL__REGEX_REPEAT_MAX)
                return kestrel__error_set(KESTREL_EINVALID, "a repetition bound is at most %d",
                                          KESTREL__REGEX_REPEAT_MAX);
            if ((product *= (double)(hi > 1 ? hi : 1)) > KESTREL__REGEX_REPEAT_MAX)
                return kestrel__error_set(KESTREL_EINVALID, "repetition bounds multiply past %d (nested {m,n} grow "
                                          "the compiled regex by their product)", KESTREL__REGEX_REPEAT_MAX);
        }
    }
    return 0;
}

int kestrel__log_policy_validate(const char *name, const char *pattern, char *const *acts, size_t nacts)
{
    regex_t re;
    int err;
    if (!name_ok(name))
        return kestrel__error_set(KESTREL_EINVALID, "log policy name '%.64s': 1..64 of A-Z a-z 0-9 - _ .", name);
    if (!pattern[0] || strlen(pattern) > KESTREL__POLICY_PATTERN_MAX || !kestrel__text_is_clean(pattern, KESTREL__POLICY_PATTERN_MAX))
        return kestrel__error_set(KESTREL_EINVALID, "log policy %s: the pattern must be 1..%d printable bytes", name,
                                  KESTREL__POLICY_PATTERN_MAX);
    if (kestrel__regex_bounded(pattern) < 0)
        return kestrel__error_set(KESTREL_EINVALID, "log policy %s: %s", name, kestrel_error_last()->message);
    if ((err = regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB)) != 0) {
        char why[160];
        regerror(err, &re, why, sizeof(why));
        return kestrel__error_set(KESTREL_EINVALID, "log policy %s: not a POSIX extended regex: %s", name, why);
    }
    regfree(&re);
    if (nacts == 0 || nacts > 5)
        return kestrel__error_set(KESTREL_EINVALID, "log policy %s: 1..5 actions (label, alert, no-retry, "
                                  "exclude-node, retry-larger)", name);
    for (size_t i = 0; i < nacts; i++)
        if (!kestrel__log_policy_action_valid(acts[i]))
            return kestrel__error_set(KESTREL_EINVALID, "log policy %s: unknown action '%.32s' (label, alert, "
                                      "no-retry, exclude-node, retry-larger)", name, acts[i]);
    return 0;
}

int kestrel__job_spec_validate_failure(const Kestrel__V1__JobSpec *s)
{
    if (s->n_log_policies > KESTREL__POLICIES_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "field 'log_policies': at most %d", KESTREL__POLICIES_MAX);
    for (size_t i = 0; i < s->n_log_policies; i++) {
        const Kestrel__V1__LogPolicy *p = s->log_policies[i];
        int rc = kestrel__log_policy_validate(p->name, p->pattern, p->actions, p->n_actions);
        if (rc < 0)
            return rc;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(s->log_policies[k]->name, p->name))
                return kestrel__error_set(KESTREL_EINVALID, "field 'log_policies': %s twice", p->name);
    }
    if (s->max_retries < 0 || s->max_retries > 100)
        return kestrel__error_set(KESTREL_EINVALID, "field 'max_retries': 0..100");
    if (s->n_exclude_nodes > 64)
        return kestrel__error_set(KESTREL_ETOOLARGE, "field 'exclude_nodes': at most 64 nodes");
    for (size_t i = 0; i < s->n_exclude_nodes; i++)
        if (!s->exclude_nodes[i][0] || !kestrel__text_is_clean(s->exclude_nodes[i], 128))
            return kestrel__error_set(KESTREL_EINVALID, "field 'exclude_nodes': node names are 1..128 printable bytes");
    return 0;
}

int kestrel_job_spec_add_log_policy(kestrel_job_spec *s, const char *name, const char *pattern, const char *acts)
{
    Kestrel__V1__LogPolicy *p, **grown;
    char *copy, *save = NULL;
    int rc;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (name == NULL || pattern == NULL || acts == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "name, pattern or actions is NULL");
    if (s->pb->n_log_policies >= KESTREL__POLICIES_MAX)
        return kestrel__error_set(KESTREL_ETOOLARGE, "at most %d log policies", KESTREL__POLICIES_MAX);
    if ((p = malloc(sizeof(*p))) == NULL || (copy = kestrel__strdup(acts)) == NULL) {
        free(p);
        return kestrel__error_oom();
    }
    kestrel__v1__log_policy__init(p);
    rc = kestrel__wire_set_string(&p->name, name);
    if (rc == 0)
        rc = kestrel__wire_set_string(&p->pattern, pattern);
    for (char *a = strtok_r(copy, ",", &save); rc == 0 && a; a = strtok_r(NULL, ",", &save)) {
        char **g = realloc(p->actions, (p->n_actions + 1) * sizeof(*g));
        if (g == NULL || (g[p->n_actions] = kestrel__strdup(a)) == NULL) {
            if (g)
                p->actions = g;
            rc = kestrel__error_oom();
            break;
        }
        p->actions = g;
        p->n_actions++;
    }
    free(copy);
    if (rc == 0)
        rc = kestrel__log_policy_validate(p->name, p->pattern, p->actions, p->n_actions);
    for (size_t i = 0; rc == 0 && i < s->pb->n_log_policies; i++)
        if (!strcmp(s->pb->log_policies[i]->name, name))
            rc = kestrel__error_set(KESTREL_EINVALID, "log policy %s given twice", name);
    if (rc == 0 && (grown = realloc(s->pb->log_policies, (s->pb->n_log_policies + 1) * sizeof(*grown))) == NULL)
        rc = kestrel__error_oom();
    if (rc < 0) {
        protobuf_c_message_free_unpacked(&p->base, NULL);
        return rc;
    }
    grown[s->pb->n_log_policies++] = p;
    s->pb->log_policies = grown;
    return 0;
}

int kestrel_job_spec_set_max_retries(kestrel_job_spec *s, int n)
{
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (n < 0 || n > 100)
        return kestrel__error_set(KESTREL_EINVALID, "retries: 0..100, not %d", n);
    s->pb->max_retries = n;
    return 0;
}

int kestrel_job_spec_exclude_node(kestrel_job_spec *s, const char *node)
{
    char **grown;
    KESTREL__CHECK(s, KESTREL__MAGIC_SPEC, "spec");
    if (node == NULL || !node[0] || !kestrel__text_is_clean(node, 128))
        return kestrel__error_set(KESTREL_EINVALID, "bad node name '%.64s'", node ? node : "");
    if (s->pb->n_exclude_nodes >= 64)
        return kestrel__error_set(KESTREL_ETOOLARGE, "at most 64 excluded nodes");
    if ((grown = realloc(s->pb->exclude_nodes, (s->pb->n_exclude_nodes + 1) * sizeof(*grown))) == NULL)
        return kestrel__error_oom();
    s->pb->exclude_nodes = grown;
    if ((grown[s->pb->n_exclude_nodes] = kestrel__strdup(node)) == NULL)
        return kestrel__error_oom();
    s->pb->n_exclude_nodes++;
    return 0;
}
