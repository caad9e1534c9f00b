/* server/bounded_regex.c - POSIX extended regular expressions matched in bounded time (see bounded_regex.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include "bounded_regex.h"

/* Backtracking steps of one match: 1,000,000 took 10-30 ms on a line of 65,000 bytes here (PCRE2's
 * default, 10,000,000, ten times that); a pattern that needs more on a line is an attack, or one
 * that no log search needs. */
#define MATCH_LIMIT 1000000

struct kd_regex {
    pcre2_code *code;
    pcre2_match_context *limits;
};

kd_regex *kd_regex_new(const char *pattern, int icase, char *why, size_t n)
{
    kd_regex *re = calloc(1, sizeof(*re));
    PCRE2_UCHAR msg[160];
    PCRE2_SIZE at = 0;
    regex_t posix;
    int rc;
    if (re == NULL) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    /* the syntax is POSIX's, as it always was here (glibc's, GNU's \b \w \s included): checked by
     * regcomp, then matched by PCRE2, whose syntax takes it with the same meaning */
    if ((rc = regcomp(&posix, pattern, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0))) != 0) {
        regerror(rc, &posix, why, n);
        free(re);
        return NULL;
    }
    regfree(&posix);
    re->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, icase ? PCRE2_CASELESS : 0, &rc, &at, NULL);
    if (re->code == NULL) {
        pcre2_get_error_message(rc, msg, sizeof(msg));
        snprintf(why, n, "%s", (char *)msg);
        free(re);
        return NULL;
    }
    if ((re->limits = pcre2_match_context_create(NULL)) == NULL) {
        snprintf(why, n, "out of memory");
        kd_regex_free(re);
        return NULL;
    }
    pcre2_set_match_limit(re->limits, MATCH_LIMIT);
    return re;
}

int kd_regex_match(const kd_regex *re, const char *text, size_t len)
{
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);   /* a thread's own */
    int rc;
    if (md == NULL)
        return 0;
    rc = pcre2_match(re->code, (PCRE2_SPTR)text, len, 0, 0, md, re->limits);
    pcre2_match_data_free(md);
    return rc >= 0;   /* 0: matched, more groups than the match data holds */
}

void kd_regex_free(kd_regex *re)
{
    if (re == NULL)
        return;
    pcre2_code_free(re->code);
    pcre2_match_context_free(re->limits);
    free(re);
}
