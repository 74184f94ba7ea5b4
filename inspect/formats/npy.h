/* A small, validated reader of NumPy .npy files (format 1.0, 2.0, 3.0), as a mapped view.
 *
 *   lp_npy npy;
 *   lp_error err = {0};
 *   if (lp_npy_open("reference/lily/attn.npy", &npy, &err) != LP_OK) ...
 *   // npy.dtype == LP_DTYPE_F32, npy.n_dims == 4, npy.shape = {5, 8, 16, 16}
 *   float *values = malloc(npy.n_elements * sizeof(float));
 *   lp_npy_to_f32(&npy, values, &err);       // any numeric dtype, converted
 *   const int32_t *ids = npy.data;            // or read the raw view (use memcpy if unaligned)
 *   lp_npy_close(&npy);
 *
 * Byte layout:
 *
 *   offset 0   "\x93NUMPY"             magic, 6 bytes
 *   6          u8 major, u8 minor      1.0, 2.0 or 3.0 (3.0: the header is UTF-8)
 *   8          u16 (1.x) / u32 (2.x, 3.x) header length H, little-endian
 *   10 / 12    H bytes                 a Python dict literal, space-padded, ending in '\n':
 *                                      {'descr': '<f4', 'fortran_order': False, 'shape': (16,), }
 *   then       the data, C order, n_elements x itemsize bytes, to the end of the file
 *
 * Accepted descr values: '<f2' '<f4' '<f8' '<i2' '<i4' '<i8' '<u2' '<u4' '<u8' and the one-byte
 * '|i1' '|u1' '|b1' (also with '<' or '='). Big-endian data, structured dtypes and
 * fortran_order True are refused with LP_ERR_UNSUPPORTED; anything malformed is LP_ERR_FORMAT
 * with the byte offset.
 */
#ifndef LP_INSPECT_NPY_H
#define LP_INSPECT_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mapfile.h"

#define LP_NPY_MAX_DIMS 16

typedef struct lp_npy {
    lp_dtype dtype;
    int n_dims;                       /* 0 for a scalar */
    int64_t shape[LP_NPY_MAX_DIMS];   /* row-major, outermost first */
    int64_t n_elements;
    const void *data;                 /* borrowed view into the map; valid until lp_npy_close() */
    uint64_t data_offset;             /* bytes from the start of the file */
    uint64_t n_bytes;
    int version_major, version_minor;
    lp_mapped_file map;               /* owned by lp_npy_open; empty for lp_npy_parse */
} lp_npy;

/* Map and validate path. */
lp_status lp_npy_open(const char *path, lp_npy *out, lp_error *err);
/* Validate a buffer already in memory (it must outlive out); name is used in messages. */
lp_status lp_npy_parse(const void *data, size_t size, const char *name, lp_npy *out,
                       lp_error *err);
void lp_npy_close(lp_npy *npy);

/* Convert all n_elements values to float32 into dst. */
lp_status lp_npy_to_f32(const lp_npy *npy, float *dst, lp_error *err);

#endif
