// examples/cpp/submit.cpp - a C++17 consumer of libkestrel with RAII handles.
//
// Prints the library version; with KESTREL_URL (and KESTREL_TOKEN) set, submits a job,
// follows its log and reports how it ended.
//   c++ -std=c++17 submit.cpp $(pkg-config --cflags --libs kestrel) -o submit
#include <kestrel.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

namespace {

void check(int rc)
{
    if (rc < 0)
        throw std::runtime_error(kestrel_error_last()->message);
}

struct Library {
    Library() { check(kestrel_init()); }
    ~Library() { kestrel_shutdown(); }
};

template <typename T, void (*Free)(T *)>
struct Deleter {
    void operator()(T *p) const { Free(p); }
};
using Client = std::unique_ptr<kestrel_client, Deleter<kestrel_client, kestrel_client_free>>;
using Spec = std::unique_ptr<kestrel_job_spec, Deleter<kestrel_job_spec, kestrel_job_spec_free>>;
using Job = std::unique_ptr<kestrel_job, Deleter<kestrel_job, kestrel_job_free>>;

} // namespace

int main()
{
    static_assert(KESTREL_VERSION_CHECK(1, 0, 0), "needs libkestrel 1.0");
    std::printf("libkestrel %s\n", kestrel_version());
    if (!std::getenv("KESTREL_URL"))
        return 0;
    try {
        Library lib;
        kestrel_client *c = nullptr;
        check(kestrel_client_new(&c, nullptr, nullptr));
        Client client(c);

        kestrel_job_spec *s = nullptr;
        check(kestrel_job_spec_new(&s));
        Spec spec(s);
        const char *argv[] = { "sh", "-c", "echo step 1; echo step 2" };
        check(kestrel_job_spec_set_argv(spec.get(), argv, 3));
        check(kestrel_job_spec_set_name(spec.get(), "cpp-example"));
        check(kestrel_job_spec_set_priority(spec.get(), KESTREL_PRIORITY_HIGH));

        kestrel_job *j = nullptr;
        check(kestrel_job_submit(&j, client.get(), spec.get()));
        Job job(j);
        const int64_t id = kestrel_job_id(job.get());
        std::printf("submitted job %lld\n", static_cast<long long>(id));

        kestrel_logs_options lo = KESTREL_LOGS_OPTIONS_INIT;
        lo.follow = 1;
        check(kestrel_job_logs(nullptr, client.get(), id, &lo,
                               [](const kestrel_log_line *line, void *) -> int {
                                   std::printf("| %s\n", line->text);
                                   return 0;
                               },
                               nullptr));
        check(kestrel_job_wait(&j, client.get(), id, 30000));
        job.reset(j);
        std::printf("job %lld %s\n", static_cast<long long>(id), kestrel_job_state_name(kestrel_job_state(job.get())));
        return kestrel_job_state(job.get()) == KESTREL_JOB_STATE_SUCCEEDED ? 0 : 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
