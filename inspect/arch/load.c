/* lp_arch_load: pick the reader for a path or card name; and the llama2.c checkpoint header.
 *
 * llama2.c checkpoints (karpathy/llama2.c), all little-endian:
 *   legacy (version 0), what run.c reads:
 *     offset 0   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 *     offset 28  float32 tensors: token_embedding [vocab, dim], rms_att [L, dim],
 *                wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim],
 *                rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim],
 *                rms_final [dim], freq_cis_real [seq_len, head_dim/2], freq_cis_imag (same),
 *                then wcls [vocab, dim] only when vocab_size < 0 (unshared classifier).
 *   version 1 (export.py --version 1): uint32 magic 0x616b3432 "ak42", int32 version = 1,
 *     the same seven int32 (vocab_size positive), uint8 shared_classifier, zero padding to 256
 *     bytes, then the same float32 tensors reordered (all norms first, then the embedding and the
 *     matrices), without the freq_cis tables, wcls last when not shared.
 *   version 2: the version 1 header plus int32 group_size at byte 37; norms in float32, the
 *     matrices as int8 codes each followed by its float32 group scales (see inspect/formats/llama2c.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "inspect/inspect.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/text.h"
#include "core/checked.h"
#include "core/platform.h"
#include "core/dtype.h"
#include "core/mapfile.h"
#include "inspect/formats/gguf.h"

#define LLAMA2C_MAGIC 0x616b3432u
#define LLAMA2C_V1_HEADER 256

static const char *const LLAMA2C_FIELDS[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                              "n_kv_heads", "vocab_size", "seq_len"};

/* Float count of the weights that follow the header: the file must hold at least this many. */
static bool llama2c_weight_floats(const int32_t h[7], bool shared_classifier, bool legacy,
                                  uint64_t *out)
{
    uint64_t dim = (uint64_t)h[0], hidden = (uint64_t)h[1], layers = (uint64_t)h[2];
    uint64_t heads = (uint64_t)h[3], kv_heads = (uint64_t)h[4];
    uint64_t vocab = (uint64_t)(h[5] < 0 ? -(int64_t)h[5] : h[5]), seq = (uint64_t)h[6];
    uint64_t head_dim = dim / heads, kv_dim, per_layer = 0, t, total = 0;
    if (!lp_mul_u64(head_dim, kv_heads, &kv_dim))
        return false;
    /* per layer: 2 norms + wq + wo + wk + wv + w1 + w2 + w3 */
    uint64_t parts[5][2] = {{2, dim}, {2 * dim, dim}, {2 * kv_dim, dim}, {3 * hidden, dim}, {0, 0}};
    for (int i = 0; i < 4; i++) {
        if (!lp_mul_u64(parts[i][0], parts[i][1], &t) || !lp_add_u64(per_layer, t, &per_layer))
            return false;
    }
    if (!lp_mul_u64(per_layer, layers, &total))
        return false;
    if (!lp_mul_u64(vocab, dim, &t) || !lp_add_u64(total, t, &total)) /* embedding */
        return false;
    if (!lp_add_u64(total, dim, &total)) /* final norm */
        return false;
    if (legacy && (!lp_mul_u64(seq, head_dim, &t) || !lp_add_u64(total, t, &total)))
        return false; /* freq_cis real + imag, head_dim/2 each */
    if (!shared_classifier && (!lp_mul_u64(vocab, dim, &t) || !lp_add_u64(total, t, &total)))
        return false;
    *out = total;
    return true;
}

/* llama2.c files have no magic number (the legacy ones): rule out the formats that do, so a
 * stray pytorch_model.bin gets a message that says what it is. */
static const char *sniff_other_format(const uint8_t *data, size_t size)
{
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0)
        return "a GGUF file";
    if (size >= 4 && memcmp(data, "PK\x03\x04", 4) == 0)
        return "a zip archive (a PyTorch checkpoint?)";
    if (size >= 2 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5)
        return "a Python pickle (a PyTorch checkpoint?)";
    if (size >= 1 && data[0] == '{')
        return "JSON text";
    /* Header fields are small int32s, so a real header has zero bytes; text has none. */
    size_t n = size < 28 ? size : 28;
    bool text = n > 0;
    for (size_t i = 0; i < n && text; i++)
        text = data[i] >= 0x20 || data[i] == '\n' || data[i] == '\r' || data[i] == '\t';
    if (text)
        return "text";
    return NULL;
}

lp_status lp_arch_from_llama2c(const char *bin_path, lp_arch *out, lp_error *err)
{
    lp_arch_init(out);
    snprintf(out->source, sizeof out->source, "%s", bin_path);
    snprintf(out->name, sizeof out->name, "%s", lp_path_basename(bin_path));

    lp_mapped_file map;
    lp_status st = lp_map_file(bin_path, &map, err);
    if (st != LP_OK)
        return st;
    /* Only the header is read: the mapping never touches the weights. */
    const char *other = sniff_other_format(map.data, map.size);
    if (other) {
        lp_unmap_file(&map);
        return lp_error_set(err, LP_ERR_FORMAT, "%s: this is %s, not a llama2.c checkpoint",
                            bin_path, other);
    }
    bool legacy = true, shared_classifier = true, quantized = false;
    size_t header_bytes = 28, fields_at = 0;
    if (map.size >= 8 && lp_load_u32(map.data) == LLAMA2C_MAGIC) {
        int32_t version = lp_load_i32(map.data + 4);
        if (version != 1 && version != 2) {
            lp_unmap_file(&map);
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field version at byte 4 is %d, llama2.c export "
                                "versions are 1 and 2",
                                bin_path, version);
        }
        legacy = false;
        quantized = version == 2;
        header_bytes = LLAMA2C_V1_HEADER;
        fields_at = 8;
    }
    if (map.size < header_bytes) {
        size_t size = map.size;
        lp_unmap_file(&map);
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: %zu bytes is shorter than the %zu-byte llama2.c header",
                            bin_path, size, header_bytes);
    }
    int32_t h[7];
    for (int i = 0; i < 7; i++)
        h[i] = lp_load_i32(map.data + fields_at + 4 * (size_t)i);
    if (!legacy)
        shared_classifier = map.data[fields_at + 28] != 0;
    size_t file_size = map.size;
    lp_unmap_file(&map);

    for (int i = 0; i < 7; i++) {
        if (i == 5 && h[i] != 0 && h[i] != INT32_MIN)
            continue; /* vocab_size: negative means an unshared classifier */
        if (h[i] <= 0)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field %s at byte %zu is %d, must be positive",
                                bin_path, LLAMA2C_FIELDS[i], fields_at + 4 * (size_t)i, h[i]);
    }
    if (legacy)
        shared_classifier = h[5] > 0;
    if (h[0] % h[3] != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header field n_heads %d does not divide dim %d", bin_path, h[3],
                            h[0]);
    if (h[4] > h[3] || h[3] % h[4] != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header field n_kv_heads %d does not divide n_heads %d", bin_path,
                            h[4], h[3]);
    uint64_t floats, bytes, need;
    /* version 2 stores the matrices as int8 codes plus group scales: at least 1 byte a weight
     * (inspect/formats/llama2c.c checks its exact layout) */
    if (!llama2c_weight_floats(h, shared_classifier, legacy, &floats) ||
        !lp_mul_u64(floats, quantized ? 1 : 4, &bytes) || !lp_add_u64(bytes, header_bytes, &need))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header sizes overflow 64 bits", bin_path);
    if ((uint64_t)file_size < need)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: file has %zu bytes, the header (dim %d, %d layers, vocab %d) "
                            "needs %llu",
                            bin_path, file_size, h[0], h[2], h[5], (unsigned long long)need);

    snprintf(out->family, sizeof out->family, "llama");
    out->hidden_size = h[0];
    out->ffn_hidden = h[1];
    out->n_layers = h[2];
    out->n_heads = h[3];
    out->n_kv_heads = h[4];
    out->vocab_size = h[5] < 0 ? -(int64_t)h[5] : h[5];
    out->n_ctx = h[6];
    out->tied_embeddings = shared_classifier;
    /* run.c hard-codes these. */
    out->ffn_kind = LP_FFN_SWIGLU;
    out->act = LP_ACT_SILU;
    out->norm_kind = LP_NORM_RMS;
    out->norm_eps = 1e-5;
    out->pos_kind = LP_POS_ROPE;
    out->rope_theta = 10000.0;
    out->rope_layout = LP_ROPE_ADJACENT; /* Meta's original pairing, not rotate_half */
    out->storage_dtype = quantized ? LP_DTYPE_I8 : LP_DTYPE_F32;
    out->bos_token_id = 1;
    out->eos_token_id = 2;
    return lp_arch_finish(out, err);
}

static lp_status load_gguf(const char *path, lp_arch *out, lp_error *err)
{
    lp_gguf *gguf;
    lp_status st = lp_gguf_open(path, &gguf, err);
    if (st != LP_OK)
        return st;
    st = lp_arch_from_gguf(gguf, out, err);
    lp_gguf_close(gguf);
    return st;
}

/* Guess a file's format from its first bytes when its name does not say. */
static lp_status load_by_content(const char *path, lp_arch *out, lp_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return lp_error_set(err, LP_ERR_IO, "%s: %s", path, strerror(errno));
    unsigned char head[16] = {0};
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got >= 4 && memcmp(head, "GGUF", 4) == 0)
        return load_gguf(path, out, err);
    size_t i = 0;
    while (i < got && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t'))
        i++;
    if (i < got && head[i] == '{')
        return lp_arch_from_hf_config(path, out, err);
    return lp_arch_from_llama2c(path, out, err);
}

static lp_status load_sibling_config(const char *path, lp_arch *out, lp_error *err)
{
    const char *base = lp_path_basename(path);
    size_t dir_len = (size_t)(base - path);
    char *config = malloc(dir_len + sizeof "config.json");
    if (!config) {
        lp_arch_init(out);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(config, path, dir_len);
    memcpy(config + dir_len, "config.json", sizeof "config.json");
    lp_status st;
    if (lp_path_exists(config)) {
        st = lp_arch_from_hf_config(config, out, err);
    } else {
        lp_arch_init(out);
        st = lp_error_set(err, LP_ERR_NOT_FOUND,
                          "%s: no config.json beside it to describe the architecture", path);
    }
    free(config);
    return st;
}

static bool same_ignoring_case(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i]))
            return false;
    return true;
}

/* Whether the card text says it was taken from huggingface.co/<id>/... (its model.config_url). */
static bool card_is_from(const char *text, const char *id)
{
    static const char prefix[] = "config_url: https://huggingface.co/";
    size_t id_len = strlen(id);
    for (const char *at = strstr(text, prefix); at; at = strstr(at + 1, prefix)) {
        const char *rest = at + sizeof prefix - 1;
        if (strnlen(rest, id_len + 1) > id_len && rest[id_len] == '/' &&
            same_ignoring_case(rest, id, id_len))
            return true;
    }
    return false;
}

/* The card for a name: <dir>/<name>.yaml, the same in lower case, or (for "org/model") the card
 * whose config_url points at that Hugging Face model. *path is NULL when there is none. */
static lp_status find_card(const char *dir, const char *name, char **path, lp_error *err)
{
    *path = NULL;
    size_t len = strlen(dir) + strlen(name) + 7;
    char *candidate = malloc(len);
    if (!candidate)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    if (!strchr(name, '/')) {
        for (int lower = 0; lower < 2; lower++) {
            snprintf(candidate, len, "%s/%s%s", dir, name, lp_ends_with(name, ".yaml") ? "" : ".yaml");
            if (lower)
                for (char *c = candidate + strlen(dir) + 1; *c; c++)
                    *c = (char)tolower((unsigned char)*c);
            if (lp_path_exists(candidate)) {
                *path = candidate;
                return LP_OK;
            }
        }
        free(candidate);
        return LP_OK;
    }
    free(candidate);
    DIR *d = opendir(dir);
    if (!d)
        return LP_OK;
    lp_status st = LP_OK;
    struct dirent *e;
    while (!*path && st == LP_OK && (e = readdir(d))) {
        if (!lp_ends_with(e->d_name, ".yaml"))
            continue;
        char *file = lp_path_join(dir, e->d_name);
        if (!file) {
            st = lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
            break;
        }
        char *text;
        size_t size;
        lp_error ignored = {0};
        if (lp_read_file(file, 1u << 20, &text, &size, &ignored) == LP_OK) {
            if (card_is_from(text, name))
                *path = file;
            free(text);
        }
        if (!*path)
            free(file);
    }
    closedir(d);
    return st;
}

lp_status lp_arch_load(const char *path_or_name, lp_arch *out, lp_error *err)
{
    const char *p = path_or_name;
    if (!p || !*p) {
        lp_arch_init(out);
        return lp_error_set(err, LP_ERR_USAGE, "no model path or card name given");
    }
    if (lp_path_is_dir(p)) {
        char *config = lp_path_join(p, "config.json");
        if (!config)
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", p);
        lp_status st;
        if (lp_path_exists(config))
            st = lp_arch_from_hf_config(config, out, err);
        else {
            lp_arch_init(out);
            st = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: folder has no config.json", p);
        }
        free(config);
        return st;
    }
    if (lp_path_exists(p)) {
        /* A weights file: its architecture is in the config.json beside it. */
        if (lp_ends_with(p, ".safetensors") || lp_ends_with(p, ".safetensors.index.json"))
            return load_sibling_config(p, out, err);
        if (lp_ends_with(p, ".json"))
            return lp_arch_from_hf_config(p, out, err);
        if (lp_ends_with(p, ".yaml") || lp_ends_with(p, ".yml"))
            return lp_arch_from_yaml(p, out, err);
        if (lp_ends_with(p, ".gguf"))
            return load_gguf(p, out, err);
        return load_by_content(p, out, err);
    }
    /* Not a file: the name of a card ("llama-3-8b", any case) or the Hugging Face id of the
     * model a card was taken from ("meta-llama/Meta-Llama-3-8B"). */
    lp_arch_init(out);
    const char *dir = lp_configs_dir();
    char *card = NULL;
    lp_status st = find_card(dir, p, &card, err);
    if (st != LP_OK)
        return st;
    if (card) {
        st = lp_arch_from_yaml(card, out, err);
        free(card);
        return st;
    }
    if (strchr(p, '/'))
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: no such file, and no card in %s was taken from a Hugging Face "
                            "model of that id",
                            p, dir);
    return lp_error_set(err, LP_ERR_NOT_FOUND,
                        "%s: no such file, and no card %s.yaml in %s (see configs/README.md)", p,
                        p, dir);
}
