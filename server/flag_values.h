/* server/flag_values.h - the values of kestreld's flags: integers and sizes, each checked against
 * its range with one message form (flag_values.c). */
#ifndef KD_FLAG_VALUES_H
#define KD_FLAG_VALUES_H

#include <stdint.h>

/* A decimal integer in lo..hi into *out: 0, or -1 after printing why (naming flag). */
int kd_flag_int(const char *flag, const char *v, long lo, long hi, long *out);

/* A size in bytes: digits, then K, M, G or T (binary; none: bytes), in lo..hi bytes, into *out: 0,
 * or -1 after printing why, with the range in the same units (example: "256M"). */
int kd_flag_size(const char *flag, const char *v, int64_t lo, int64_t hi, const char *example, int64_t *out);

#endif
