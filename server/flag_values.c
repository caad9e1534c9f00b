/* server/flag_values.c - the values of kestreld's flags (flag_values.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "flag_values.h"

int kd_flag_int(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    long x;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || *end || !*v || x < lo || x > hi) {
        fprintf(stderr, "kestreld: %s: expected an integer in %ld..%ld, got '%s'\n", flag, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* lo..hi in the largest unit both are whole multiples of ("1M to 1T") */
static void shown(int64_t n, char *out, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && n && n % 1024 == 0) {
        n /= 1024;
        u++;
    }
    snprintf(out, len, u < 0 ? "%lld" : "%lld%c", (long long)n, u < 0 ? 0 : units[u]);
}

int kd_flag_size(const char *flag, const char *v, int64_t lo, int64_t hi, const char *example, int64_t *out)
{
    char *end, a[32], b[32];
    long long x;
    int64_t mult = 1;
    errno = 0;
    x = strtoll(v, &end, 10);
    switch (*end) {
    case 'K': case 'k': mult = (int64_t)1 << 10; end++; break;
    case 'M': case 'm': mult = (int64_t)1 << 20; end++; break;
    case 'G': case 'g': mult = (int64_t)1 << 30; end++; break;
    case 'T': case 't': mult = (int64_t)1 << 40; end++; break;
    default: break;
    }
    if (errno || end == v || *end || v[0] < '0' || v[0] > '9' || x > hi / mult || x * mult < lo) {
        shown(lo, a, sizeof(a));
        shown(hi, b, sizeof(b));
        fprintf(stderr, "kestreld: %s: a size from %s to %s, e.g. %s, got '%s'\n", flag, a, b, example, v);
        return -1;
    }
    *out = x * mult;
    return 0;
}
