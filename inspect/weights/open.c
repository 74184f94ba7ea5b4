/* Opening weights: what the path is (lp_detect_format), which file of a folder holds the
 * weights, the sharded safetensors index, and the config or header that describes them. The
 * readers of inspect/formats/ report tensors into the catalogue (catalog.c) through its sink. */
#define _POSIX_C_SOURCE 200809L /* strdup, opendir */
#include "inspect/weights/weights_internal.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/text.h"
#include "inspect/arch/arch_internal.h"
#include "inspect/formats/gguf.h"

#define INDEX_JSON_MAX (256u << 20) /* a sharded index lists names only: 256 MiB is generous */

/* ---- descriptions ---------------------------------------------------------------------------- */

/* An architecture loupe does not describe (yet) leaves the weights readable: remember why and
 * go on without a description. Other errors stay errors. */
static lp_status keep_unsupported(lp_weights *w, lp_status status, const lp_error *err)
{
    free(w->arch);
    w->arch = NULL;
    if (status != LP_ERR_UNSUPPORTED)
        return status;
    snprintf(w->arch_note, sizeof w->arch_note, "%s", err ? err->msg : "unsupported architecture");
    return LP_OK;
}

static lp_status new_arch(lp_weights *w, lp_error *err)
{
    w->arch = malloc(sizeof *w->arch);
    return w->arch ? LP_OK : lp_error_set(err, LP_ERR_NOMEM, "out of memory");
}

/* config.json beside the weights, if any. A config whose family loupe does not know is not an
 * error for the weights: they stay readable without a description. rope_layout stays as
 * lp_arch_from_hf_config set it: HALVES for HF checkpoints (q/k rows permuted for rotate_half),
 * ADJACENT for GPT-J-style rotate_every_two. */
static lp_status load_config(lp_weights *w, const char *dir, lp_error *err)
{
    char *config = lp_path_join(dir, "config.json");
    if (!config)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    lp_status status = LP_OK;
    if (lp_path_exists(config) && (status = new_arch(w, err)) == LP_OK) {
        status = lp_arch_from_hf_config(config, w->arch, err);
        if (status != LP_OK)
            status = keep_unsupported(w, status, err);
        if (status == LP_OK) { /* kept for --strict's list of keys loupe does not read */
            w->config_path = config;
            config = NULL;
        }
    }
    free(config);
    return status;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    size_t len = (size_t)(slash - path);
    if (len == 0)
        len = 1; /* "/x" -> "/" */
    char *dir = malloc(len + 1);
    if (dir) {
        memcpy(dir, path, len);
        dir[len] = '\0';
    }
    return dir;
}

/* ---- safetensors, single and sharded --------------------------------------------------------- */

/* Map one safetensors file and read its tensors into the catalogue; *file_index may be NULL. */
static lp_status add_safetensors(lp_weights *w, const char *path, int *file_index, lp_error *err)
{
    int fi = 0;
    lp_status status = lp_weights_add_file(w, path, &fi, err);
    if (status != LP_OK)
        return status;
    if (file_index)
        *file_index = fi;
    lp_weights_file_sink file = {w, fi};
    lp_tensor_sink sink = lp_weights_sink(&file);
    const lp_mapped_file *map = &w->files[fi];
    return lp_safetensors_read(map->data, map->size, lp_path_basename(map->path), &sink, err);
}

/* A shard file name from the index: a plain name inside the model folder. */
static bool shard_name_ok(const char *name)
{
    return name[0] != '\0' && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

static lp_status read_index(const char *index_path, json_t **root, json_t **map, lp_error *err)
{
    const char *file = lp_path_basename(index_path);
    char *text = NULL;
    size_t size = 0;
    lp_status status = lp_read_file(index_path, INDEX_JSON_MAX, &text, &size, err);
    if (status != LP_OK)
        return status;
    json_error_t jerr;
    *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!*root)
        return lp_error_set(err, LP_ERR_FORMAT, "%s:%d:%d: %s", file, jerr.line, jerr.column,
                            jerr.text);
    *map = json_object_get(*root, "weight_map");
    if (!json_is_object(*map))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: missing or non-object 'weight_map'", file);
    return LP_OK;
}

/* Open every shard the index names, once each, in the order the index first names them. */
static lp_status open_shards(lp_weights *w, const char *index_path, const json_t *map,
                             lp_error *err)
{
    const char *file = lp_path_basename(index_path);
    char *dir = dir_of(index_path);
    const char **shards = calloc(json_object_size(map) + 1, sizeof *shards);
    size_t n_shards = 0;
    lp_status status = dir && shards ? LP_OK : lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)map, key, value)
    {
        if (status != LP_OK)
            break;
        const char *shard = json_string_value(value);
        if (!shard || !shard_name_ok(shard)) {
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: weight_map['%s'] is not a shard file name in the folder",
                                  file, key);
            break;
        }
        size_t s = 0;
        while (s < n_shards && strcmp(shards[s], shard) != 0)
            s++;
        if (s < n_shards)
            continue;
        shards[n_shards++] = shard;
        char *shard_path = lp_path_join(dir, shard);
        status = shard_path ? add_safetensors(w, shard_path, NULL, err)
                            : lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        free(shard_path);
        if (status == LP_ERR_NOT_FOUND)
            lp_error_prefix(err, "%s lists shard '%s': ", file, shard);
    }
    free(shards);
    free(dir);
    return status;
}

/* Every listed tensor is in the shard the index names, and every stored tensor is listed. */
static lp_status check_index(const lp_weights *w, const char *file, const json_t *map,
                             lp_error *err)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)map, key, value)
    {
        const lp_tensor *t = lp_weights_find_name(w, key);
        const char *shard = json_string_value(value);
        if (!t)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tensor '%s' is listed in shard '%s', which does not hold it",
                                file, key, shard);
        const char *holder = lp_weights_file_name(w, t->file_index);
        if (strcmp(holder, shard) != 0)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tensor '%s' is listed in shard '%s' but stored in '%s'",
                                file, key, shard, holder);
    }
    if (w->n_tensors == json_object_size(map))
        return LP_OK;
    /* every listed name was found, so some shard holds tensors the index does not list */
    for (size_t i = 0; i < w->n_tensors; i++)
        if (!json_object_get(map, w->tensors[i].name))
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: shard '%s' holds tensor '%s', which the index does not list",
                                file, lp_weights_file_name(w, w->tensors[i].file_index),
                                w->tensors[i].name);
    return LP_OK;
}

static lp_status open_sharded(lp_weights *w, const char *index_path, lp_error *err)
{
    json_t *root = NULL, *map = NULL;
    lp_status status = read_index(index_path, &root, &map, err);
    if (status == LP_OK)
        status = open_shards(w, index_path, map, err);
    if (status == LP_OK)
        status = lp_weights_index(w, err);
    if (status == LP_OK)
        status = check_index(w, lp_path_basename(index_path), map, err);
    json_decref(root);
    return status;
}

static lp_status open_safetensors(lp_weights *w, const char *path, lp_file_kind kind,
                                  lp_error *err)
{
    char *dir = dir_of(path);
    lp_status status = dir ? load_config(w, dir, err)
                           : lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    free(dir);
    if (status != LP_OK)
        return status;
    if (kind == LP_FILE_SAFETENSORS_INDEX)
        return open_sharded(w, path, err);
    return add_safetensors(w, path, NULL, err);
}

/* ---- GGUF and llama2.c ----------------------------------------------------------------------- */

static lp_status open_gguf(lp_weights *w, const char *path, lp_error *err)
{
    lp_status status = lp_gguf_open(path, &w->gguf, err);
    if (status != LP_OK)
        return status;
    int64_t split_count = 0;
    if (lp_gguf_get_int(w->gguf, "split.count", &split_count) && split_count > 1)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: one of %" PRId64 " split GGUF files (split.count); merge them "
                            "with llama-gguf-split --merge first",
                            lp_path_basename(path), split_count);
    if ((status = new_arch(w, err)) != LP_OK)
        return status;
    status = lp_arch_from_gguf(w->gguf, w->arch, err);
    if (status == LP_ERR_NOT_FOUND) {
        /* a valid file without the hyperparameters (a vocabulary-only GGUF, a bare
         * general.architecture): listed, its description reported incomplete by a check */
        w->arch_incomplete = true;
        status = LP_ERR_UNSUPPORTED;
    }
    if (status != LP_OK && (status = keep_unsupported(w, status, err)) != LP_OK)
        return status;
    lp_weights_file_sink file = {w, 0};
    lp_tensor_sink sink = lp_weights_sink(&file);
    return lp_gguf_read_tensors(w->gguf, &sink, err);
}

static lp_status open_llama2c(lp_weights *w, const char *path, lp_error *err)
{
    int fi = 0;
    lp_status status = lp_weights_add_file(w, path, &fi, err);
    if (status != LP_OK)
        return status;
    const lp_mapped_file *map = &w->files[fi];
    const char *file = lp_path_basename(path);
    lp_llama2c_header header;
    if ((status = lp_llama2c_read_header(map->data, map->size, file, &header, err)) != LP_OK ||
        (status = new_arch(w, err)) != LP_OK)
        return status;
    if ((status = lp_arch_from_llama2c_header(&header, path, w->arch, err)) != LP_OK)
        return status;
    w->arch->rope_layout = LP_ROPE_ADJACENT; /* Meta's original q/k row order */
    lp_weights_file_sink sink_file = {w, fi};
    lp_tensor_sink sink = lp_weights_sink(&sink_file);
    return lp_llama2c_read(map->data, map->size, file, &sink, err);
}

/* ---- folders and the entry points ------------------------------------------------------------ */

/* Count files in dir ending with suffix; *first receives a heap copy of the first one. */
static int find_in_dir(const char *dir, const char *suffix, char **first)
{
    *first = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int count = 0;
    struct dirent *e;
    char *best = NULL;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !lp_ends_with(e->d_name, suffix))
            continue;
        count++;
        if (!best || strcmp(e->d_name, best) < 0) { /* deterministic: the smallest name */
            free(best);
            best = strdup(e->d_name);
        }
    }
    closedir(d);
    if (best) {
        *first = lp_path_join(dir, best);
        free(best);
    }
    return count;
}

/* Which file of a folder holds the weights: the safetensors index, model.safetensors, the only
 * *.safetensors, the only *.gguf or the only *.bin, in that order. */
static lp_status resolve_folder(const char *dir, char **out, lp_error *err)
{
    *out = NULL;
    static const char *const fixed[] = {"model.safetensors.index.json", "model.safetensors", NULL};
    for (size_t i = 0; fixed[i]; i++) {
        char *p = lp_path_join(dir, fixed[i]);
        if (!p)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        if (lp_path_exists(p)) {
            *out = p;
            return LP_OK;
        }
        free(p);
    }
    static const char *const suffixes[] = {".safetensors.index.json", ".safetensors", ".gguf",
                                           ".bin", NULL};
    for (size_t i = 0; suffixes[i]; i++) {
        char *first;
        int n = find_in_dir(dir, suffixes[i], &first);
        if (n == 1) {
            *out = first;
            return LP_OK;
        }
        free(first);
        if (n > 1)
            return lp_error_set(err, LP_ERR_USAGE,
                                "%s: holds %d *%s files; name the one to open", dir, n,
                                suffixes[i]);
    }
    return lp_error_set(err, LP_ERR_NOT_FOUND,
                        "%s: no model.safetensors(.index.json), *.gguf or *.bin in the folder",
                        dir);
}

/* The weights of one file, by what it is. */
static lp_status open_file(lp_weights *w, const char *file, lp_error *err)
{
    lp_file_kind kind = lp_detect_format(file);
    switch (kind) {
    case LP_FILE_GGUF:
        w->format = LP_FORMAT_GGUF;
        return open_gguf(w, file, err);
    case LP_FILE_SAFETENSORS:
    case LP_FILE_SAFETENSORS_INDEX:
        w->format = LP_FORMAT_SAFETENSORS;
        return open_safetensors(w, file, kind, err);
    case LP_FILE_LLAMA2C:
        w->format = LP_FORMAT_LLAMA2C;
        return open_llama2c(w, file, err);
    case LP_FILE_LLAMA2C_TOKENIZER:
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: a llama2.c tokenizer.bin (max_token_length, then score/length/"
                            "bytes records), not a checkpoint; see loupe tokenize",
                            lp_path_basename(file));
    default:
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: not a weights file (expected .safetensors, "
                            ".safetensors.index.json, .gguf or a llama2.c .bin)",
                            file);
    }
}

lp_status lp_weights_open(const char *path, lp_weights **out, lp_error *err)
{
    *out = NULL;
    lp_weights *w = lp_weights_new(path, LP_FORMAT_SAFETENSORS, err);
    if (!w)
        return LP_ERR_NOMEM;
    char *file = NULL;
    lp_status status = LP_OK;
    if (lp_path_is_dir(path))
        status = resolve_folder(path, &file, err);
    else if (!(file = strdup(path)))
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    if (status == LP_OK && !lp_path_exists(file))
        status = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no such file or folder", file);
    if (status == LP_OK)
        status = open_file(w, file, err);
    if (status == LP_OK && !w->by_name)
        status = lp_weights_index(w, err);
    free(file);
    if (status != LP_OK) {
        lp_weights_close(w);
        return status;
    }
    *out = w;
    return LP_OK;
}

lp_status lp_weights_open_safetensors_memory(const void *data, size_t size, const char *name,
                                             lp_weights **out, lp_error *err)
{
    *out = NULL;
    lp_weights *w = lp_weights_new(name, LP_FORMAT_SAFETENSORS, err);
    if (!w)
        return LP_ERR_NOMEM;
    w->files_borrowed = true;
    w->files = calloc(1, sizeof *w->files);
    if (w->files)
        w->n_files = 1;
    lp_status status;
    if (!w->files || !(w->files[0].path = strdup(name))) {
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    w->files[0].data = data;
    w->files[0].size = size;
    lp_weights_file_sink file = {w, 0};
    lp_tensor_sink sink = lp_weights_sink(&file);
    if ((status = lp_safetensors_read(data, size, name, &sink, err)) != LP_OK ||
        (status = lp_weights_index(w, err)) != LP_OK)
        goto fail;
    *out = w;
    return LP_OK;
fail:
    lp_weights_close(w);
    return status;
}
