/* examples/c/list_jobs.c - a C consumer of libkestrel.
 *
 * Prints the library version; with KESTREL_URL (and KESTREL_TOKEN) set, submits a
 * short job, waits for it and lists your newest jobs.
 *   cc list_jobs.c $(pkg-config --cflags --libs kestrel) -o list_jobs */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <kestrel.h>

static int fail(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, kestrel_error_last()->message);
    return 1;
}

int main(void)
{
    const char *argv[] = { "echo", "hello from C" };
    kestrel_job_list_options lo = KESTREL_JOB_LIST_OPTIONS_INIT;
    kestrel_client *client;
    kestrel_job_spec *spec;
    kestrel_job *job;
    kestrel_job_page *page;
    size_t i;

    if (kestrel_version_number() != KESTREL_VERSION_NUMBER) {
        fprintf(stderr, "header %s but library %s\n", KESTREL_VERSION_STRING, kestrel_version());
        return 1;
    }
    printf("libkestrel %s\n", kestrel_version());
    if (getenv("KESTREL_URL") == NULL)
        return 0;
    if (kestrel_init() < 0 || kestrel_client_new(&client, NULL, NULL) < 0)
        return fail("client");
    if (kestrel_job_spec_new(&spec) < 0 || kestrel_job_spec_set_argv(spec, argv, 2) < 0 ||
        kestrel_job_spec_set_name(spec, "c-example") < 0 || kestrel_job_submit(&job, client, spec) < 0)
        return fail("submit");
    printf("submitted job %" PRId64 "\n", kestrel_job_id(job));
    kestrel_job_spec_free(spec);
    {
        int64_t id = kestrel_job_id(job);
        kestrel_job_free(job);
        if (kestrel_job_wait(&job, client, id, 30000) < 0)
            return fail("wait");
    }
    printf("job %" PRId64 ": %s\n", kestrel_job_id(job), kestrel_job_state_name(kestrel_job_state(job)));
    kestrel_job_free(job);
    lo.page_size = 5;
    if (kestrel_job_list(&page, client, &lo) < 0)
        return fail("list");
    for (i = 0; i < kestrel_job_page_count(page); i++) {
        const kestrel_job *j = kestrel_job_page_at(page, i);
        printf("  %" PRId64 " %-10s %s\n", kestrel_job_id(j), kestrel_job_state_name(kestrel_job_state(j)),
               kestrel_job_name(j));
    }
    kestrel_job_page_free(page);
    kestrel_client_free(client);
    kestrel_shutdown();
    return 0;
}
