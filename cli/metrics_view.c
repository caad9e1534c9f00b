/* cli/metrics_view.c - a job's metrics for people: pivoted by step (a column a metric; per-epoch
 * and per-batch series apart, as they count steps differently), drawn as curves in the terminal
 * (Unicode braille, sized to it), and several runs side by side (kestrel compare). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "cli.h"

#define MAX_COLS 12

/* "batch/loss" counts batches, "loss" epochs: the part before the first '/' names the family. */
static void family_of(const char *name, char *out, size_t n)
{
    const char *slash = strchr(name, '/');
    snprintf(out, n, "%.*s", slash ? (int)(slash - name) : 0, name);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int term_width(void)
{
    int cols = cli_term_columns();
    return cols ? cols : 100;
}

/* One family's pivot: STEP, then a column per name, the latest value reported for each step. */
static void pivot_family(const kestrel_metric_list *m, const char *family)
{
    const char *names[MAX_COLS];
    size_t nn = 0, np = kestrel_metric_list_count(m), ns = 0;
    int64_t *steps = malloc((np + 1) * sizeof(*steps));
    char fam[128];
    int more = 0;
    if (steps == NULL)
        return;
    for (size_t i = 0; i < np; i++) {
        const kestrel_metric *p = kestrel_metric_list_at(m, i);
        size_t k;
        family_of(p->name, fam, sizeof(fam));
        if (strcmp(fam, family))
            continue;
        for (k = 0; k < nn && strcmp(names[k], p->name); k++)
            ;
        if (k == nn) {
            if (nn == MAX_COLS) {
                more = 1;
                continue;
            }
            names[nn++] = p->name;
        }
        steps[ns++] = p->step;
    }
    qsort(steps, ns, sizeof(*steps), cmp_i64);
    printf("%s%s\n%-10s", family[0] ? family : "per epoch", !strcmp(family, "batch") ? " (per batch step)" : "",
           "STEP");   /* another family's steps are what its reporter made them */
    for (size_t k = 0; k < nn; k++)
        printf(" %14.14s", names[k] + (family[0] ? strlen(family) + 1 : 0));
    printf("\n");
    for (size_t s = 0; s < ns; s++) {
        if (s && steps[s] == steps[s - 1])
            continue;
        printf("%-10" PRId64, steps[s]);
        for (size_t k = 0; k < nn; k++) {
            const kestrel_metric *hit = NULL;
            for (size_t i = 0; i < np; i++) {   /* the points are few per step: a scan is fine */
                const kestrel_metric *p = kestrel_metric_list_at(m, i);
                if (p->step == steps[s] && !strcmp(p->name, names[k]))
                    hit = p;
            }
            if (hit)
                printf(" %14.6g", hit->value);
            else
                printf(" %14s", "");
        }
        printf("\n");
    }
    if (more)
        printf("(more than %d metrics in this family: kestrel metrics --name NAME shows one)\n", MAX_COLS);
    free(steps);
}

void cli_metrics_pivot(const kestrel_metric_list *m)
{
    enum { MAXF = 64 };
    char fams[MAXF][128], fam[128];
    size_t nf = 0;
    int more = 0;
    for (size_t i = 0; i < kestrel_metric_list_count(m); i++) {
        size_t k;
        family_of(kestrel_metric_list_at(m, i)->name, fam, sizeof(fam));
        for (k = 0; k < nf && strcmp(fams[k], fam); k++)
            ;
        if (k == nf && nf < MAXF)
            snprintf(fams[nf++], sizeof(fams[0]), "%s", fam);
        else if (k == nf)
            more = 1;
    }
    if (nf == 0)
        printf("no metrics reported\n");
    for (size_t k = 0; k < nf; k++) {   /* per epoch first, then the others by name */
        size_t best = k;
        for (size_t j = k + 1; j < nf; j++)
            if (strcmp(fams[j], fams[best]) < 0)
                best = j;
        if (best != k) {
            memcpy(fam, fams[k], sizeof(fam));
            memcpy(fams[k], fams[best], sizeof(fam));
            memcpy(fams[best], fam, sizeof(fam));
        }
        if (k)
            printf("\n");
        pivot_family(m, fams[k]);
    }
    if (more)
        printf("\n(more than %d families of metrics: kestrel metrics --name NAME or -o json shows the rest)\n", MAXF);
}

/* One curve in braille: a cell is 2 x 4 dots (U+2800 + bits). */
static void plot_one(const kestrel_metric_list *m, const char *name, int width)
{
    static const int bit[4][2] = { { 0x01, 0x08 }, { 0x02, 0x10 }, { 0x04, 0x20 }, { 0x40, 0x80 } };
    enum { ROWS = 10 };
    int cols = width - 12 > 20 ? width - 12 : 20;
    unsigned char *grid = calloc((size_t)cols * ROWS, 1);
    double lo = INFINITY, hi = -INFINITY;
    int64_t s0 = INT64_MAX, s1 = INT64_MIN;
    size_t n = 0;
    int px = 0, py = 0;
    if (grid == NULL)
        return;
    for (size_t i = 0; i < kestrel_metric_list_count(m); i++) {
        const kestrel_metric *p = kestrel_metric_list_at(m, i);
        if (strcmp(p->name, name) || !isfinite(p->value))
            continue;
        lo = p->value < lo ? p->value : lo;
        hi = p->value > hi ? p->value : hi;
        s0 = p->step < s0 ? p->step : s0;
        s1 = p->step > s1 ? p->step : s1;
        n++;
    }
    if (n == 0) {
        printf("%s: no finite values\n", name);
        free(grid);
        return;
    }
    if (hi == lo) {   /* a constant: an axis around it, the line in the middle */
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    for (size_t i = 0, drawn = 0; i < kestrel_metric_list_count(m); i++) {   /* in step order: a line joins them */
        const kestrel_metric *p = kestrel_metric_list_at(m, i);
        int x, y, steps;
        if (strcmp(p->name, name) || !isfinite(p->value))
            continue;
        x = s1 > s0 ? (int)((double)(p->step - s0) / (double)(s1 - s0) * (cols * 2 - 1)) : 0;
        y = (int)((hi - p->value) / (hi - lo) * (ROWS * 4 - 1));
        steps = drawn++ ? (abs(x - px) > abs(y - py) ? abs(x - px) : abs(y - py)) : 0;
        for (int t = 0; t <= steps; t++) {
            int xi = steps ? px + (x - px) * t / steps : x, yi = steps ? py + (y - py) * t / steps : y;
            grid[(size_t)(yi / 4) * (size_t)cols + (size_t)(xi / 2)] |= (unsigned char)bit[yi % 4][xi % 2];
        }
        px = x;
        py = y;
    }
    printf("%s (%zu point%s, steps %" PRId64 "..%" PRId64 ")\n", name, n, n == 1 ? "" : "s", s0, s1);
    for (int r = 0; r < ROWS; r++) {
        if (r == 0)
            printf("%10.4g ┤", hi);
        else if (r == ROWS - 1)
            printf("%10.4g ┤", lo);
        else
            printf("%10s │", "");
        for (int c = 0; c < cols; c++) {
            unsigned int cp = 0x2800u + grid[(size_t)r * (size_t)cols + (size_t)c];
            /* UTF-8 of U+28xx: three bytes */
            putchar((int)(0xE0 | (cp >> 12)));
            putchar((int)(0x80 | ((cp >> 6) & 0x3F)));
            putchar((int)(0x80 | (cp & 0x3F)));
        }
        putchar('\n');
    }
    printf("%10s └%" PRId64 "%*" PRId64 "\n", "", s0, cols - (int)snprintf(NULL, 0, "%" PRId64, s0), s1);
    free(grid);
}

void cli_metrics_plot(const kestrel_metric_list *m)
{
    const char *seen[64];
    size_t ns = 0;
    int width = term_width();
    for (size_t i = 0; i < kestrel_metric_list_count(m) && ns < 64; i++) {
        const char *name = kestrel_metric_list_at(m, i)->name;
        size_t k;
        for (k = 0; k < ns && strcmp(seen[k], name); k++)
            ;
        if (k < ns)
            continue;
        seen[ns++] = name;
        if (ns > 1)
            printf("\n");
        plot_one(m, name, width);
    }
    if (ns == 64)
        printf("\n(the first 64 metrics are drawn: kestrel metrics --plot --name NAME draws another)\n");
    if (ns == 0)
        printf("no metrics reported\n");
}

/* The last (highest step) value of name in m, or NAN. */
static double last_value(const kestrel_metric_list *m, const char *name)
{
    int64_t best = INT64_MIN;
    double v = NAN;
    for (size_t i = 0; i < kestrel_metric_list_count(m); i++) {
        const kestrel_metric *p = kestrel_metric_list_at(m, i);
        if (!strcmp(p->name, name) && p->step >= best) {
            best = p->step;
            v = p->value;
        }
    }
    return v;
}

static const char *param_of(const kestrel_job *j, const char *key)
{
    for (size_t i = 0; i < kestrel_job_param_count(j); i++) {
        const char *k, *v;
        if (kestrel_job_param_at(j, i, &k, &v) == 0 && !strcmp(k, key))
            return v;
    }
    return "";
}

/* Add s to the set (borrowed strings, kept sorted), at most cap. */
static void set_add(const char **set, size_t *n, size_t cap, const char *s)
{
    size_t i = 0;
    while (i < *n && strcmp(set[i], s) < 0)
        i++;
    if ((i < *n && !strcmp(set[i], s)) || *n == cap)
        return;
    memmove(&set[i + 1], &set[i], (*n - i) * sizeof(*set));
    set[i] = s;
    (*n)++;
}

int cmd_compare(cli_ctx *ctx, int argc, char **argv)
{
    enum { MAXJ = 10, MAXROWS = 64 };
    kestrel_job *jobs[MAXJ] = { 0 };
    kestrel_metric_list *ms[MAXJ] = { 0 };
    const char *keys[MAXROWS], *names[MAXROWS];
    size_t nj = 0, nk = 0, nm = 0;
    int rc = 0;
    if (argc < 3 || argc > MAXJ + 1)
        return cli_usage_error("compare");
    for (int i = 1; i < argc; i++) {
        int64_t id;
        if (cli_job_id(argv[i], &id) < 0)
            return cli_usage_error("compare");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    for (int i = 1; i < argc && rc == 0; i++, nj++) {
        int64_t id = strtoll(argv[i], NULL, 10);
        if ((rc = kestrel_job_get(&jobs[nj], ctx->client, id)) < 0 ||
            (rc = kestrel_job_metrics(&ms[nj], ctx->client, id, NULL)) < 0)
            rc = cli_fail("compare", rc);
        else if (kestrel_metric_list_more(ms[nj]))
            fprintf(stderr, "kestrel: job %" PRId64 " holds more metric points than the 100,000 read: its final "
                    "values may be missing below\n", id);
    }
    for (size_t j = 0; rc == 0 && j < nj; j++) {
        for (size_t i = 0; i < kestrel_job_param_count(jobs[j]); i++) {
            const char *k, *v;
            if (kestrel_job_param_at(jobs[j], i, &k, &v) == 0)
                set_add(keys, &nk, MAXROWS, k);
        }
        for (size_t i = 0; i < kestrel_metric_list_count(ms[j]); i++)
            set_add(names, &nm, MAXROWS, kestrel_metric_list_at(ms[j], i)->name);
    }
    if (rc == 0 && ctx->json) {
        printf("[");
        for (size_t j = 0; j < nj; j++) {
            kestrel_buf b = KESTREL_BUF_INIT;
            kestrel_job_to_json(&b, jobs[j]);
            printf("%s\n{\"job\":%s,\"final_metrics\":{", j ? "," : "", b.ptr ? b.ptr : "null");
            for (size_t k = 0; k < nm; k++) {
                double v = last_value(ms[j], names[k]);
                cli_json_string(stdout, names[k]);
                if (isfinite(v))
                    printf(":%.17g%s", v, k + 1 < nm ? "," : "");
                else
                    printf(":%s%s", isnan(v) ? "null" : v > 0 ? "\"Infinity\"" : "\"-Infinity\"", k + 1 < nm ? "," : "");
            }
            printf("}}");
            kestrel_buf_dispose(&b);
        }
        printf("\n]\n");
    } else if (rc == 0) {
        printf("%-22s", "");
        for (size_t j = 0; j < nj; j++)
            printf(" %16" PRId64, kestrel_job_id(jobs[j]));
        printf("\n%-22s", "name");
        for (size_t j = 0; j < nj; j++)
            printf(" %16.16s", kestrel_job_name(jobs[j])[0] ? kestrel_job_name(jobs[j]) : "-");
        printf("\n%-22s", "state");
        for (size_t j = 0; j < nj; j++)
            printf(" %16s", kestrel_job_state_name(kestrel_job_state(jobs[j])));
        for (size_t k = 0; k < nk; k++) {
            int differs = 0;
            for (size_t j = 1; j < nj; j++)
                differs |= strcmp(param_of(jobs[j], keys[k]), param_of(jobs[0], keys[k])) != 0;
            printf("\n%c param %-14.14s", differs ? '*' : ' ', keys[k]);
            for (size_t j = 0; j < nj; j++)
                printf(" %16.16s", param_of(jobs[j], keys[k])[0] ? param_of(jobs[j], keys[k]) : "-");
        }
        for (size_t k = 0; k < nm; k++) {
            printf("\n  last %-15.15s", names[k]);
            for (size_t j = 0; j < nj; j++) {
                int has = 0;
                for (size_t i = 0; i < kestrel_metric_list_count(ms[j]) && !has; i++)
                    has = !strcmp(kestrel_metric_list_at(ms[j], i)->name, names[k]);
                if (has)
                    printf(" %16.6g", last_value(ms[j], names[k]));
                else
                    printf(" %16s", "-");
            }
        }
        printf("\n(* the params that differ)\n");
    }
    for (size_t j = 0; j < MAXJ; j++) {
        kestrel_job_free(jobs[j]);
        kestrel_metric_list_free(ms[j]);
    }
    return rc < 0 ? 1 : rc;
}
