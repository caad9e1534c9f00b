/* server/check_config.h - kestreld --check-config: the settings it would run with, after every
 * check that needs no start (the TLS files are PEM, ...), printed on stdout. */
#ifndef KD_CHECK_CONFIG_H
#define KD_CHECK_CONFIG_H

#include "engine.h"

/* 0 when the settings are sound ("config: ok"), 2 with the errors on stderr. */
int kd_check_config(const kd_config *cfg);
/* -1 (said on stderr) when Slurm pools are configured and the data dir's path holds '%' or '\\':
 * sbatch reads them in --output as patterns (a hostile test lost every output line and recorded a
 * signal for an exit). Checked at start too. */
int kd_check_slurm_data_dir(const kd_config *cfg);

#endif
