/* UTF-8 helpers, the byte-level alphabet (GPT-2's bytes_to_unicode), and Unicode normalization
 * (NFC/NFD/NFKC/NFKD, UAX #15) and lowercasing for the tokenizer normalizers, on the tables in
 * unicode_data.c. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"

/* Raw bytes that are not valid UTF-8 travel as code points past the Unicode range. */
#define RAW_BYTE_BASE 0x110000u

size_t lp_utf8_put(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int32_t lp_utf8_next(const char *str, size_t len, size_t *i)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t at = *i;
    unsigned c = s[at];
    if (c < 0x80) {
        *i = at + 1;
        return (int32_t)c;
    }
    size_t need;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, cp = c & 0x07, min = 0x10000;
    } else {
        *i = at + 1;
        return -1;
    }
    if (len - at <= need) {
        *i = at + 1;
        return -1;
    }
    for (size_t k = 1; k <= need; k++) {
        unsigned cc = s[at + k];
        if ((cc & 0xC0) != 0x80) {
            *i = at + 1;
            return -1;
        }
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        *i = at + 1;
        return -1;
    }
    *i = at + 1 + need;
    return (int32_t)cp;
}

size_t lp_utf8_seq_len(const char *s, size_t len, size_t i)
{
    size_t j = i;
    lp_utf8_next(s, len, &j);
    return j - i;
}

bool lp_uc_is_space(int32_t cp)
{
    /* the White_Space property (PropList.txt), which Rust's char::is_whitespace uses */
    return (cp >= 9 && cp <= 13) || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

bool lp_uc_is_cjk_ideograph(int32_t cp)
{
    /* the CJK blocks of Hugging Face tokenizers' BertNormalizer (Extension E from 0x2B920, as
     * it has it) */
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* ---- the byte-level alphabet (GPT-2's bytes_to_unicode) -------------------------------------- */

static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t lp_tok_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b))
        return b;
    /* the others take 256, 257, ... in byte order */
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!byte_is_printable(x))
            n++;
    return 256 + n;
}

int lp_tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_printable(x) && n-- == 0)
            return (int)x;
    return -1;
}

/* lp_tok_byte_to_cp for every byte, spelled out so that encoding needs no lazy (racy) init. */
static const uint32_t byte_cp_table[256] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10A, 0x10B,
    0x10C, 0x10D, 0x10E, 0x10F, 0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117,
    0x118, 0x119, 0x11A, 0x11B, 0x11C, 0x11D, 0x11E, 0x11F, 0x120, 0x021, 0x022, 0x023,
    0x024, 0x025, 0x026, 0x027, 0x028, 0x029, 0x02A, 0x02B, 0x02C, 0x02D, 0x02E, 0x02F,
    0x030, 0x031, 0x032, 0x033, 0x034, 0x035, 0x036, 0x037, 0x038, 0x039, 0x03A, 0x03B,
    0x03C, 0x03D, 0x03E, 0x03F, 0x040, 0x041, 0x042, 0x043, 0x044, 0x045, 0x046, 0x047,
    0x048, 0x049, 0x04A, 0x04B, 0x04C, 0x04D, 0x04E, 0x04F, 0x050, 0x051, 0x052, 0x053,
    0x054, 0x055, 0x056, 0x057, 0x058, 0x059, 0x05A, 0x05B, 0x05C, 0x05D, 0x05E, 0x05F,
    0x060, 0x061, 0x062, 0x063, 0x064, 0x065, 0x066, 0x067, 0x068, 0x069, 0x06A, 0x06B,
    0x06C, 0x06D, 0x06E, 0x06F, 0x070, 0x071, 0x072, 0x073, 0x074, 0x075, 0x076, 0x077,
    0x078, 0x079, 0x07A, 0x07B, 0x07C, 0x07D, 0x07E, 0x121, 0x122, 0x123, 0x124, 0x125,
    0x126, 0x127, 0x128, 0x129, 0x12A, 0x12B, 0x12C, 0x12D, 0x12E, 0x12F, 0x130, 0x131,
    0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13A, 0x13B, 0x13C, 0x13D,
    0x13E, 0x13F, 0x140, 0x141, 0x142, 0x0A1, 0x0A2, 0x0A3, 0x0A4, 0x0A5, 0x0A6, 0x0A7,
    0x0A8, 0x0A9, 0x0AA, 0x0AB, 0x0AC, 0x143, 0x0AE, 0x0AF, 0x0B0, 0x0B1, 0x0B2, 0x0B3,
    0x0B4, 0x0B5, 0x0B6, 0x0B7, 0x0B8, 0x0B9, 0x0BA, 0x0BB, 0x0BC, 0x0BD, 0x0BE, 0x0BF,
    0x0C0, 0x0C1, 0x0C2, 0x0C3, 0x0C4, 0x0C5, 0x0C6, 0x0C7, 0x0C8, 0x0C9, 0x0CA, 0x0CB,
    0x0CC, 0x0CD, 0x0CE, 0x0CF, 0x0D0, 0x0D1, 0x0D2, 0x0D3, 0x0D4, 0x0D5, 0x0D6, 0x0D7,
    0x0D8, 0x0D9, 0x0DA, 0x0DB, 0x0DC, 0x0DD, 0x0DE, 0x0DF, 0x0E0, 0x0E1, 0x0E2, 0x0E3,
    0x0E4, 0x0E5, 0x0E6, 0x0E7, 0x0E8, 0x0E9, 0x0EA, 0x0EB, 0x0EC, 0x0ED, 0x0EE, 0x0EF,
    0x0F0, 0x0F1, 0x0F2, 0x0F3, 0x0F4, 0x0F5, 0x0F6, 0x0F7, 0x0F8, 0x0F9, 0x0FA, 0x0FB,
    0x0FC, 0x0FD, 0x0FE, 0x0FF,
};

const uint32_t *lp_tok_byte_cps(void)
{
    return byte_cp_table;
}


/* The code point that ends just before byte offset at (-1 at the start or on invalid bytes);
 * *start receives its first byte. */
int32_t lp_utf8_prev(const char *s, size_t at, size_t *start)
{
    if (at == 0) {
        *start = 0;
        return -1;
    }
    size_t i = at - 1;
    while (i > 0 && at - i < 4 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    size_t j = i;
    int32_t cp = lp_utf8_next(s, at, &j);
    if (j != at) { /* not one whole sequence: step back a single byte */
        *start = at - 1;
        return -1;
    }
    *start = i;
    return cp;
}

static int pair_cmp(const void *key, const void *elem)
{
    uint32_t k = *(const uint32_t *)key;
    uint32_t cp = ((const lp_uc_pair *)elem)->cp;
    return k < cp ? -1 : k > cp ? 1 : 0;
}

int lp_uc_ccc_of(uint32_t cp)
{
    if (cp < 0x300 || cp >= RAW_BYTE_BASE)
        return 0;
    const lp_uc_pair *p = bsearch(&cp, lp_uc_ccc, lp_uc_ccc_count, sizeof *p, pair_cmp);
    return p ? (int)p->value : 0;
}

static int decomp_cmp(const void *key, const void *elem)
{
    uint32_t k = *(const uint32_t *)key;
    uint32_t cp = ((const lp_uc_decomp *)elem)->cp;
    return k < cp ? -1 : k > cp ? 1 : 0;
}

static int comp_cmp(const void *key, const void *elem)
{
    const uint32_t *k = key;
    const lp_uc_comp *c = elem;
    if (k[0] != c->first)
        return k[0] < c->first ? -1 : 1;
    if (k[1] != c->second)
        return k[1] < c->second ? -1 : 1;
    return 0;
}

/* Hangul syllables decompose and compose algorithmically (Unicode ch. 3.12). */
enum {
    HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
    HANGUL_L_COUNT = 19, HANGUL_V_COUNT = 21, HANGUL_T_COUNT = 28,
    HANGUL_N = HANGUL_V_COUNT * HANGUL_T_COUNT, HANGUL_S_COUNT = HANGUL_L_COUNT * HANGUL_N
};

static uint32_t compose_pair(uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_L_COUNT && b >= HANGUL_V &&
        b < HANGUL_V + HANGUL_V_COUNT)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_V_COUNT + (b - HANGUL_V)) * HANGUL_T_COUNT;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_S_COUNT && (a - HANGUL_S) % HANGUL_T_COUNT == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_T_COUNT)
        return a + (b - HANGUL_T);
    uint32_t key[2] = {a, b};
    const lp_uc_comp *c = bsearch(key, lp_uc_comps, lp_uc_comp_count, sizeof *c, comp_cmp);
    return c ? c->composite : 0;
}

typedef struct cp_vec {
    uint32_t *v;
    size_t n, cap;
    bool failed;
} cp_vec;

static void cp_push(cp_vec *vec, uint32_t cp)
{
    if (vec->n == vec->cap && !lp_tok_reserve((void **)&vec->v, &vec->cap, sizeof *vec->v, 64))
        vec->failed = true;
    if (vec->failed)
        return;
    vec->v[vec->n++] = cp;
}

static void decompose(uint32_t cp, bool compat, cp_vec *out, int depth)
{
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_S_COUNT) {
        uint32_t s = cp - HANGUL_S;
        cp_push(out, HANGUL_L + s / HANGUL_N);
        cp_push(out, HANGUL_V + (s % HANGUL_N) / HANGUL_T_COUNT);
        if (s % HANGUL_T_COUNT)
            cp_push(out, HANGUL_T + s % HANGUL_T_COUNT);
        return;
    }
    const lp_uc_decomp *d = NULL;
    if (cp >= 0xA0 && cp < RAW_BYTE_BASE && depth < 8)
        d = bsearch(&cp, lp_uc_decomps, lp_uc_decomp_count, sizeof *d, decomp_cmp);
    if (!d || (d->is_compat && !compat)) {
        cp_push(out, cp);
        return;
    }
    for (uint32_t k = 0; k < d->len; k++)
        decompose(lp_uc_decomp_pool[d->offset + k], compat, out, depth + 1);
}

static bool is_ascii(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

static lp_status copy_out(const char *s, size_t len, char **out, size_t *out_len)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return LP_ERR_NOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    *out = copy;
    *out_len = len;
    return LP_OK;
}

static lp_status encode_cps(const cp_vec *vec, char **out, size_t *out_len)
{
    uint64_t cap;
    if (!lp_mul_u64(vec->n, 4, &cap) || !lp_add_u64(cap, 1, &cap) || cap > SIZE_MAX)
        return LP_ERR_RANGE;
    char *buf = malloc((size_t)cap);
    if (!buf)
        return LP_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < vec->n; i++) {
        uint32_t cp = vec->v[i];
        if (cp >= RAW_BYTE_BASE)
            buf[n++] = (char)(cp - RAW_BYTE_BASE);
        else
            n += lp_utf8_put(cp, buf + n);
    }
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return LP_OK;
}

/* Canonical ordering: a stable insertion sort of each run of non-starters by class. */
static void canonical_order(cp_vec *vec)
{
    for (size_t k = 1; k < vec->n; k++) {
        int cc = lp_uc_ccc_of(vec->v[k]);
        if (cc == 0)
            continue;
        size_t j = k;
        uint32_t cp = vec->v[k];
        while (j > 0 && lp_uc_ccc_of(vec->v[j - 1]) > cc) {
            vec->v[j] = vec->v[j - 1];
            j--;
        }
        vec->v[j] = cp;
    }
}

/* Canonical composition (UAX #15): each mark joins the last starter unless blocked. */
static void compose_all(cp_vec *vec)
{
    if (vec->n == 0)
        return;
    size_t starter = 0, w = 1;
    uint32_t starter_cp = vec->v[0];
    int last_class = lp_uc_ccc_of(starter_cp) ? 256 : 0;
    for (size_t r = 1; r < vec->n; r++) {
        uint32_t cp = vec->v[r];
        int cc = lp_uc_ccc_of(cp);
        uint32_t composite = last_class == 256 ? 0 : compose_pair(starter_cp, cp);
        if (composite && (last_class < cc || last_class == 0)) {
            vec->v[starter] = composite;
            starter_cp = composite;
            continue;
        }
        if (cc == 0) {
            starter = w;
            starter_cp = cp;
        }
        last_class = cc;
        vec->v[w++] = cp;
    }
    vec->n = w;
}

lp_status lp_uc_normalize(lp_uc_form form, const char *s, size_t len, char **out,
                          size_t *out_len)
{
    if (is_ascii(s, len))
        return copy_out(s, len, out, out_len);
    bool compat = form == LP_UC_NFKC || form == LP_UC_NFKD;
    cp_vec vec = {0};
    size_t i = 0;
    while (i < len) {
        size_t at = i;
        int32_t cp = lp_utf8_next(s, len, &i);
        if (cp < 0)
            cp_push(&vec, RAW_BYTE_BASE + (unsigned char)s[at]);
        else
            decompose((uint32_t)cp, compat, &vec, 0);
    }
    if (vec.failed) {
        free(vec.v);
        return LP_ERR_NOMEM;
    }
    canonical_order(&vec);
    if (form == LP_UC_NFC || form == LP_UC_NFKC)
        compose_all(&vec);
    lp_status st = encode_cps(&vec, out, out_len);
    free(vec.v);
    return st;
}

lp_status lp_uc_lowercase(const char *s, size_t len, char **out, size_t *out_len)
{
    cp_vec vec = {0};
    size_t i = 0;
    while (i < len) {
        size_t at = i;
        int32_t cp = lp_utf8_next(s, len, &i);
        if (cp < 0) {
            cp_push(&vec, RAW_BYTE_BASE + (unsigned char)s[at]);
        } else if (cp < 0x80) {
            cp_push(&vec, (uint32_t)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
        } else if (cp == 0x130) {
            cp_push(&vec, 'i');
            cp_push(&vec, 0x307);
        } else {
            uint32_t key = (uint32_t)cp;
            const lp_uc_pair *p = bsearch(&key, lp_uc_lower, lp_uc_lower_count, sizeof *p,
                                          pair_cmp);
            cp_push(&vec, p ? p->value : key);
        }
    }
    if (vec.failed) {
        free(vec.v);
        return LP_ERR_NOMEM;
    }
    lp_status st = encode_cps(&vec, out, out_len);
    free(vec.v);
    return st;
}
