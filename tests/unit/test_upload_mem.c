/* Unit tests: kestreld's budget of memory for request bodies (server/upload_mem.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "upload_mem.h"

static uint64_t held_in_all(kd_upload_mem *m)
{
    uint64_t mine, held, total;
    kd_upload_mem_state(m, 0, &mine, &held, &total);
    return held;
}

/* A user holds a quarter at most, all users the whole; what is given back may be taken again. */
static void test_quarters_and_the_whole(void **state)
{
    kd_upload_mem *m = kd_upload_mem_new(400);
    (void)state;
    assert_int_equal(kd_upload_mem_take(m, 1, 100), 0);
    assert_int_equal(kd_upload_mem_take(m, 1, 1), -1);        /* past user 1's quarter */
    assert_int_equal(kd_upload_mem_take(m, 2, 100), 0);
    assert_int_equal(kd_upload_mem_take(m, 3, 100), 0);
    assert_int_equal(kd_upload_mem_take(m, 4, 60), 0);
    assert_int_equal(kd_upload_mem_take(m, 5, 41), -1);       /* past the whole (40 left) */
    assert_int_equal(kd_upload_mem_take(m, 5, 40), 0);
    kd_upload_mem_give(m, 1, 100);
    assert_int_equal(held_in_all(m), 300);
    assert_int_equal(kd_upload_mem_take(m, 1, 100), 0);
    for (int64_t u = 1; u <= 5; u++)
        kd_upload_mem_give(m, u, 100);
    assert_int_equal(held_in_all(m), 0);
    kd_upload_mem_free(m);
}

/* A body without a length grows by doubling, but never past the largest body (cap): one within its
 * bound, refused because its doubling passed what was left, was found by a hostile test. */
static void test_doubling_stops_at_the_cap(void **state)
{
    kd_upload_mem *m = kd_upload_mem_new(4 * 1400);   /* a quarter: 1400 */
    kestrel_buf b = KESTREL_BUF_INIT;
    uint64_t held = 0, n;
    (void)state;
    for (n = 3; n <= 1000; n += 3)                    /* 1000 bytes in pieces of 3, the largest body */
        assert_int_equal(kd_upload_mem_fit(m, 7, &held, &b, n, 1, 1001), 0);
    assert_int_equal(held, 1001);                     /* 3 * 2^k would have passed 1001 (1536) */
    assert_true(b.reserved == held);
    assert_int_equal(held_in_all(m), held);
    kd_upload_mem_give(m, 7, held);
    kestrel_buf_dispose(&b);
    held = 0;                                         /* with a length: exactly that, at once */
    assert_int_equal(kd_upload_mem_fit(m, 7, &held, &b, 1399, 0, 0), 0);
    assert_int_equal(held, 1400);
    assert_int_equal(kd_upload_mem_fit(m, 8, &(uint64_t){ 0 }, &(kestrel_buf)KESTREL_BUF_INIT, 1400, 0, 0), -1);
    kd_upload_mem_give(m, 7, held);
    kestrel_buf_dispose(&b);
    kd_upload_mem_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quarters_and_the_whole),
        cmocka_unit_test(test_doubling_stops_at_the_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
