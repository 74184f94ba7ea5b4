/* NumPy .npy reader: validates the magic, version, dict header, dtype and data length. */
#include "inspect/formats/npy.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "core/checked.h"
#include "inspect/formats/quant.h"

typedef struct cursor {
    const char *p, *begin, *end;
    const char *name;
    uint64_t base; /* file offset of begin */
} cursor;

static uint64_t at(const cursor *c) { return c->base + (uint64_t)(c->p - c->begin); }

static void skip_space(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool take(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static lp_status expect(cursor *c, char ch, lp_error *err)
{
    if (take(c, ch))
        return LP_OK;
    return lp_error_set(err, LP_ERR_FORMAT, "%s: header byte %" PRIu64 ": expected '%c'",
                        c->name, at(c), ch);
}

/* A quoted Python string without escapes into buf. */
static lp_status parse_string(cursor *c, char *buf, size_t size, lp_error *err)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header byte %" PRIu64 ": expected a string",
                            c->name, at(c));
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || n + 1 >= size)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header byte %" PRIu64 ": string escape or too long a string",
                                c->name, at(c));
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header byte %" PRIu64 ": unterminated string",
                            c->name, at(c));
    c->p++;
    buf[n] = '\0';
    return LP_OK;
}

static lp_status parse_shape(cursor *c, lp_npy *out, lp_error *err)
{
    lp_status status = expect(c, '(', err);
    if (status != LP_OK)
        return status;
    out->n_dims = 0;
    while (!take(c, ')')) {
        skip_space(c);
        if (out->n_dims >= LP_NPY_MAX_DIMS)
            return lp_error_set(err, LP_ERR_UNSUPPORTED,
                                "%s: header byte %" PRIu64 ": more than %d dimensions", c->name,
                                at(c), LP_NPY_MAX_DIMS);
        uint64_t v = 0;
        const char *digits = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (!lp_mul_u64(v, 10, &v) || !lp_add_u64(v, (uint64_t)(*c->p - '0'), &v) ||
                v > (uint64_t)INT64_MAX)
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s: header byte %" PRIu64 ": dimension overflows 64 bits",
                                    c->name, at(c));
            c->p++;
        }
        if (c->p == digits)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header byte %" PRIu64 ": expected a dimension or ')'",
                                c->name, at(c));
        if (c->p < c->end && *c->p == 'L') /* Python 2 long */
            c->p++;
        out->shape[out->n_dims++] = (int64_t)v;
        if (!take(c, ',')) {
            if ((status = expect(c, ')', err)) != LP_OK)
                return status;
            break;
        }
    }
    return LP_OK;
}

static lp_status parse_descr(const char *file, const char *descr, lp_dtype *dtype, lp_error *err)
{
    static const struct {
        const char *code;
        lp_dtype dtype;
    } table[] = {
        {"f2", LP_DTYPE_F16}, {"f4", LP_DTYPE_F32}, {"f8", LP_DTYPE_F64}, {"i1", LP_DTYPE_I8},
        {"i2", LP_DTYPE_I16}, {"i4", LP_DTYPE_I32}, {"i8", LP_DTYPE_I64}, {"u1", LP_DTYPE_U8},
        {"u2", LP_DTYPE_U16}, {"u4", LP_DTYPE_U32}, {"u8", LP_DTYPE_U64}, {"b1", LP_DTYPE_BOOL},
    };
    char order = descr[0];
    if (order == '>')
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: big-endian descr '%s' is not supported",
                            file, descr);
    if (order != '<' && order != '|' && order != '=')
        return lp_error_set(err, LP_ERR_FORMAT, "%s: descr '%s' has no byte-order character",
                            file, descr);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(descr + 1, table[i].code) != 0)
            continue;
        /* '|' (not applicable) only makes sense for one-byte types */
        if (order == '|' && lp_dtype_get(table[i].dtype)->block_bytes != 1)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: descr '%s' needs a byte order for a multi-byte type", file,
                                descr);
        *dtype = table[i].dtype;
        return LP_OK;
    }
    return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: descr '%s' is not a supported dtype", file,
                        descr);
}

/* Magic, version and the header's length and place. */
static lp_status read_preamble(const uint8_t *bytes, size_t size, const char *name, lp_npy *out,
                               uint64_t *header_start, uint64_t *header_len, lp_error *err)
{
    if (size < 10 || memcmp(bytes, "\x93NUMPY", 6) != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: not a .npy file (no \\x93NUMPY magic at byte 0)", name);
    out->version_major = bytes[6];
    out->version_minor = bytes[7];
    if (bytes[6] == 1) {
        *header_len = lp_load_u16(bytes + 8);
        *header_start = 10;
    } else if (bytes[6] == 2 || bytes[6] == 3) {
        if (size < 12)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: file is %zu bytes, too short for a v%d "
                                "header length", name, size, bytes[6]);
        *header_len = lp_load_u32(bytes + 8);
        *header_start = 12;
    }
    if (bytes[6] < 1 || bytes[6] > 3 || bytes[7] != 0)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: format version %d.%d at byte 6 is not 1.0, 2.0 or 3.0", name,
                            bytes[6], bytes[7]);
    if (*header_len > size - *header_start)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %" PRIu64 " at byte 8 runs past the end of the file "
                            "(%zu bytes)",
                            name, *header_len, size);
    return LP_OK;
}

/* The header dict's keys, each once. */
typedef struct npy_dict {
    bool have_descr, have_order, have_shape;
    char descr[32];
} npy_dict;

/* fortran_order: only False (C order) is read. */
static lp_status read_fortran_order(cursor *c, lp_error *err)
{
    skip_space(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        return LP_OK;
    }
    if (left >= 4 && memcmp(c->p, "True", 4) == 0)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: header byte %" PRIu64 ": fortran_order True is not supported "
                            "(save in C order)",
                            c->name, at(c));
    return lp_error_set(err, LP_ERR_FORMAT, "%s: header byte %" PRIu64 ": fortran_order must be "
                        "False", c->name, at(c));
}

/* One "key: value" of the dict. */
static lp_status read_dict_entry(cursor *c, npy_dict *d, lp_npy *out, lp_error *err)
{
    char key[32];
    uint64_t key_at = at(c);
    lp_status status;
    if ((status = parse_string(c, key, sizeof key, err)) != LP_OK ||
        (status = expect(c, ':', err)) != LP_OK)
        return status;
    if (strcmp(key, "descr") == 0 && !d->have_descr) {
        skip_space(c);
        if (c->p < c->end && *c->p == '[')
            return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: header byte %" PRIu64 ": structured "
                                "dtypes are not supported", c->name, at(c));
        d->have_descr = true;
        return parse_string(c, d->descr, sizeof d->descr, err);
    }
    if (strcmp(key, "fortran_order") == 0 && !d->have_order) {
        d->have_order = true;
        return read_fortran_order(c, err);
    }
    if (strcmp(key, "shape") == 0 && !d->have_shape) {
        d->have_shape = true;
        return parse_shape(c, out, err);
    }
    return lp_error_set(err, LP_ERR_FORMAT, "%s: header byte %" PRIu64 ": unexpected or repeated "
                        "key '%s'", c->name, key_at, key);
}

/* {'descr': ..., 'fortran_order': False, 'shape': (...), } and nothing after it. */
static lp_status read_dict(cursor *c, npy_dict *d, lp_npy *out, lp_error *err)
{
    lp_status status = expect(c, '{', err);
    while (status == LP_OK && !take(c, '}')) {
        if ((status = read_dict_entry(c, d, out, err)) != LP_OK)
            return status;
        if (!take(c, ',')) {
            status = expect(c, '}', err);
            break;
        }
    }
    if (status != LP_OK)
        return status;
    skip_space(c);
    if (c->p != c->end)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header byte %" PRIu64 ": text after the dict",
                            c->name, at(c));
    if (!d->have_descr || !d->have_order || !d->have_shape)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header lacks '%s'", c->name,
                            !d->have_descr ? "descr" : !d->have_order ? "fortran_order" : "shape");
    return LP_OK;
}

lp_status lp_npy_parse(const void *data, size_t size, const char *name, lp_npy *out,
                       lp_error *err)
{
    memset(out, 0, sizeof *out);
    const uint8_t *bytes = data;
    uint64_t header_len = 0, header_start = 0;
    lp_status status = read_preamble(bytes, size, name, out, &header_start, &header_len, err);
    if (status != LP_OK)
        return status;
    cursor c = {(const char *)bytes + header_start, (const char *)bytes + header_start,
                (const char *)bytes + header_start + header_len, name, header_start};
    npy_dict d = {0};
    if ((status = read_dict(&c, &d, out, err)) != LP_OK ||
        (status = parse_descr(name, d.descr, &out->dtype, err)) != LP_OK)
        return status;
    uint64_t n = 1;
    for (int k = 0; k < out->n_dims; k++)
        if (!lp_mul_u64(n, (uint64_t)out->shape[k], &n) || n > (uint64_t)INT64_MAX)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: shape product overflows 64 bits", name);
    out->n_elements = (int64_t)n;
    if (!lp_dtype_bytes_for(out->dtype, n, &out->n_bytes))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: data size overflows 64 bits", name);
    out->data_offset = header_start + header_len;
    if (out->n_bytes != size - out->data_offset)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: data at byte %" PRIu64 " is %" PRIu64 " bytes but descr '%s' x "
                            "shape needs %" PRIu64,
                            name, out->data_offset, (uint64_t)(size - out->data_offset), d.descr,
                            out->n_bytes);
    out->data = bytes + out->data_offset;
    return LP_OK;
}

lp_status lp_npy_open(const char *path, lp_npy *out, lp_error *err)
{
    lp_mapped_file map;
    lp_status status = lp_map_file(path, &map, err);
    if (status != LP_OK) {
        memset(out, 0, sizeof *out);
        return status;
    }
    status = lp_npy_parse(map.data, map.size, lp_path_basename(path), out, err);
    if (status != LP_OK) {
        lp_unmap_file(&map);
        return status;
    }
    out->map = map;
    return LP_OK;
}

void lp_npy_close(lp_npy *npy)
{
    if (!npy)
        return;
    lp_unmap_file(&npy->map);
    memset(npy, 0, sizeof *npy);
}

lp_status lp_npy_to_f32(const lp_npy *npy, float *dst, lp_error *err)
{
    /* One row of n_elements values: the catalogue's conversion, so both agree to the bit. */
    lp_rows rows = {npy->map.path ? lp_path_basename(npy->map.path) : "npy", npy->dtype,
                    npy->data, npy->n_elements, npy->n_elements};
    return lp_rows_to_f32(&rows, 0, npy->n_elements > 0 ? 1 : 0, dst, err);
}
