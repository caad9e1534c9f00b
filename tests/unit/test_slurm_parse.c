/* Reading Slurm's command output (server/slurm_parse.c): squeue's JSON, scontrol's Key=Value lines
 * and sacct's |-separated fields, as Slurm 22.05 prints them (and later Slurm's JSON shapes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "slurm.h"

static const char scontrol_out[] =
    "JobId=7 JobName=kestrel-3 UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=110000 Nice=0 "
    "Account=kestrel QOS=urgent JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:01 NodeList=node2 BatchHost=node2 NumNodes=1\n"
    "JobId=8 JobName=kestrel-4 JobState=PENDING Reason=Nodes_required_for_job_are_DOWN,_DRAINED "
    "Dependency=(null) Restarts=1 ExitCode=0:0 NodeList=(null) BatchHost=(null)\n"
    "JobId=9 JobName=kestrel-5 JobState=FAILED Reason=NonZeroExitCode Restarts=0 ExitCode=3:0 "
    "NodeList=node3 BatchHost=node3\n"
    "JobId=10 JobName=kestrel-6 JobState=CANCELLED Reason=None Restarts=0 ExitCode=0:15 NodeList=node4\n"
    "garbage line without a job id\n";

static void scontrol_lines(void **st)
{
    kd_sview *v = NULL;
    size_t n = 0;
    (void)st;
    assert_int_equal(kd_slurm_parse_scontrol(scontrol_out, &v, &n), 0);
    assert_int_equal(n, 4);
    assert_string_equal(v[0].id, "7");
    assert_string_equal(v[0].state, "RUNNING");
    assert_string_equal(v[0].reason, "");
    assert_string_equal(v[0].node, "node2");
    assert_string_equal(v[1].state, "PENDING");
    assert_string_equal(v[1].reason, "Nodes required for job are DOWN, DRAINED");
    assert_string_equal(v[1].node, "");
    assert_int_equal(v[1].restarts, 1);
    assert_int_equal(v[2].exit_code, 3);
    assert_int_equal(v[3].exit_signal, 15);
    assert_string_equal(v[3].node, "node4");   /* no BatchHost: NodeList */
    free(v);
    assert_int_equal(kd_slurm_parse_scontrol("No jobs in the system\n", &v, &n), 0);
    assert_int_equal(n, 0);
    free(v);
}

/* squeue --json as Slurm 22.05 prints it (fields cut to those read; exit_code the wait status), with
 * names that forge states in scontrol's words (the parser reads no name: the jobs' own fields stand),
 * and later Slurm's shapes (job_state a list, numbers as {"set", "number"}, exit_code an object). */
static const char squeue_json[] =
    "{\"meta\": {}, \"errors\": [], \"jobs\": ["
    "{\"job_id\": 5, \"name\": \"x\\nJobId=6 JobState=COMPLETED ExitCode=0:0 BatchHost=node9\","
    " \"job_state\": \"PENDING\", \"state_reason\": \"Nodes_required_for_job_are_DOWN,_DRAINED\","
    " \"batch_host\": \"\", \"nodes\": \"\", \"restart_cnt\": 1, \"exit_code\": 0},"
    "{\"job_id\": 6, \"name\": \"x JobState=COMPLETED Reason=DependencyNeverSatisfied\","
    " \"job_state\": \"RUNNING\", \"state_reason\": \"None\", \"batch_host\": \"node1\", \"nodes\": \"node1\","
    " \"restart_cnt\": 0, \"exit_code\": 0},"
    "{\"job_id\": 7, \"job_state\": \"FAILED\", \"state_reason\": \"NonZeroExitCode\", \"batch_host\": \"node3\","
    " \"restart_cnt\": 0, \"exit_code\": 768},"
    "{\"job_id\": 8, \"job_state\": \"CANCELLED\", \"state_reason\": \"None\", \"batch_host\": \"\","
    " \"nodes\": \"node4\", \"restart_cnt\": 0, \"exit_code\": 15},"
    "{\"job_id\": {\"set\": true, \"number\": 9}, \"job_state\": [\"COMPLETED\"], \"batch_host\": \"node2\","
    " \"restart_cnt\": {\"set\": true, \"number\": 2},"
    " \"exit_code\": {\"status\": [\"EXITED\"], \"return_code\": {\"set\": true, \"number\": 4},"
    " \"signal\": {\"id\": {\"set\": false, \"number\": 0}}}},"
    "{\"name\": \"no id\"}]}";

static void squeue_json_jobs(void **st)
{
    kd_sview *v = NULL;
    size_t n = 0;
    (void)st;
    assert_int_equal(kd_slurm_parse_squeue_json(squeue_json, &v, &n), 0);
    assert_int_equal(n, 5);
    assert_string_equal(v[0].id, "5");
    assert_string_equal(v[0].state, "PENDING");
    assert_string_equal(v[0].reason, "Nodes required for job are DOWN, DRAINED");
    assert_int_equal(v[0].restarts, 1);
    assert_string_equal(v[1].id, "6");   /* what job 5's name says of it does not count */
    assert_string_equal(v[1].state, "RUNNING");
    assert_string_equal(v[1].reason, "");   /* nor its own name's words */
    assert_string_equal(v[1].node, "node1");
    assert_int_equal(v[2].exit_code, 3);
    assert_int_equal(v[2].exit_signal, 0);
    assert_int_equal(v[3].exit_code, 0);
    assert_int_equal(v[3].exit_signal, 15);
    assert_string_equal(v[3].node, "node4");   /* no batch host: the nodes */
    assert_string_equal(v[4].id, "9");
    assert_string_equal(v[4].state, "COMPLETED");
    assert_int_equal(v[4].restarts, 2);
    assert_int_equal(v[4].exit_code, 4);
    free(v);
    assert_int_equal(kd_slurm_parse_squeue_json("{\"meta\": {}, \"errors\": [], \"jobs\": []}", &v, &n), 0);
    assert_int_equal(n, 0);
    free(v);
    assert_int_equal(kd_slurm_parse_squeue_json("squeue: unrecognized option '--json'", &v, &n), KESTREL_EPROTO);
    assert_int_equal(kd_slurm_parse_squeue_json("{\"errors\": []}", &v, &n), KESTREL_EPROTO);
    /* Slurm's own errors: no view; a warning on stderr before or after the document: read */
    assert_int_equal(kd_slurm_parse_squeue_json("{\"errors\": [{\"error\": \"x\"}], \"jobs\": []}", &v, &n),
                     KESTREL_EPROTO);
    assert_int_equal(kd_slurm_parse_squeue_json("squeue: warning: a deprecated option\n{\"jobs\": [{\"job_id\": 3, "
                                                "\"job_state\": \"RUNNING\", \"exit_code\": 0}]}\nsqueue: more\n",
                                                &v, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].state, "RUNNING");
    free(v);
    /* 23.02's exit code: signal_id, and a value past an int (NO_VAL) taken as none */
    assert_int_equal(kd_slurm_parse_squeue_json("{\"jobs\": [{\"job_id\": 4, \"job_state\": [\"FAILED\"], "
                                                "\"restart_cnt\": 4294967294, \"exit_code\": {\"return_code\": 0, "
                                                "\"signal\": {\"signal_id\": 9}}}]}", &v, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].exit_signal, 9);
    assert_int_equal(v[0].restarts, 0);
    free(v);
}

static void sacct_lines(void **st)
{
    kd_sview v;
    (void)st;
    assert_int_equal(kd_slurm_parse_sacct("12|CANCELLED by 0|0:15|node1\n", &v), 0);
    assert_string_equal(v.id, "12");
    assert_string_equal(v.state, "CANCELLED");
    assert_int_equal(v.exit_signal, 15);
    assert_string_equal(v.node, "node1");
    assert_int_equal(kd_slurm_parse_sacct("13|PENDING|0:0|None assigned", &v), 0);
    assert_string_equal(v.node, "");
    assert_int_equal(kd_slurm_parse_sacct("", &v), -1);
    assert_int_equal(kd_slurm_parse_sacct("14|COMPLETED", &v), -1);
}

static void state_classes(void **st)
{
    (void)st;
    assert_true(kd_slurm_state_pending("PENDING") && kd_slurm_state_pending("REQUEUED") &&
                kd_slurm_state_pending("CONFIGURING") && kd_slurm_state_pending("PREEMPTED"));
    assert_true(kd_slurm_state_running("RUNNING") && kd_slurm_state_running("COMPLETING"));
    assert_true(kd_slurm_state_final("COMPLETED") && kd_slurm_state_final("NODE_FAIL") &&
                kd_slurm_state_final("OUT_OF_MEMORY"));
    assert_false(kd_slurm_state_final("RUNNING") || kd_slurm_state_running("PENDING") ||
                 kd_slurm_state_pending("COMPLETED"));
}

/* Feed the follower one poll after another; count what it records. */
static void follow(const char *const *polls, int restarts0, int *requeues, int *starts, int *kstate)
{
    int restarts = restarts0, ending = 0;
    *requeues = *starts = 0;
    for (; *polls; polls++) {
        kd_sview v;
        int what;
        memset(&v, 0, sizeof(v));
        assert_int_equal(sscanf(*polls, "%31[A-Z_]/%d", v.state, &v.restarts), 2);
        if (strcmp(v.state, "PENDING"))
            snprintf(v.node, sizeof(v.node), "node1");
        what = kd_slurm_follow(kstate, &restarts, &ending, &v);
        switch (what) {
        case KD_SLURM_REQUEUED: ++*requeues; break;
        case KD_SLURM_STARTED: ++*starts; break;
        }
        if (what != KD_SLURM_STARTED)
            assert_int_equal(restarts, v.restarts);
    }
}

static void follower_steps(void **st)
{
    enum { Q = KESTREL_JOB_STATE_QUEUED, R = KESTREL_JOB_STATE_RUNNING };
    static const struct {
        const char *why;
        const char *polls[12];   /* STATE/Restarts, NULL-terminated */
        int restarts0, kstate0, requeues, starts, kstate;
    } cases[] = {
        /* a CI run counted it twice: requeued at the COMPLETING, started at the next, requeued at PENDING */
        { "a requeued job completes with its new count before it waits",
          { "PENDING/0", "RUNNING/0", "COMPLETING/1", "COMPLETING/1", "PENDING/1", "REQUEUED/1", "RUNNING/1",
            "COMPLETING/1", "COMPLETED/1", NULL }, 0, Q, 1, 2, R },
        { "requeued and running again between two polls: the count tells",
          { "RUNNING/0", "RUNNING/1", "RUNNING/1", NULL }, 0, Q, 1, 2, R },
        { "started and requeued between two polls, seen completing, then waiting: the start, the requeue",
          { "PENDING/0", "COMPLETING/1", "COMPLETING/1", "PENDING/1", "RUNNING/1", NULL }, 0, Q, 1, 2, R },
        { "started, requeued and started again between two polls: all three",
          { "PENDING/0", "RUNNING/1", "RUNNING/1", "RUNNING/1", NULL }, 0, Q, 1, 2, R },
        { "a short run seen only as it completes, then cancelled: it started",
          { "PENDING/0", "COMPLETING/0", "CANCELLED/0", NULL }, 0, Q, 0, 1, R },
        { "ran and ended between two polls: one start, from the final state",
          { "PENDING/0", "COMPLETING/0", "COMPLETED/0", NULL }, 0, Q, 0, 1, R },
        { "ran and ended between two polls, seen only ended: one start", { "PENDING/0", "COMPLETED/0", NULL },
          0, Q, 0, 1, R },
        { "cancelled while waiting: never started", { "PENDING/0", "CANCELLED/0", NULL }, 0, Q, 0, 0, Q },
        { "followed again after kestreld restarted while a requeued run completes: no start there",
          { "COMPLETING/1", "PENDING/1", "RUNNING/1", NULL }, -1, Q, 0, 1, R },
        { "followed again after kestreld restarted: the count is learnt, not taken for a requeue",
          { "RUNNING/3", "RUNNING/3", "PENDING/4", NULL }, -1, R, 1, 0, Q },
    };
    (void)st;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int requeues, starts, kstate = cases[i].kstate0;
        print_message("%s\n", cases[i].why);
        follow(cases[i].polls, cases[i].restarts0, &requeues, &starts, &kstate);
        assert_int_equal(requeues, cases[i].requeues);
        assert_int_equal(starts, cases[i].starts);
        assert_int_equal(kstate, cases[i].kstate);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scontrol_lines),
        cmocka_unit_test(squeue_json_jobs),
        cmocka_unit_test(sacct_lines),
        cmocka_unit_test(state_classes),
        cmocka_unit_test(follower_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
