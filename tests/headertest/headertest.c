/* The public header must compile alone as C89 -pedantic and C99, with every warning an error. */
#include <kestrel.h>

int kestrel_headertest_c(void);
int kestrel_headertest_c(void)
{
    kestrel_client_options o = KESTREL_CLIENT_OPTIONS_INIT;
    kestrel_buf b = KESTREL_BUF_INIT;
    (void)b;
    return (int)o.version + KESTREL_VERSION_NUMBER;
}
