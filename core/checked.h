/* Checked 64-bit arithmetic for sizes that come from files or users: overflow is an error,
 * never a wrap-around. Each returns true on success. */
#ifndef LP_CORE_CHECKED_H
#define LP_CORE_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline bool lp_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool lp_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline bool lp_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool lp_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

#endif
