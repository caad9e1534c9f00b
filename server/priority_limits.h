/* server/priority_limits.h - the highest priority class each user may give a job (--max-priority).
 *
 * A class above normal preempts the running jobs of lower classes (README, "Scheduling"), so on a
 * shared kestreld it is a right, like Slurm's QOS per association: kestreld --max-priority CLASS
 * sets it for everyone, --max-priority team:T=CLASS for a team's members, --max-priority
 * user:U=CLASS for one user (a user's own entry wins over its team's, and that over everyone's).
 * Admins (an admin user's admin-scoped token) may use every class. Without the flag every user may use every class, as before it. A
 * submission, rerun or priority change past the caller's class is refused 403 and queues or changes
 * nothing; jobs queued before a restart with a lower limit keep their class. A job no class may
 * preempt (not_preemptible) holds off every class as urgent does: only those who may give urgent
 * may submit one (api_sched.c's kd_exempt_refused). No I/O but the parse's complaint on stderr. */
#ifndef KD_PRIORITY_LIMITS_H
#define KD_PRIORITY_LIMITS_H

#include <stddef.h>
#include "catalog.h"
#include "sched_plan.h"

typedef struct {
    int is_team;
    char *name;                 /* the user's or the team's name */
    int max_class;              /* KESTREL_PRIORITY_* */
} kd_priority_limit;

typedef struct {
    kd_priority_limit *list;
    size_t n;
    int everyone;               /* the class of users named by no entry (default urgent: no limit) */
} kd_priority_limits;

/* One --max-priority argument: CLASS, team:NAME=CLASS or user:NAME=CLASS (CLASS normal, high or
 * urgent; NAME as users and teams are named: 1..64 printable bytes, no space or '/'). 0, or -1 with
 * the reason printed on stderr (a later entry for the same name wins). */
int kd_priority_limits_parse(kd_priority_limits *l, const char *arg);
void kd_priority_limits_free(kd_priority_limits *l);
/* The highest class who may give a job, and into from (n bytes) what set it: "user NAME", "team
 * NAME", "everyone" or "admin". */
int kd_priority_limit_of(const kd_priority_limits *l, const kd_principal *who, char *from, size_t n);
/* What l allows, in one line ("up to high for everyone, urgent for team ops (admins: any)"), cut to n. */
void kd_priority_limits_describe(const kd_priority_limits *l, char *out, size_t n);

#endif
