// The public header must compile as C++ (extern "C", no C-only constructs).
#include <kestrel.h>

int kestrel_headertest_cpp();
int kestrel_headertest_cpp()
{
    kestrel_job_list_options o = KESTREL_JOB_LIST_OPTIONS_INIT;
    return static_cast<int>(o.version) + 1;
}
