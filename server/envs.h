/* server/envs.h - the Python environments jobs run in (envs.c).
 *
 * A job names a standard environment (kestreld --environment NAME=FILE, FILE a requirements
 * lock) or brings a requirements file's text. Each distinct spec (the interpreter, the text, and
 * cffi so that the kestrel bindings load) is built once, as a venv, by one builder thread, while
 * the job is QUEUED and holds nothing; every job with the same spec reuses it. Builds run as an
 * unprivileged account (kestrel-env-builder-XXXXXXXX, the data dir's own, when kestreld is root),
 * into DATA/envs/.b/KEY-RAND, with a pip cache of its own (removed before the venv is sealed: a
 * cache shared between builds would let one build's code plant packages for another) and
 * kestreld's own PIP_* environment (index, find-links, proxy) and /etc/pip.conf as pip's
 * configuration; no process a build started outlives its step. The finished venv is made root's
 * and read-only for jobs, and DATA/envs/KEY (a link) names it. Past --env-cache-max environments, the least
 * recently used one no RUNNING job uses is removed. */
#ifndef KD_ENVS_H
#define KD_ENVS_H

#include <limits.h>
#include <stddef.h>
#include "engine.h"

typedef struct kd_envs kd_envs;

/* --environment NAME=FILE: the file read into cfg->envs. -1 with a message on stderr. */
int kd_envs_declare(kd_config *cfg, const char *arg);
int kd_envs_new(kd_envs **out, kd_engine *e);
void kd_envs_free(kd_envs *envs);

enum { KD_ENV_NONE = 0, KD_ENV_READY = 1, KD_ENV_WAIT = 2, KD_ENV_FAILED = 3 };

/* Where the spec's environment stands; a missing one is queued for building, and job_id's log gets
 * its build's lines. WAIT and FAILED say why ("preparing environment NAME (pip: ...)"). READY
 * fills dir (the venv) and digest ("sha256:..."). */
int kd_envs_check(kd_envs *envs, int64_t job_id, const Kestrel__V1__JobSpec *spec, char *why, size_t n,
                  char dir[PATH_MAX], char digest[80]);
/* Whether spec names an environment that is not declared (a 400 at submit). */
int kd_envs_unknown(const kd_envs *envs, const Kestrel__V1__JobSpec *spec);
/* A job starts in the environment at dir: its last use, for the eviction (only at a start: the
 * scheduler's passes over queued jobs write nothing). */
void kd_envs_used(const char *dir);
/* The environment's `pip freeze` (malloc'd, "" when unknown). */
char *kd_envs_packages(const char *dir);
/* GET /api/v1/environments. */
/* show_requirements: the files' text too (admins only: it may hold an index's credentials). */
Kestrel__V1__EnvironmentList *kd_envs_list(kd_envs *envs, int show_requirements);

#endif
