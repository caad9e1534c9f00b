/* Unit tests: the pure scheduling pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "sched_plan.h"

static int cmp(const void *a, const void *b)
{
    return kd_sched_order(a, b);
}

static void order_is_class_then_submit_time_then_id(void **state)
{
    kd_sched_job q[] = {
        { 5, 1, 0, 100 }, { 4, 3, 0, 300 }, { 3, 2, 0, 50 }, { 2, 3, 0, 200 }, { 1, 1, 0, 100 },
    };
    (void)state;
    qsort(q, 5, sizeof(q[0]), cmp);
    assert_int_equal(q[0].id, 2);   /* urgent, earliest */
    assert_int_equal(q[1].id, 4);   /* urgent */
    assert_int_equal(q[2].id, 3);   /* high */
    assert_int_equal(q[3].id, 1);   /* normal, same time as 5: lower id first */
    assert_int_equal(q[4].id, 5);
}

static void places_on_free_devices_and_respects_slots(void **state)
{
    uint8_t busy[4] = { 1, 0, 0, 0 };
    kd_sched_node node = { 4, busy, 2 };
    kd_sched_job q[] = { { 1, 3, 2, 1 }, { 2, 2, 1, 2 }, { 3, 1, 0, 3 } };
    kd_sched_start s[3];
    int dev[4];
    size_t n;
    (void)state;
    n = kd_sched_plan(q, 3, &node, s, 3, dev);
    assert_int_equal(n, 2);               /* two slots */
    assert_int_equal(s[0].job_id, 1);
    assert_int_equal(s[0].ndev, 2);
    assert_int_equal(dev[s[0].dev_off], 1);
    assert_int_equal(dev[s[0].dev_off + 1], 2);
    assert_int_equal(s[1].job_id, 2);
    assert_int_equal(dev[s[1].dev_off], 3);
    assert_int_equal(busy[1], 0);         /* input untouched: the pass is pure */
}

static void blocked_gpu_job_is_not_overtaken_by_gpu_jobs(void **state)
{
    uint8_t busy[4] = { 1, 1, 0, 0 };
    kd_sched_node node = { 4, busy, 10 };
    /* urgent needs 4 (blocked), a normal 1-GPU job must not take a device; CPU jobs may run */
    kd_sched_job q[] = { { 1, 3, 4, 1 }, { 2, 1, 1, 2 }, { 3, 1, 0, 3 } };
    kd_sched_start s[3];
    int dev[4];
    size_t n;
    (void)state;
    n = kd_sched_plan(q, 3, &node, s, 3, dev);
    assert_int_equal(n, 1);
    assert_int_equal(s[0].job_id, 3);
    assert_int_equal(s[0].ndev, 0);
}

static void deterministic(void **state)
{
    uint8_t busy[8] = { 0 };
    kd_sched_node node = { 8, busy, 8 };
    kd_sched_job q[6];
    kd_sched_start a[6], b[6];
    int da[8], db[8];
    (void)state;
    size_t na, nb;
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    for (int i = 0; i < 6; i++)
        q[i] = (kd_sched_job){ i + 1, 1 + i % 3, (i * 3) % 4, i };
    na = kd_sched_plan(q, 6, &node, a, 6, da);
    nb = kd_sched_plan(q, 6, &node, b, 6, db);
    assert_int_equal(na, nb);
    assert_true(na > 0);
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_equal(da, db, sizeof(int) * a[na - 1].dev_off);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(order_is_class_then_submit_time_then_id),
        cmocka_unit_test(places_on_free_devices_and_respects_slots),
        cmocka_unit_test(blocked_gpu_job_is_not_overtaken_by_gpu_jobs),
        cmocka_unit_test(deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
