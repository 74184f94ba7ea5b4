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

void lp_export_out(lp_export_job *j, const void *data, size_t n)
{
    if (n == 0)
        return;
    if (fwrite(data, 1, n, j->f) != n)
        j->write_failed = true;
    j->crc = lp_export_crc32(j->crc, data, n);
    j->written += n;
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
        st = j->emit(j, &j->t[i], err);
    return st;
}

/* ---- npz ----------------------------------------------------------------------------------------
 *
 * Every member carries ZIP64 sizes (and the central directory ZIP64 offsets, closed by a ZIP64
 * end record), small or not: one layout for any size, so the tests exercise the path a 6 GB
 * [22, 32, 2048, 2048] map tensor takes. zipfile, numpy.load and unzip read it. */

/* A member's name, size and where its local header is, for the central directory. */
typedef struct zip_entry {
    char name[80];
    uint32_t crc;
    uint64_t size, offset;
} zip_entry;

#define ZIP_DATE 0x0021  /* 1980-01-01, so the same run gives the same bytes */
#define ZIP_VERSION 45   /* ZIP64 */
#define ZIP_FFFF 0xffffffffu

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

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

/* Local header + name + ZIP64 extra (both sizes); the CRC is patched in after the data. */
static void local_header(lp_export_job *j, const zip_entry *e)
{
    unsigned char h[30 + 20] = {0}, *x = h + 30;
    size_t name_len = strlen(e->name);
    put32(h, 0x04034b50);
    put16(h + 4, ZIP_VERSION);
    put16(h + 12, ZIP_DATE);
    put32(h + 18, ZIP_FFFF); /* sizes in the extra */
    put32(h + 22, ZIP_FFFF);
    put16(h + 26, (uint32_t)name_len);
    put16(h + 28, 20);
    put16(x, 0x0001);
    put16(x + 2, 16);
    put64(x + 4, e->size);
    put64(x + 12, e->size);
    lp_export_out(j, h, 30);
    lp_export_out(j, e->name, name_len);
    lp_export_out(j, x, 20);
}

/* One member: local header, its bytes (an npy header and a tensor, or text), then the CRC
 * patched into the header. */
static lp_status member(lp_export_job *j, zip_entry *e, const unsigned char *head, size_t head_len,
                        const lp_export_tensor *t, const char *text, lp_error *err)
{
    e->offset = j->written;
    local_header(j, e);
    j->crc = 0;
    lp_export_out(j, head, head_len);
    lp_status st = t ? j->emit(j, t, err) : LP_OK;
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

static void central_entry(lp_export_job *j, const zip_entry *e)
{
    unsigned char h[46 + 28] = {0}, *x = h + 46;
    size_t name_len = strlen(e->name);
    put32(h, 0x02014b50);
    put16(h + 4, ZIP_VERSION); /* made by */
    put16(h + 6, ZIP_VERSION); /* needed */
    put16(h + 14, ZIP_DATE);
    put32(h + 16, e->crc);
    put32(h + 20, ZIP_FFFF); /* sizes and offset in the extra */
    put32(h + 24, ZIP_FFFF);
    put16(h + 28, (uint32_t)name_len);
    put16(h + 30, 28);
    put32(h + 42, ZIP_FFFF);
    put16(x, 0x0001);
    put16(x + 2, 24);
    put64(x + 4, e->size);
    put64(x + 12, e->size);
    put64(x + 20, e->offset);
    lp_export_out(j, h, 46);
    lp_export_out(j, e->name, name_len);
    lp_export_out(j, x, 28);
}

/* The central directory, the ZIP64 end record and its locator, and the classic end record
 * (its counts and offsets all "see ZIP64"). */
static void central_directory(lp_export_job *j, const zip_entry *entries, int64_t n)
{
    uint64_t start = j->written;
    for (int64_t i = 0; i < n; i++)
        central_entry(j, &entries[i]);
    uint64_t size = j->written - start, end64 = j->written;
    unsigned char r[56 + 20 + 22] = {0}, *loc = r + 56, *end = loc + 20;
    put32(r, 0x06064b50);
    put64(r + 4, 44); /* bytes after this field */
    put16(r + 12, ZIP_VERSION);
    put16(r + 14, ZIP_VERSION);
    put64(r + 24, (uint64_t)n);
    put64(r + 32, (uint64_t)n);
    put64(r + 40, size);
    put64(r + 48, start);
    put32(loc, 0x07064b50);
    put64(loc + 8, end64);
    put32(loc + 16, 1); /* disks */
    put32(end, 0x06054b50);
    put16(end + 8, 0xffff);
    put16(end + 10, 0xffff);
    put32(end + 12, ZIP_FFFF);
    put32(end + 16, ZIP_FFFF);
    lp_export_out(j, r, sizeof r);
}

lp_status lp_export_write_npz(lp_export_job *j, lp_error *err)
{
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
    if (st == LP_OK)
        central_directory(j, entries, j->n + 1);
    free(entries);
    free(meta);
    return st;
}
