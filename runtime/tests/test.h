/* test.h — the runtime's tiny C test framework: TEST(name) registers a test,
 * CHECK* record failures with file and line; the runner prints
 * "N passed, N failed". */
#ifndef VTPU_TEST_H
#define VTPU_TEST_H

#include <stdio.h>
#include <string.h>

typedef void (*vt_test_fn)(void);
void vt_test_register(const char *name, vt_test_fn fn);
void vt_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define TEST(name)                                                                 \
    static void test_##name(void);                                                 \
    __attribute__((constructor)) static void register_##name(void) {               \
        vt_test_register(#name, test_##name);                                      \
    }                                                                              \
    static void test_##name(void)

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) vt_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);         \
    } while (0)
#define CHECK_MSG(cond, ...)                                                       \
    do {                                                                           \
        if (!(cond)) vt_test_fail(__FILE__, __LINE__, __VA_ARGS__);                \
    } while (0)
#define CHECK_OK(expr)                                                             \
    do {                                                                           \
        vt_status s_ = (expr);                                                     \
        if (s_ != VT_OK)                                                           \
            vt_test_fail(__FILE__, __LINE__, "%s -> %s: %s", #expr,                \
                         vt_status_string(s_), vt_last_error());                   \
    } while (0)
#define CHECK_STATUS(expr, want)                                                   \
    do {                                                                           \
        vt_status s_ = (expr);                                                     \
        if (s_ != (want))                                                          \
            vt_test_fail(__FILE__, __LINE__, "%s -> %s, want %s", #expr,           \
                         vt_status_string(s_), vt_status_string(want));            \
    } while (0)

#endif
