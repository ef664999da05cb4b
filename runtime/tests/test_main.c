/* test_main.c — runs every registered C test (or those whose name contains
 * one of the arguments) and prints the "N passed, N failed" summary. */
#include <stdarg.h>
#include <stdlib.h>

#include "test.h"

#define MAX_TESTS 1024
static struct { const char *name; vt_test_fn fn; } tests[MAX_TESTS];
static int n_tests, current_failed;

void vt_test_register(const char *name, vt_test_fn fn) {
    if (n_tests < MAX_TESTS) {
        tests[n_tests].name = name;
        tests[n_tests].fn = fn;
        n_tests++;
    }
}

void vt_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    if (current_failed < 10) {
        fprintf(stderr, "  %s:%d: ", file, line);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    current_failed++;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0;
    /* Two devices, so cross-device work is tested (unless the caller says otherwise). */
    setenv("VTPU_NUM_DEVICES", "2", 0);
    for (int i = 0; i < n_tests; i++) {
        int chosen = argc <= 1; /* every test, or those whose name contains one of the arguments */
        for (int a = 1; a < argc && !chosen; a++) chosen = strstr(tests[i].name, argv[a]) != NULL;
        if (!chosen) continue;
        current_failed = 0;
        tests[i].fn();
        if (current_failed) {
            fprintf(stderr, "FAIL %s (%d checks)\n", tests[i].name, current_failed);
            failed++;
        } else {
            passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
