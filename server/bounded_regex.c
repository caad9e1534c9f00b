/* server/bounded_regex.c - POSIX extended regular expressions matched in bounded time (see bounded_regex.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounded_regex.h"

/* Backtracking steps of one match: 1,000,000 took 10-30 ms on a line of 65,000 bytes here (PCRE2's
 * default, 10,000,000, ten times that); a pattern that needs more on a line is an attack, or one
 * that no log search needs. */
#define MATCH_LIMIT 1000000
/* The memory one match may take for its backtracking, in KiB: PCRE2's default is 20 GB, and 300
 * groups under a star took 6 GB on one line of 64 KiB (a review); 16 MiB stops that at its limit. */
#define HEAP_LIMIT_KIB 16384

/* pattern, POSIX extended as glibc reads it, in PCRE2's syntax, into out (at least 10 times its
 * length + 1): the two read alike but for what is rewritten here. A backslash in a bracket
 * expression is itself ([\]] is "\ or ]" in POSIX, "]" in PCRE2); GNU's \< and \> are a word's
 * start and end, \` and \' the text's; a backslash before another letter or digit is that letter
 * in glibc (\d is d), its class or escape in PCRE2 (\d, \x41, \Q): the letter; a{,3} is a{0,3}. */
static void posix_to_pcre2(const char *pattern, char *out)
{
    const char *p = pattern;
    char *o = out;
    while (*p) {
        if (*p == '[') {   /* a bracket expression, to its closing ']' (one first, or after '^', is itself) */
            *o++ = *p++;
            if (*p == '^')
                *o++ = *p++;
            if (*p == ']')
                *o++ = *p++;
            while (*p && *p != ']') {
                if (*p == '[' && (p[1] == ':' || p[1] == '=' || p[1] == '.')) {   /* [:alpha:], [=a=], [.a.] */
                    const char *close = strstr(p + 2, (char[]){ p[1], ']', 0 });
                    size_t n = close ? (size_t)(close + 2 - p) : 1;
                    memcpy(o, p, n);
                    o += n;
                    p += n;
                } else if (*p == '\\') {
                    *o++ = '\\';
                    *o++ = *p++;
                } else {
                    *o++ = *p++;
                }
            }
            if (*p)
                *o++ = *p++;
        } else if (*p == '\\' && p[1]) {
            const char *as = p[1] == '<' ? "\\b(?=\\w)" : p[1] == '>' ? "\\b(?<=\\w)" : p[1] == '`' ? "\\A"
                           : p[1] == '\'' ? "\\z" : NULL;
            if (as) {
                o += sprintf(o, "%s", as);
            } else if (isalnum((unsigned char)p[1]) && !strchr("bBwWsS", p[1])) {
                *o++ = p[1];   /* the letter or digit itself, as glibc reads it (back-references are refused) */
            } else {
                *o++ = '\\';
                *o++ = p[1];
            }
            p += 2;
        } else if (*p == '{' && p[1] == ',') {
            o += sprintf(o, "{0,");
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
}

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
    char *translated;
    int rc;
    if (re == NULL) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    /* the syntax is POSIX's, as it always was here (glibc's, GNU's \b \w \s included): checked by
     * regcomp, then matched by PCRE2, its syntax rewritten where the two differ */
    if ((rc = regcomp(&posix, pattern, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0))) != 0) {
        regerror(rc, &posix, why, n);
        free(re);
        return NULL;
    }
    regfree(&posix);
    if ((translated = malloc(10 * strlen(pattern) + 1)) == NULL) {
        snprintf(why, n, "out of memory");
        free(re);
        return NULL;
    }
    posix_to_pcre2(pattern, translated);
    /* $ at the very end alone, . any byte: as glibc reads a line */
    re->code = pcre2_compile((PCRE2_SPTR)translated, PCRE2_ZERO_TERMINATED,
                             PCRE2_DOLLAR_ENDONLY | PCRE2_DOTALL | (icase ? PCRE2_CASELESS : 0), &rc, &at, NULL);
    free(translated);
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
    pcre2_set_heap_limit(re->limits, HEAP_LIMIT_KIB);
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
