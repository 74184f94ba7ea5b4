/* lp_arch_load: the reader for a path (by lp_detect_format) or a card name; and the description
 * a llama2.c checkpoint's header gives (the header itself is parsed by inspect/formats/llama2c.c,
 * for the catalogue as well).
 */
#define _POSIX_C_SOURCE 200809L
#include "inspect/arch/arch_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "core/platform.h"
#include "core/text.h"
#include "inspect/formats/gguf.h"

lp_status lp_arch_from_llama2c_header(const lp_llama2c_header *h, const char *path,
                                      lp_arch *out, lp_error *err)
{
    lp_arch_init(out);
    snprintf(out->source, sizeof out->source, "%s", path);
    snprintf(out->name, sizeof out->name, "%s", lp_path_basename(path));
    if (h->n_layers > LP_MAX_LAYERS)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: header n_layers %" PRId64 " at byte %d exceeds the limit of %d",
                            path, h->n_layers, h->version == 0 ? 8 : 16, LP_MAX_LAYERS);
    snprintf(out->family, sizeof out->family, "llama");
    out->hidden_size = h->dim;
    out->ffn_hidden = h->hidden_dim;
    out->n_layers = h->n_layers;
    out->n_heads = h->n_heads;
    out->n_kv_heads = h->n_kv_heads;
    out->vocab_size = h->vocab_size;
    out->n_ctx = h->seq_len;
    out->tied_embeddings = h->shared_classifier;
    /* run.c hard-codes these. */
    out->ffn_kind = LP_FFN_SWIGLU;
    out->act = LP_ACT_SILU;
    out->norm_kind = LP_NORM_RMS;
    out->norm_eps = 1e-5;
    out->pos_kind = LP_POS_ROPE;
    out->rope_theta = 10000.0;
    out->rope_layout = LP_ROPE_ADJACENT; /* Meta's original pairing, not rotate_half */
    out->storage_dtype = h->version == 2 ? LP_DTYPE_I8 : LP_DTYPE_F32;
    out->bos_token_id = 1;
    out->eos_token_id = 2;
    return lp_arch_finish(out, err);
}

lp_status lp_arch_from_llama2c(const char *bin_path, lp_arch *out, lp_error *err)
{
    lp_mapped_file map;
    lp_status st = lp_map_file(bin_path, &map, err);
    if (st != LP_OK) {
        lp_arch_init(out);
        snprintf(out->source, sizeof out->source, "%s", bin_path);
        return st;
    }
    /* Only the header is read: the mapping never touches the weights. */
    lp_llama2c_header header;
    st = lp_llama2c_read_header(map.data, map.size, bin_path, &header, err);
    lp_unmap_file(&map);
    if (st != LP_OK) {
        lp_arch_init(out);
        snprintf(out->source, sizeof out->source, "%s", bin_path);
        return st;
    }
    return lp_arch_from_llama2c_header(&header, bin_path, out, err);
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

/* A folder is described by its config.json. */
static lp_status load_folder(const char *dir, lp_arch *out, lp_error *err)
{
    char *config = lp_path_join(dir, "config.json");
    if (!config) {
        lp_arch_init(out);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", dir);
    }
    lp_status st;
    if (lp_path_exists(config)) {
        st = lp_arch_from_hf_config(config, out, err);
    } else {
        lp_arch_init(out);
        st = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: folder has no config.json", dir);
    }
    free(config);
    return st;
}

/* The reader for a file of this kind. */
static lp_status load_file(const char *path, lp_file_kind kind, lp_arch *out, lp_error *err)
{
    switch (kind) {
    case LP_FILE_FOLDER: return load_folder(path, out, err);
    /* A weights file: its architecture is in the config.json beside it. */
    case LP_FILE_SAFETENSORS:
    case LP_FILE_SAFETENSORS_INDEX: return load_sibling_config(path, out, err);
    case LP_FILE_CONFIG_JSON:
    case LP_FILE_TOKENIZER_JSON: return lp_arch_from_hf_config(path, out, err);
    case LP_FILE_YAML_CARD: return lp_arch_from_yaml(path, out, err);
    case LP_FILE_GGUF: return load_gguf(path, out, err);
    case LP_FILE_LLAMA2C_TOKENIZER:
    case LP_FILE_NPY:
        lp_arch_init(out);
        return lp_error_set(err, LP_ERR_FORMAT, "%s: this is a %s, not a model description",
                            path, lp_file_kind_name(kind));
    default:
        /* no magic and no name says what it is: the llama2.c reader says what it is not */
        return lp_arch_from_llama2c(path, out, err);
    }
}

lp_status lp_arch_load(const char *path_or_name, lp_arch *out, lp_error *err)
{
    const char *p = path_or_name;
    if (!p || !*p) {
        lp_arch_init(out);
        return lp_error_set(err, LP_ERR_USAGE, "no model path or card name given");
    }
    if (lp_path_exists(p))
        return load_file(p, lp_detect_format(p), out, err);
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
