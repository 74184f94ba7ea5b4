/* Helpers shared by the cmocka tests: where ../shared is, temp files, npy loading. */
#ifndef LP_TESTS_TEST_UTIL_H
#define LP_TESTS_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

/* Exit code ctest reads as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define LP_TEST_SKIP 77

/* The shared data folder, or NULL when absent (a user's fresh clone). */
static inline const char *lp_test_shared_dir(void)
{
    const char *dir = getenv("LOUPE_SHARED");
    struct stat st;
    if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return NULL;
    return dir;
}

/* Build "<shared>/<rel>" into buf; returns buf. */
static inline const char *lp_test_shared_path(char *buf, size_t size, const char *rel)
{
    const char *dir = lp_test_shared_dir();
    snprintf(buf, size, "%s/%s", dir ? dir : "../shared", rel);
    return buf;
}

/* Call at the top of main() of a test that needs ../shared: exits 77 with a clear message. */
#define LP_TEST_REQUIRE_SHARED()                                                              \
    do {                                                                                      \
        if (!lp_test_shared_dir()) {                                                          \
            printf("SKIP: ../shared not found (set LOUPE_SHARED); golden tests need it\n"); \
            return LP_TEST_SKIP;                                                              \
        }                                                                                     \
    } while (0)

/* True in a sanitizer build, where peak memory is not the product's (see tests/CMakeLists.txt). */
static inline int lp_test_sanitized(void)
{
    const char *v = getenv("LOUPE_SANITIZED");
    return v && strcmp(v, "1") == 0;
}

/* A writable scratch directory for generated files. */
static inline const char *lp_test_tmp_dir(void)
{
    const char *dir = getenv("LOUPE_TEST_TMP");
    return dir && *dir ? dir : "/tmp";
}

#endif
