/* Helpers the weights-reader tests share: writing raw files and opening them expecting success
 * or a one-line error. Include after test_util.h. */
#ifndef LP_TESTS_WEIGHTS_TEST_UTIL_H
#define LP_TESTS_WEIGHTS_TEST_UTIL_H

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inspect/inspect.h"

/* The process's scratch folder for the files a test writes: made at the start of main, removed
 * at the end when every test passed (a failure leaves its files to look at). */
static char tmp_root[512];

static inline const char *tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmp_root, name);
    return buf;
}

static inline void tmp_root_make(const char *name)
{
    snprintf(tmp_root, sizeof tmp_root, "%s/%s.%ld", lp_test_tmp_dir(), name, (long)getpid());
    mkdir(tmp_root, 0755);
}

/* Returns failed, the group's result, after removing tmp_root if it is 0. */
static inline int tmp_root_finish(int failed)
{
    if (!failed) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmp_root);
    }
    return failed;
}

static inline void write_bytes(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (size)
        assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

/* A raw safetensors file: 8-byte length, header text as given, data_len zero bytes. */
static inline void write_raw_st(const char *path, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    size_t size = 8 + hl + data_len;
    uint8_t *buf = calloc(1, size);
    assert_non_null(buf);
    uint64_t len = hl;
    memcpy(buf, &len, 8);
    memcpy(buf + 8, header, hl);
    write_bytes(path, buf, size);
    free(buf);
}

/* Open path, expect failure with code and a message containing every needle. */
static inline void expect_open_error(const char *path, lp_status code, const char *needle1,
                                     const char *needle2)
{
    lp_weights *w = NULL;
    lp_error err = {0};
    lp_status status = lp_weights_open(path, &w, &err);
    if (status == LP_OK)
        lp_weights_close(w);
    if (status != code || (needle1 && !strstr(err.msg, needle1)) ||
        (needle2 && !strstr(err.msg, needle2)))
        fail_msg("%s: got status %d '%s', want %d with '%s' '%s'", path, status, err.msg, code,
                 needle1 ? needle1 : "", needle2 ? needle2 : "");
    assert_null(w);
    assert_null(strchr(err.msg, '\n')); /* one line */
}

static inline lp_weights *open_ok(const char *path)
{
    lp_weights *w = NULL;
    lp_error err = {0};
    if (lp_weights_open(path, &w, &err) != LP_OK)
        fail_msg("lp_weights_open(%s): %s", path, err.msg);
    return w;
}

#endif
