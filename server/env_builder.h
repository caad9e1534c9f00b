/* server/env_builder.h - what envs.c's builds do to the builder account and to a venv's files:
 * stop every process of the account, remove a build dir as it, find the venv's site-packages, and
 * seal the venv as root's and read-only for jobs. */
#ifndef KD_ENV_BUILDER_H
#define KD_ENV_BUILDER_H

#include <stddef.h>
#include "identity.h"

/* Every process of the builder account id (NULL or not isolated: none to kill), killed. */
void kd_env_kill_builder(const kd_ident *id);
/* Remove the build dir dir, as builder while it is the builder's, then its empty top as root. */
void kd_env_drop(const kd_ident *builder, const char *dir);
/* real/lib/python3.X/site-packages into out, each step a real directory: 0, or -1. */
int kd_env_site_packages(const char *real, char *out, size_t n);
/* Every file of the venv real root's (when kestreld is root), readable by all, writable by none:
 * 0, or -1 (errno). */
int kd_env_seal(const char *real);

#endif
