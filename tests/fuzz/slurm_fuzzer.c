/* tests/fuzz/slurm_fuzzer.c - Slurm's command output (scontrol show job -o, sacct -P lines) into
 * the parsers kestreld follows a cluster with: no crash, no leak, fields always terminated. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "slurm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    char *text = malloc(len + 1);
    kd_sview *v = NULL, one;
    size_t n = 0;
    if (text == NULL)
        return 0;
    memcpy(text, data, len);
    text[len] = '\0';
    if (kd_slurm_parse_scontrol(text, &v, &n) == 0)
        for (size_t i = 0; i < n; i++)
            if (strlen(v[i].id) >= sizeof(v[i].id) || strlen(v[i].state) >= sizeof(v[i].state) ||
                strlen(v[i].reason) >= sizeof(v[i].reason) || strlen(v[i].node) >= sizeof(v[i].node) ||
                kd_slurm_state_pending(v[i].state) < 0 || kd_slurm_state_final(v[i].state) < 0)
                abort();
    free(v);
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (kd_slurm_parse_sacct(line, &one) == 0 && strlen(one.state) >= sizeof(one.state))
            abort();
    free(text);
    return 0;
}
