/* server/repo_acl.h - repository namespaces and model visibility (rules in repo_acl.c). */
#ifndef KD_REPO_ACL_H
#define KD_REPO_ACL_H

#include "api.h"

typedef enum { KD_REPO_PUSH, KD_REPO_ALIAS, KD_REPO_DELETE, KD_REPO_SETTINGS } kd_repo_op;

/* 1 when the caller may read model name (list it, see its versions, pull it). */
int kd_repo_may_read(kd_req *r, const char *name);
/* 0 when the caller may do op on model name; else 403 with the reason in why: decided by the
 * namespace (and a job token's limits) alone, so it tells nothing of whether the model exists. */
int kd_repo_check(kd_req *r, const char *name, kd_repo_op op, char *why, size_t n);

#endif
