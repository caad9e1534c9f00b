/* server/repo_acl.c - who may read and write a model: its name's first segment is its namespace.
 *
 *   namespace          writers (push, aliases, deletes, settings)
 *   <user>             that user
 *   <team>             every member of that team
 *   jobs/<id>          the job's owner
 *   anything else      nobody but admins
 * Admins write everywhere. A job token acts for its owner, but only pushes new versions (and may
 * name a new alias with them): it never deletes, moves or removes an existing alias, or changes
 * settings. Readers: every authenticated user (visibility "all", the default), the namespace's
 * team and writers ("team"), or its writers alone ("private"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "repo_acl.h"

/* The namespace of name: its first segment; for jobs/<id>/..., the job's id in *job_out. */
static void namespace_of(const char *name, char *ns, size_t n, int64_t *job_out)
{
    size_t len = strcspn(name, "/");
    *job_out = 0;
    snprintf(ns, n, "%.*s", (int)len, name);
    if (!strcmp(ns, "jobs") && name[len] == '/') {
        char *end;
        long long id = strtoll(name + len + 1, &end, 10);
        if (id > 0 && (*end == '/' || *end == '\0'))
            *job_out = id;
    }
}

/* 1 when the caller (or the owner a job token acts for) may write the namespace. team_out gets
 * the namespace's team (for "team" visibility). */
static int writes(kd_req *r, const char *name, char *team_out, size_t tn)
{
    char ns[128];
    int64_t job;
    kd_user u;
    team_out[0] = '\0';
    namespace_of(name, ns, sizeof(ns), &job);
    if (job) {
        Kestrel__V1__Job *j = NULL;
        int64_t owner = 0;
        int mine = 0;
        if (kd_catalog_job_load(r->e->cat, job, 0, &j, &owner) == 0) {
            mine = owner == r->who.user_id;
            snprintf(team_out, tn, "%s", j->team);
            protobuf_c_message_free_unpacked(&j->base, NULL);
        }
        return mine || r->who.is_admin || (r->who.job_id && r->who.owner_admin);
    }
    if (kd_catalog_user_get(r->e->cat, ns, &u) == 0)
        snprintf(team_out, tn, "%s", u.team);
    else if (kd_catalog_team_exists(r->e->cat, ns) > 0)
        snprintf(team_out, tn, "%s", ns);
    if (r->who.is_admin || (r->who.job_id && r->who.owner_admin))
        return 1;
    return !strcmp(ns, r->who.user) || (r->who.team[0] && !strcmp(ns, r->who.team));
}

int kd_repo_may_read(kd_req *r, const char *name)
{
    char team[128];
    int vis = KD_VIS_ALL;
    if (kd_catalog_model_visibility(r->e->cat, name, &vis) < 0)
        return 0;   /* fail closed */
    if (vis == KD_VIS_ALL)
        return 1;
    if (writes(r, name, team, sizeof(team)))
        return 1;
    return vis == KD_VIS_TEAM && team[0] && !strcmp(team, r->who.team);
}

int kd_repo_check(kd_req *r, const char *name, kd_repo_op op, char *why, size_t n)
{
    static const char *const verbs[] = { "push to", "move or delete aliases of", "delete versions of",
                                         "change the settings of" };
    char team[128], ns[128];
    int64_t job;
    if (!writes(r, name, team, sizeof(team))) {   /* by the namespace alone: says nothing of what exists */
        namespace_of(name, ns, sizeof(ns), &job);
        if (job)
            snprintf(why, n, "cannot %s %s: the namespace jobs/%lld belongs to that job's owner", verbs[op], name,
                     (long long)job);
        else
            snprintf(why, n, "cannot %s %s: namespace '%s' is not yours (you may write %s/...%s%s%s and "
                     "jobs/<your job>/...)", verbs[op], name, ns, r->who.user, r->who.team[0] ? ", " : "",
                     r->who.team, r->who.team[0] ? "/..." : "");
        return 403;
    }
    if (r->who.job_id && op != KD_REPO_PUSH) {
        snprintf(why, n, "a job token may push new versions but cannot %s %s", verbs[op], name);
        return 403;
    }
    return 0;
}
