/* server/slurm_submit.c - hands one queued job to Slurm: resolves its dependencies and affinity to
 * Slurm ids and nodes, prepares its work dir on the shared filesystem (the data dir), writes its
 * batch script, and runs sbatch. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "exec_util.h"
#include "slurm.h"
#include "store.h"
#include "stage.h"

/* The wrapper is the batch shell: Slurm's preemption warning (USR1 at the start of the grace period,
 * --signal=B:USR1@grace with preempt_send_user_signal) becomes the SIGTERM the local executor sends,
 * so the Keras shim checkpoints the same way; once the trainer has stopped, the job requeues itself
 * (an exit would read as COMPLETED). scancel's TERM is only forwarded: a cancel never requeues.
 * A gang's child is srun, which ends its step at a SIGTERM (SIGKILL to the tasks): the warning
 * goes to the step's tasks instead (scancel --signal=TERM JOB.0), and srun ends when they do. */
static const char wrapper_text[] =
    "#!/bin/sh\n"
    "# kestrel-wrap (written by kestreld): runs a Kestrel job under Slurm.\n"
    "preempted=0\n"
    "child=\n"
    "trap 'preempted=1; if [ -n \"$KESTREL_GANG\" ]; then scancel --signal=TERM \"$SLURM_JOB_ID.0\" 2>/dev/null; "
    "elif [ -n \"$child\" ]; then kill -TERM \"$child\" 2>/dev/null; fi' USR1\n"
    "trap '[ -n \"$child\" ] && kill -TERM \"$child\" 2>/dev/null' TERM\n"
    "\"$@\" &\n"
    "child=$!\n"
    "while :; do\n"
    "    wait \"$child\"\n"
    "    rc=$?\n"
    "    kill -0 \"$child\" 2>/dev/null || break\n"
    "done\n"
    "if [ \"$preempted\" = 1 ]; then\n"
    "    echo \"kestrel: preempted; the trainer stopped (exit $rc); requeueing Slurm job $SLURM_JOB_ID\" >&2\n"
    "    scontrol requeue \"$SLURM_JOB_ID\" && exec sleep 300\n"
    "fi\n"
    "exit $rc\n";

int kd_slurm_write_wrapper(kd_slurm *s)
{
    snprintf(s->dir, sizeof(s->dir), "%s/slurm", s->e->cfg->data_dir);
    snprintf(s->wrapper, sizeof(s->wrapper), "%s/kestrel-wrap", s->dir);
    /* jobs' identities run the wrapper: the folder can be passed through, not listed */
    char scripts[PATH_MAX + 16];
    if (kestrel__mkdirs(s->dir, 0711) < 0 || chmod(s->dir, 0711) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", s->dir, strerror(errno));
    snprintf(scripts, sizeof(scripts), "%s/scripts", s->dir);
    if (kestrel__mkdirs(scripts, 0700) < 0 || chmod(scripts, 0700) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", scripts, strerror(errno));
    return kestrel__write_file_atomic(s->wrapper, wrapper_text, strlen(wrapper_text), 0755);
}

const char *kd_slurm_qos(const kd_engine *e, int priority)
{
    return e->cfg->slurm_qos[priority >= KESTREL__V1__PRIORITY__URGENT ? 2
                             : priority == KESTREL__V1__PRIORITY__HIGH ? 1 : 0];
}

const char *kd_slurm_partition(const kd_engine *e, const char *pool)
{
    for (size_t i = 0; i < e->cfg->nslurm_pools; i++)
        if (!strcmp(e->cfg->slurm_pools[i], pool))
            return e->cfg->slurm_partitions[i];
    return pool;
}

/* Single-quote s for sh. */
static void shq(kestrel_buf *b, const char *s)
{
    kestrel__buf_puts(b, "'");
    for (; *s; s++) {
        if (*s == '\'')
            kestrel__buf_puts(b, "'\\''");
        else
            kestrel__buf_put(b, s, 1);
    }
    kestrel__buf_puts(b, "'");
}

static int valid_name(const char *k, size_t len)
{
    if (len == 0 || (k[0] >= '0' && k[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= '0' && k[i] <= '9') ||
              k[i] == '_'))
            return 0;
    return 1;
}

/* A gang's batch script: srun starts the ranks (one task each; srun --kill-on-bad-exit stops the
 * others when one fails, and passes the wrapper's SIGTERM to all), each wired from Slurm's own
 * variables as the local executor wires its ranks. Rank 0 runs on the batch host: its address and
 * a port of the job's are the coordinator. --label puts "R: " before each task's lines (kestreld
 * turns it into "[rank R] "). */
static const char gang_wiring[] =
    "MASTER_ADDR=$(hostname -I 2>/dev/null | cut -d' ' -f1); MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}\n"
    "MASTER_PORT=$((29500 + ${SLURM_JOB_ID:-0} % 20000))\n"
    "KESTREL_COORDINATOR=$MASTER_ADDR:$MASTER_PORT; KERAS_DISTRIBUTION_JOB_ADDRESSES=$KESTREL_COORDINATOR\n"
    "KESTREL_GANG=1; export MASTER_ADDR MASTER_PORT KESTREL_COORDINATOR KERAS_DISTRIBUTION_JOB_ADDRESSES KESTREL_GANG\n";
static const char rank_wiring[] =
    "RANK=$SLURM_PROCID; LOCAL_RANK=$SLURM_LOCALID; WORLD_SIZE=$SLURM_NTASKS; "
    "LOCAL_WORLD_SIZE=$(echo \"$SLURM_STEP_TASKS_PER_NODE\" | awk -v node=\"$SLURM_NODEID\" "
    "'{ n = split($0, part, \",\"); k = 0; for (i = 1; i <= n; i++) { c = part[i]; r = 1; "
    "if (match(c, /\\(x[0-9]+\\)/)) { r = substr(c, RSTART + 2, RLENGTH - 3); c = substr(c, 1, RSTART - 1) } "
    "for (j = 0; j < r; j++) { if (k == node) print c; k++ } } }'); "
    "KESTREL_RANK=$RANK; KESTREL_WORLD_SIZE=$WORLD_SIZE; KESTREL_LOCAL_RANK=$LOCAL_RANK; "
    "KERAS_DISTRIBUTION_NUM_PROCESSES=$WORLD_SIZE; KERAS_DISTRIBUTION_PROCESS_ID=$RANK; "
    "export RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE KESTREL_RANK KESTREL_WORLD_SIZE KESTREL_LOCAL_RANK "
    "KERAS_DISTRIBUTION_NUM_PROCESSES KERAS_DISTRIBUTION_PROCESS_ID; exec \"$@\"";

/* The batch script: the environment contract, the work dir, then the wrapper around argv. */
static int write_script(kd_slurm *s, const Kestrel__V1__Job *job, const char *token, const char *dir,
                        const char *cwd, char *path, size_t pathlen, const kd_exec_as *as)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    char ckpt[PATH_MAX];
    char **env;
    int rc;
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint", dir);
    {   /* its environment recorded; PATH (below) finds the venv's programs */
        char prog[PATH_MAX + 8], *argv0 = job->spec->n_argv ? job->spec->argv[0] : "";
        if (kd_exec_use_env(s->e, job, &argv0, prog, sizeof(prog)) < 0)
            return KESTREL_EIO;
    }
    if ((env = kd_exec_job_env(s->e, job, token, ckpt, NULL, 0, as)) == NULL)
        return kestrel__error_oom();
    kestrel__buf_printf(&b, "#!/bin/sh\n# Kestrel job %lld (written by kestreld)\n", (long long)job->id);
    for (char **v = env; *v; v++) {
        size_t klen = strcspn(*v, "=");
        if (!valid_name(*v, klen) || !strncmp(*v, "KESTREL_RESTART_COUNT=", 22))
            continue;
        kestrel__buf_printf(&b, "%.*s=", (int)klen, *v);
        shq(&b, *v + klen + 1);
        kestrel__buf_printf(&b, "; export %.*s\n", (int)klen, *v);
    }
    kd_exec_env_free(env);
    /* runs before this one plus Slurm's own requeues of this submission */
    kestrel__buf_printf(&b, "KESTREL_RESTART_COUNT=$((%d + ${SLURM_RESTART_COUNT:-0})); export KESTREL_RESTART_COUNT\n",
                        job->restart_count);
    if (job->spec->replicas > 1)
        kestrel__buf_puts(&b, gang_wiring);
    kestrel__buf_puts(&b, "cd ");
    shq(&b, cwd);
    kestrel__buf_puts(&b, " || exit 1\nexec ");
    shq(&b, s->wrapper);
    if (job->spec->replicas > 1) {
        kestrel__buf_puts(&b, " srun --kill-on-bad-exit=1 --label sh -c ");
        shq(&b, rank_wiring);
        kestrel__buf_puts(&b, " kestrel-rank");
    }
    for (size_t i = 0; i < job->spec->n_argv; i++) {
        kestrel__buf_puts(&b, " ");
        shq(&b, job->spec->argv[i]);
    }
    kestrel__buf_puts(&b, "\n");
    /* in kestreld's own folder: sbatch reads it as root, so never from one the job's identity owns
     * (it could swap the file for a link to another job's script); Slurm keeps its own copy */
    snprintf(path, pathlen, "%s/scripts/%lld.sh", s->dir, (long long)job->id);
    rc = b.ptr ? kestrel__write_file_atomic(path, b.ptr, b.size, 0700) : kestrel__error_oom();
    kestrel_buf_dispose(&b);
    return rc;
}

typedef struct {
    kd_slurm *s;
    int64_t id;
    Kestrel__V1__JobSpec *spec;
    char work[PATH_MAX];
    char home[PATH_MAX];
    kd_ident ident;
} clone_job;

/* kd_exec_as's stop for a clone: the job cancelled (or gone), or kestreld stopping, whose close
 * waits for the clones (a review: a cancelled job's clone ran its hour). */
static int clone_stop(void *ctx)
{
    clone_job *c = ctx;
    int stop;
    pthread_mutex_lock(&c->s->mu);
    stop = c->s->stop;
    for (kd_sjob *j = c->s->jobs; !stop; j = j->next)
        if (j == NULL || j->id == c->id) {
            stop = j == NULL || j->cancelled;
            break;
        }
    pthread_mutex_unlock(&c->s->mu);
    return stop;
}

/* Clone into WORK.tmp, then rename it to WORK: the work dir exists only once complete. */
static void *clone_main(void *arg)
{
    clone_job *c = arg;
    kd_slurm *s = c->s;
    char tmp[PATH_MAX + 8], why[400] = "";
    kd_exec_as as = { &c->ident, c->home };
    as.stop = clone_stop;
    as.stop_ctx = c;
    snprintf(tmp, sizeof(tmp), "%s.tmp", c->work);
    kd_ident_rm_tree(&c->ident, c->home, tmp);   /* what a crash left behind */
    if (kd_exec_checkout(s->e, c->spec, c->id, tmp, why, sizeof(why), &as) == 0 && rename(tmp, c->work) < 0)
        snprintf(why, sizeof(why), "cannot rename %s: %s", tmp, strerror(errno));
    pthread_mutex_lock(&s->mu);
    for (kd_sjob *j = s->jobs; j; j = j->next)
        if (j->id == c->id) {
            j->cloning = 0;
            snprintf(j->clone_error, sizeof(j->clone_error), "%s", why);
        }
    s->clones--;
    s->wake = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    protobuf_c_message_free_unpacked(&c->spec->base, NULL);
    free(c);
    return NULL;
}

/* 1: the clone runs (the job waits for it), -1: it could not start (why). */
static int start_clone(kd_slurm *s, int64_t id, const Kestrel__V1__JobSpec *spec, const char *work, char *why, size_t n,
                       const kd_exec_as *as)
{
    clone_job *c = calloc(1, sizeof(*c));
    kestrel_buf packed = KESTREL_BUF_INIT;
    pthread_attr_t at;
    pthread_t t;
    int rc;
    if (c == NULL || kestrel__wire_pack(&packed, &spec->base) < 0 ||
        (c->spec = kestrel__v1__job_spec__unpack(NULL, packed.size, (const uint8_t *)packed.ptr)) == NULL) {
        free(c);
        kestrel_buf_dispose(&packed);
        snprintf(why, n, "out of memory");
        return -1;
    }
    kestrel_buf_dispose(&packed);
    c->s = s;
    c->id = id;
    c->ident = *as->id;
    snprintf(c->home, sizeof(c->home), "%s", as->home);
    snprintf(c->work, sizeof(c->work), "%s", work);
    pthread_mutex_lock(&s->mu);
    s->clones++;
    for (kd_sjob *j = s->jobs; j; j = j->next)
        if (j->id == id)
            j->cloning = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &at, clone_main, c);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        pthread_mutex_lock(&s->mu);
        s->clones--;
        for (kd_sjob *j = s->jobs; j; j = j->next)
            if (j->id == id)
                j->cloning = 0;
        pthread_mutex_unlock(&s->mu);
        protobuf_c_message_free_unpacked(&c->spec->base, NULL);
        free(c);
        snprintf(why, n, "cannot start a clone thread: %s", strerror(rc));
        return -1;
    }
    return 1;
}

/* Dependencies as a Slurm --dependency value. 0 ready, 1 wait (why), -1 can never run (why). */
static int dependencies(kd_slurm *s, const Kestrel__V1__JobSpec *spec, kestrel_buf *dep, char *why, size_t n)
{
    size_t total = spec->n_after_ok + spec->n_after_any;
    for (size_t i = 0; i < total; i++) {
        int ok = i < spec->n_after_ok;
        int64_t id = ok ? spec->after_ok[i] : spec->after_any[i - spec->n_after_ok];
        kd_catref ref;
        size_t found = 0;
        char sid[32] = "";
        if (kd_catalog_refs(s->e->cat, &id, 1, &ref, &found) < 0)
            return -2;
        if (!found) {
            snprintf(why, n, "dependency %lld does not exist", (long long)id);
            return -1;
        }
        if (ref.state == KESTREL_JOB_STATE_SUCCEEDED ||
            (!ok && (ref.state == KESTREL_JOB_STATE_FAILED || ref.state == KESTREL_JOB_STATE_CANCELLED)))
            continue;   /* satisfied already */
        if (ref.state == KESTREL_JOB_STATE_FAILED || ref.state == KESTREL_JOB_STATE_CANCELLED) {
            snprintf(why, n, "dependency %lld ended %s", (long long)id, kestrel_job_state_name(ref.state));
            return -1;
        }
        pthread_mutex_lock(&s->mu);
        for (kd_sjob *j = s->jobs; j; j = j->next)
            if (j->id == id)
                snprintf(sid, sizeof(sid), "%s", j->slurm_id);
        pthread_mutex_unlock(&s->mu);
        if (!sid[0]) {
            snprintf(why, n, "waiting for dependency %lld to reach Slurm or end", (long long)id);
            return 1;
        }
        kestrel__buf_printf(dep, "%s%s:%s", dep->size ? "," : "", ok ? "afterok" : "afterany", sid);
    }
    return 0;
}

/* The node an affinity asks for: 0 with node ("" none), 1 wait (why). */
static int affinity(kd_slurm *s, const Kestrel__V1__JobSpec *spec, int64_t owner, char *node, size_t nlen, char *why,
                    size_t n)
{
    node[0] = '\0';
    if (spec->affinity_job) {
        kd_catref ref;
        size_t found = 0;
        if (kd_catalog_refs(s->e->cat, &spec->affinity_job, 1, &ref, &found) == 0 && found && ref.node[0])
            snprintf(node, nlen, "%s", ref.node);
    } else if (spec->affinity_group[0]) {
        kd_catalog_group_node(s->e->cat, owner, spec->affinity_group, node, nlen);
    } else {
        return 0;
    }
    if (!node[0] && spec->affinity_required) {
        snprintf(why, n, "waiting for the affinity target to be placed");
        return 1;
    }
    return 0;
}

static int slurm_unreachable(const char *out)
{
    return strstr(out, "Unable to contact") || strstr(out, "Socket timed out") ||
           strstr(out, "Connection refused") || strstr(out, "Zero Bytes were transmitted");
}

int kd_slurm_submit(kd_slurm *s, kd_sjob *j, char *why, size_t n)
{
    kd_engine *e = s->e;
    Kestrel__V1__Job *job = NULL;
    const Kestrel__V1__JobSpec *spec;
    kestrel_buf dep = KESTREL_BUF_INIT, out = KESTREL_BUF_INIT;
    char dir[PATH_MAX], work[PATH_MAX], cwd[PATH_MAX * 2], script[PATH_MAX], node[64], token[80];
    char a_out[PATH_MAX + 16], a_err[PATH_MAX + 16], a_name[64], a_sig[48], a_qos[96], a_part[160];
    char a_gres[160], a_tasks[32], *a_dep = NULL, *a_node = NULL;
    char *argv[24];
    char a_uid[32], a_gid[32];
    int64_t owner = 0;
    int rc, k = 0;
    struct stat st;
    kd_ident ident;
    kd_exec_as as = { &ident, NULL };
    const char *inside[2] = { script, work };   /* script holds the checkpoint dir's path here */

    if (kd_catalog_job_load(e->cat, j->id, 0, &job, &owner) < 0) {
        snprintf(why, n, "%s", kestrel_error_last()->message);
        return -1;
    }
    spec = job->spec;
    j->priority = spec->priority;
    as.home = dir;
    if ((int)job->state != KESTREL_JOB_STATE_QUEUED) {
        rc = -1;
        snprintf(why, n, "no longer queued");
        goto done;
    }
    if ((rc = dependencies(s, spec, &dep, why, n)) != 0 ||
        (rc = affinity(s, spec, owner, node, sizeof(node), why, n)) != 0)
        goto done;
    if (kd_ident_resolve(job->owner, &ident) < 0) {
        snprintf(why, n, "%s", kestrel_error_last()->message);
        rc = -1;
        goto done;
    }
    kd_engine_job_dir(e, j->id, NULL, dir, sizeof(dir));
    snprintf(work, sizeof(work), "%s/work", dir);
    snprintf(script, sizeof(script), "%s/checkpoint", dir);
    if (kestrel__mkdirs(script, 0700) < 0 ||
        (!spec->git_url[0] && !spec->code[0] && !spec->n_data && kestrel__mkdirs(work, 0700) < 0)) {
        snprintf(why, n, "cannot create %s: %s", dir, strerror(errno));
        rc = -1;
        goto done;
    }
    if (chmod(dir, 0700) < 0 ||
        kd_ident_adopt(&ident, dir, inside, spec->git_url[0] || spec->code[0] || spec->n_data ? 1 : 2) < 0) {
        snprintf(why, n, "%s", kestrel_error_last()->message);
        rc = -1;
        goto done;
    }
    /* code and datasets: staged by kestreld on the shared data dir before sbatch */
    if ((spec->code[0] || spec->n_data) && stat(work, &st) < 0 && kd_stage_work(e, &ident, spec, work, why, n) < 0) {
        rc = -1;
        goto done;
    }
    if (spec->git_url[0] && stat(work, &st) < 0) {
        /* a clone can take long: on a helper thread, so that following the other jobs goes on */
        if (j->clone_error[0]) {
            snprintf(why, n, "%s", j->clone_error);
            rc = -1;
        } else {
            char shown[KD_GIT_URL_SHOWN_MAX];
            kd_git_url_shown(spec->git_url, shown, sizeof(shown));
            snprintf(why, n, "cloning %s", shown);
            rc = j->cloning ? 1 : start_clone(s, j->id, spec, work, why, n, &as);
        }
        goto done;
    }
    snprintf(cwd, sizeof(cwd), "%s%s%s", work, spec->workdir[0] ? "/" : "", spec->workdir);
    if (kd_exec_workdir_ok(work, spec->workdir) < 0) {
        snprintf(why, n, "working directory '%s' is no folder of the job's files (a link out of them is not "
                 "followed): give --workdir a folder of the checkout or the code", spec->workdir);
        rc = -1;
        goto done;
    }
    if (kd_token_issue(e->cat, owner, j->id, token, sizeof(token)) < 0) {
        snprintf(why, n, "%s", kestrel_error_last()->message);
        rc = -1;
        goto done;
    }
    if (write_script(s, job, token, dir, cwd, script, sizeof(script), &as) < 0) {
        snprintf(why, n, "%s", kestrel_error_last()->message);
        kd_catalog_token_drop_job(e->cat, j->id);   /* no live token of a job that never reached Slurm */
        rc = -1;
        goto done;
    }
    snprintf(a_out, sizeof(a_out), "--output=%s/slurm.out", dir);
    snprintf(a_err, sizeof(a_err), "--error=%s/slurm.err", dir);
    snprintf(a_name, sizeof(a_name), "--job-name=kestrel-%lld", (long long)j->id);
    snprintf(a_sig, sizeof(a_sig), "--signal=B:USR1@%d", spec->grace_period_s > 0 ? spec->grace_period_s
                                                                                 : e->cfg->slurm_grace_s);
    snprintf(a_qos, sizeof(a_qos), "--qos=%s", kd_slurm_qos(e, j->priority));
    snprintf(a_part, sizeof(a_part), "--partition=%s", kd_slurm_partition(e, spec->pool));
    argv[k++] = "sbatch";
    argv[k++] = "--parsable";
    argv[k++] = "--requeue";
    argv[k++] = "--open-mode=append";
    argv[k++] = a_name;
    argv[k++] = a_out;
    argv[k++] = a_err;
    argv[k++] = a_sig;
    argv[k++] = a_qos;
    argv[k++] = a_part;
    if (ident.isolated) {   /* Slurm runs the job as its Kestrel user's identity, as the local executor does */
        snprintf(a_uid, sizeof(a_uid), "--uid=%u", (unsigned)ident.uid);
        snprintf(a_gid, sizeof(a_gid), "--gid=%u", (unsigned)ident.gid);
        argv[k++] = a_uid;
        argv[k++] = a_gid;
    }
    if (spec->replicas > 1) {   /* a gang: a task a rank, each with its GPUs (Slurm packs the tasks on nodes) */
        snprintf(a_tasks, sizeof(a_tasks), "--ntasks=%d", spec->replicas);
        argv[k++] = a_tasks;
        if (spec->gpus > 0) {
            snprintf(a_gres, sizeof(a_gres), "--gpus-per-task=%s%s%d", spec->gpu_type, spec->gpu_type[0] ? ":" : "",
                     spec->gpus);
            argv[k++] = a_gres;
        }
    } else if (spec->gpus > 0) {
        snprintf(a_gres, sizeof(a_gres), "--gres=gpu:%s%s%d", spec->gpu_type, spec->gpu_type[0] ? ":" : "",
                 spec->gpus);
        argv[k++] = a_gres;
    }
    if (dep.size && asprintf(&a_dep, "--dependency=%s", dep.ptr) > 0)
        argv[k++] = a_dep;
    if (node[0] && asprintf(&a_node, "--nodelist=%s", node) > 0)
        argv[k++] = a_node;
    argv[k++] = script;
    argv[k] = NULL;
    {   /* sbatch passes its own environment on to the job (--export=ALL): kestreld's, less what no
         * job gets (its PIP_*: a review found the Slurm jobs still had them) */
        kd_exec_as sbatch = { .job_env = 1 };
        rc = kd_exec_run(argv, dir, &out, &sbatch);
    }
    if (rc == 0 && out.ptr) {
        out.ptr[strcspn(out.ptr, ";\n")] = '\0';   /* "123" or "123;cluster" */
        snprintf(j->slurm_id, sizeof(j->slurm_id), "%s", out.ptr);
        kd_exec_log(e, j->id, "submitted to Slurm as job %s (partition %s, %s%s%s)", j->slurm_id,
                    kd_slurm_partition(e, spec->pool), a_qos + 2, a_dep ? ", " : "", a_dep ? a_dep + 2 : "");
        rc = 0;
    } else {
        const char *msg = out.ptr ? out.ptr : "no output";
        snprintf(why, n, "sbatch: %.*s", (int)strcspn(msg, "\n"), strncmp(msg, "sbatch: error: ", 15) ? msg : msg + 15);
        rc = out.ptr && slurm_unreachable(out.ptr) ? -2 : -1;
        kd_catalog_token_drop_job(e->cat, j->id);
    }
done:
    free(a_dep);
    free(a_node);
    kestrel_buf_dispose(&dep);
    kestrel_buf_dispose(&out);
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return rc;
}
