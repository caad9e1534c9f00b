/* server/config.h - kestreld's config file (rules in config.c). */
#ifndef KD_CONFIG_H
#define KD_CONFIG_H

#include <getopt.h>

/* When argv names --config FILE, *argv_out is argv[0], the file's settings as long flags (except
 * those the command line gives itself), then argv[1..]; else argv itself. -1 after printing why. */
int kd_config_merge(int argc, char **argv, const struct option *opts, int *argc_out, char ***argv_out);

#endif
