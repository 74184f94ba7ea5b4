/* The two file formats of `loupe export` (layouts in render/export.c): safetensors, and npz as
 * a zip of stored .npy members. Both stream the tensors through lp_export_emit. */
#define _POSIX_C_SOURCE 200809L
#include "render/export_internal.h"
#include "render/render_internal.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* ---- CRC-32 (zip's: polynomial 0xEDB88320, reflected), table built once ------------------------ */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void build_crc_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t lp_export_crc32(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, build_crc_table);
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static void put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

/* ---- safetensors ------------------------------------------------------------------------------ */

static json_t *shape_json(const lp_export_tensor *t, bool *ok)
{
    json_t *shape = json_array();
    for (int d = 0; d < t->n_dims; d++)
        lp_render_json_push(ok, shape, json_integer(t->shape[d]));
    return shape;
}

lp_status lp_export_write_safetensors(lp_export_job *j, lp_error *err)
{
    json_t *header = json_object();
    bool ok = json_object_set(header, "__metadata__", j->meta) == 0;
    uint64_t offset = 0;
    for (int64_t i = 0; i < j->n; i++) {
        const lp_export_tensor *t = &j->t[i];
        char dtype[16];
        snprintf(dtype, sizeof dtype, "%s", lp_dtype_name(t->dtype));
        for (char *c = dtype; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        json_t *e = json_object(), *offsets = json_array();
        lp_render_json_push(&ok, offsets, json_integer((json_int_t)offset));
        lp_render_json_push(&ok, offsets, json_integer((json_int_t)(offset + t->bytes)));
        lp_render_json_set(&ok, e, "dtype", json_string(dtype));
        lp_render_json_set(&ok, e, "shape", shape_json(t, &ok));
        lp_render_json_set(&ok, e, "data_offsets", offsets);
        lp_render_json_set(&ok, header, t->name, e);
        offset += t->bytes;
    }
    char *text = ok ? json_dumps(header, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(header);
    if (!text)
        return lp_error_set(err, LP_ERR_NOMEM, "export: out of memory (safetensors header)");
    size_t len = strlen(text), pad = (8 - (8 + len) % 8) % 8; /* the data starts 8-aligned */
    unsigned char size[8];
    put32(size, (uint32_t)(len + pad));
    put32(size + 4, (uint32_t)((uint64_t)(len + pad) >> 32));
    lp_export_out(j, size, 8);
    lp_export_out(j, text, len);
    lp_export_out(j, "        ", pad);
    free(text);
    lp_status st = LP_OK;
    for (int64_t i = 0; i < j->n && st == LP_OK; i++)
        st = lp_export_emit(j, &j->t[i], err);
    return st;
}

/* ---- npz -------------------------------------------------------------------------------------- */

/* A member's name, size and where its local header is, for the central directory. */
typedef struct zip_entry {
    char name[80];
    uint32_t crc;
    uint64_t size, offset;
} zip_entry;

#define ZIP_LIMIT 0xffffffffu /* no ZIP64: sizes and offsets must fit 32 bits */
#define ZIP_DATE 0x0021       /* 1980-01-01, so the same run gives the same bytes */

/* The .npy header of a tensor (format 1.0): magic, version, u16 length, the dict, padded with
 * spaces and a newline so the data starts 64-aligned. Returns its length (<= 256). */
static size_t npy_header(const lp_export_tensor *t, unsigned char out[256])
{
    const char *descr = t->dtype == LP_DTYPE_F16   ? "<f2"
                        : t->dtype == LP_DTYPE_F32 ? "<f4"
                        : t->dtype == LP_DTYPE_F64 ? "<f8"
                                                   : "<i4";
    char shape[120] = "(";
    for (int d = 0; d < t->n_dims; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld,%s",
                 (long long)t->shape[d], d + 1 < t->n_dims ? " " : "");
    strcat(shape, ")");
    char dict[200];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    put16(out + 8, (uint32_t)(total - 10));
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', total - 10 - (size_t)n - 1);
    out[total - 1] = '\n';
    return total;
}

static void local_header(lp_export_job *j, const zip_entry *e)
{
    unsigned char h[30] = {0};
    size_t name_len = strlen(e->name);
    put32(h, 0x04034b50);
    put16(h + 4, 20);       /* version needed */
    put16(h + 12, ZIP_DATE);
    put32(h + 14, e->crc);  /* patched after the data */
    put32(h + 18, (uint32_t)e->size);
    put32(h + 22, (uint32_t)e->size);
    put16(h + 26, (uint32_t)name_len);
    lp_export_out(j, h, sizeof h);
    lp_export_out(j, e->name, name_len);
}

/* One member: local header, the bytes `body` writes, then the CRC patched into the header. */
static lp_status member(lp_export_job *j, zip_entry *e, const unsigned char *head, size_t head_len,
                        const lp_export_tensor *t, const char *text, lp_error *err)
{
    e->offset = j->written;
    if (e->offset + 30 + strlen(e->name) + e->size > ZIP_LIMIT)
        return lp_error_set(err, LP_ERR_RANGE,
                            "npz member '%s' would end past 4 GiB (this writer makes no ZIP64): "
                            "export to .safetensors instead",
                            e->name);
    local_header(j, e);
    j->crc = 0;
    lp_export_out(j, head, head_len);
    lp_status st = t ? lp_export_emit(j, t, err) : LP_OK;
    if (text)
        lp_export_out(j, text, strlen(text));
    e->crc = j->crc;
    unsigned char crc[4];
    put32(crc, e->crc);
    if (st == LP_OK && (fseeko(j->f, (off_t)(e->offset + 14), SEEK_SET) != 0 ||
                        fwrite(crc, 1, 4, j->f) != 4 || fseeko(j->f, 0, SEEK_END) != 0))
        j->write_failed = true;
    return st;
}

static void central_directory(lp_export_job *j, const zip_entry *entries, int64_t n)
{
    uint64_t start = j->written;
    for (int64_t i = 0; i < n; i++) {
        unsigned char h[46] = {0};
        size_t name_len = strlen(entries[i].name);
        put32(h, 0x02014b50);
        put16(h + 4, 20); /* made by */
        put16(h + 6, 20); /* needed */
        put16(h + 14, ZIP_DATE);
        put32(h + 16, entries[i].crc);
        put32(h + 20, (uint32_t)entries[i].size);
        put32(h + 24, (uint32_t)entries[i].size);
        put16(h + 28, (uint32_t)name_len);
        put32(h + 42, (uint32_t)entries[i].offset);
        lp_export_out(j, h, sizeof h);
        lp_export_out(j, entries[i].name, name_len);
    }
    unsigned char end[22] = {0};
    put32(end, 0x06054b50);
    put16(end + 8, (uint32_t)n);
    put16(end + 10, (uint32_t)n);
    put32(end + 12, (uint32_t)(j->written - start));
    put32(end + 16, (uint32_t)start);
    lp_export_out(j, end, sizeof end);
}

lp_status lp_export_write_npz(lp_export_job *j, lp_error *err)
{
    if (j->n + 1 > 0xffff)
        return lp_error_set(err, LP_ERR_RANGE, "npz: %lld members, over zip's 65535 without "
                            "ZIP64: export to .safetensors instead", (long long)(j->n + 1));
    zip_entry *entries = calloc((size_t)j->n + 1, sizeof *entries);
    char *meta = json_dumps(j->meta, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    lp_status st = entries && meta ? LP_OK
                                   : lp_error_set(err, LP_ERR_NOMEM, "export: out of memory (npz)");
    for (int64_t i = 0; i < j->n && st == LP_OK; i++) {
        unsigned char head[256];
        size_t head_len = npy_header(&j->t[i], head);
        snprintf(entries[i].name, sizeof entries[i].name, "%s.npy", j->t[i].name);
        entries[i].size = head_len + j->t[i].bytes;
        st = member(j, &entries[i], head, head_len, &j->t[i], NULL, err);
    }
    if (st == LP_OK) {
        zip_entry *m = &entries[j->n];
        snprintf(m->name, sizeof m->name, "metadata.json");
        m->size = strlen(meta);
        st = member(j, m, NULL, 0, NULL, meta, err);
    }
    if (st == LP_OK && j->written + 46 * ((uint64_t)j->n + 1) + 22 + 80 * ((uint64_t)j->n + 1) >
                           ZIP_LIMIT)
        st = lp_error_set(err, LP_ERR_RANGE, "npz: the file would pass 4 GiB (this writer makes "
                          "no ZIP64): export to .safetensors instead");
    if (st == LP_OK)
        central_directory(j, entries, j->n + 1);
    free(entries);
    free(meta);
    return st;
}
