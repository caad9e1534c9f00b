/* server/bounded_regex.h - POSIX extended regular expressions matched in bounded time: log search
 * (regex=1) and log policies, patterns their users write.
 *
 * glibc's regexec backtracks without bound: "aaa(a|aa)*b" took 6 s on one line of 65,000 'a's (its
 * time grows with the square of the line), and neither the search's deadline (checked between
 * SQLite's steps) nor a closed connection could stop it (a hostile test: four such searches held
 * both cores for minutes, every other user's search refused 429, kestreld's stop waiting on them).
 * The pattern is checked as POSIX extended (glibc's regcomp, GNU's \b \w \s \< \> included, as before),
 * rewritten where PCRE2's syntax reads it otherwise (bounded_regex.c), and matched by PCRE2, each
 * match with a budget (MATCH_LIMIT steps, 10-30 ms a line of 64 KiB here; HEAP_LIMIT_KIB of memory):
 * a line past it is taken for no match. */
#ifndef KD_BOUNDED_REGEX_H
#define KD_BOUNDED_REGEX_H

#include <stddef.h>

typedef struct kd_regex kd_regex;

/* pattern (ASCII letters in any case with icase), or NULL with why (n bytes) filled. */
kd_regex *kd_regex_new(const char *pattern, int icase, char *why, size_t n);
/* 1 when re matches somewhere in text[0, len), 0 when not or past its budget. Any thread. */
int kd_regex_match(const kd_regex *re, const char *text, size_t len);
void kd_regex_free(kd_regex *re);

#endif
