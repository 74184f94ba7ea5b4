/* Opening a tokenizer: what the path is (lp_detect_format) picks the loader; a model folder, or
 * a model file with its tokenizer beside it, is searched for one. Loaders never call back here. */
#define _POSIX_C_SOURCE 200809L /* opendir, strdup */
#include "inspect/tokenizer/tokenizer.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "core/text.h"
#include "inspect/formats/detect.h"
#include "inspect/tokenizer/tokenizer_internal.h"

/* The folder of a model path: the path itself for a folder, else its parent. Caller frees. */
static char *folder_of(const char *path)
{
    if (lp_path_is_dir(path))
        return strdup(path);
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    size_t len = slash == path ? 1 : (size_t)(slash - path); /* "/x" -> "/" */
    return lp_tok_strndup(path, len);
}

static bool is_tok_bin(const char *name)
{
    return strncmp(name, "tok", 3) == 0 && lp_ends_with(name, ".bin");
}

static bool is_gguf(const char *name)
{
    return lp_ends_with(name, ".gguf");
}

/* The path of the first name in dir (in name order, so that the choice does not depend on
 * readdir's) that want() accepts, or NULL; caller frees. */
static char *first_in_dir(const char *dir, bool (*want)(const char *name))
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *best = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!want(e->d_name) || (best && strcmp(e->d_name, best) >= 0))
            continue;
        char *copy = strdup(e->d_name);
        if (copy) {
            free(best);
            best = copy;
        }
    }
    closedir(d);
    char *path = best ? lp_path_join(dir, best) : NULL;
    free(best);
    return path;
}

/* A llama2.c tokenizer in dir: tokenizer.bin (run.c's default name), else the first tok*.bin
 * (tok512.bin, tok32000.bin ...). */
static char *llama2c_tokenizer_in(const char *dir)
{
    char *bin = lp_path_join(dir, "tokenizer.bin");
    if (!bin || lp_path_exists(bin))
        return bin;
    free(bin);
    return first_in_dir(dir, is_tok_bin);
}

static lp_status load_llama2c(const char *path, lp_tokenizer **out, lp_error *err)
{
    lp_mapped_file map;
    lp_status st = lp_map_file(path, &map, err);
    if (st != LP_OK)
        return st;
    st = lp_tok_load_llama2c(path, map.data, map.size, out, err);
    lp_unmap_file(&map);
    return st;
}

/* The loader for a file of this kind; LP_ERR_NOT_FOUND when the file is no tokenizer (JSON
 * without a tokenizer's "model" included; a GGUF without a vocabulary). */
static lp_status load_file(const char *path, lp_file_kind kind, lp_tokenizer **out,
                           lp_error *err)
{
    switch (kind) {
    case LP_FILE_GGUF: return lp_tok_load_gguf_path(path, out, err);
    case LP_FILE_LLAMA2C_TOKENIZER: return load_llama2c(path, out, err);
    case LP_FILE_TOKENIZER_JSON:
    case LP_FILE_CONFIG_JSON:
    case LP_FILE_SAFETENSORS_INDEX: return lp_tok_load_json(path, out, err);
    default: return LP_ERR_NOT_FOUND;
    }
}

/* A model folder: tokenizer.json, tokenizer.bin, the first tok*.bin, then the first .gguf. */
static lp_status open_dir(const char *dir, lp_tokenizer **out, lp_error *err)
{
    char *candidates[4] = {lp_path_join(dir, "tokenizer.json"), lp_path_join(dir, "tokenizer.bin"),
                           first_in_dir(dir, is_tok_bin), first_in_dir(dir, is_gguf)};
    lp_status st = LP_ERR_NOT_FOUND;
    for (size_t k = 0; k < 4 && st == LP_ERR_NOT_FOUND; k++) {
        const char *p = candidates[k];
        if (p && lp_path_exists(p) && !lp_path_is_dir(p)) /* (no memory for a name: go on) */
            st = load_file(p, lp_detect_format(p), out, err);
    }
    for (size_t k = 0; k < 4; k++)
        free(candidates[k]);
    if (st == LP_ERR_NOT_FOUND)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no tokenizer.json, tokenizer.bin, "
                            "tok*.bin or .gguf in this folder (give one with --tokenizer FILE)",
                            dir);
    return st;
}

/* A file: a tokenizer itself, else (a config.json, a checkpoint) the tokenizer beside it. A
 * GGUF named on its own is the tokenizer asked for: its error stands. */
static lp_status open_file(const char *path, lp_tokenizer **out, lp_error *err)
{
    lp_file_kind kind = lp_detect_format(path);
    lp_status st = load_file(path, kind, out, err);
    if (st != LP_ERR_NOT_FOUND || kind == LP_FILE_GGUF)
        return st;
    char *dir = folder_of(path);
    if (!dir)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    st = open_dir(dir, out, err);
    free(dir);
    if (st == LP_ERR_NOT_FOUND)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: not a tokenizer (tokenizer.json, "
                            "llama2.c tokenizer .bin or .gguf) and none beside it; give one "
                            "with --tokenizer FILE", path);
    return st;
}

lp_status lp_tokenizer_open(const char *path, lp_tokenizer **out, lp_error *err)
{
    LP_ASSERT(path && out);
    *out = NULL;
    if (!lp_path_exists(path))
        return lp_error_set(err, LP_ERR_IO, "%s: no such file or folder", path);
    if (lp_path_is_dir(path))
        return open_dir(path, out, err);
    return open_file(path, out, err);
}

lp_status lp_tokenizer_for_model(const char *model_path, const struct lp_gguf *gguf,
                                 bool is_llama2c, lp_tokenizer **out, lp_error *err)
{
    *out = NULL;
    if (gguf)
        return lp_tokenizer_from_gguf(gguf, out, err);
    char *dir = folder_of(model_path);
    char *json = dir ? lp_path_join(dir, "tokenizer.json") : NULL;
    if (!json) {
        free(dir);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    lp_status st;
    char *bin = NULL;
    if (lp_path_exists(json)) {
        st = lp_tokenizer_open(json, out, err);
    } else if (is_llama2c && (bin = llama2c_tokenizer_in(dir)) != NULL) {
        st = lp_tokenizer_open(bin, out, err);
    } else {
        st = lp_error_set(err, LP_ERR_NOT_FOUND,
                          "%s: no tokenizer found beside the model (looked for %s%s); give "
                          "--tokenizer FILE or --tokens IDS",
                          model_path, json, is_llama2c ? ", tokenizer.bin and tok*.bin" : "");
    }
    free(bin);
    free(json);
    free(dir);
    return st;
}
