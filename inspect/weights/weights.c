/* The tensor catalogue: opens safetensors (single or sharded), GGUF and llama2.c checkpoints,
 * keeps their files mapped, indexes tensors by name and role, and converts rows to float32. */
#define _POSIX_C_SOURCE 200809L /* strdup, opendir */
#include "inspect/weights/weights_internal.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/text.h"
#include "core/checked.h"
#include "inspect/formats/gguf.h"
#include "inspect/formats/quant.h"

#define INDEX_JSON_MAX (256u << 20) /* a sharded index lists names only: 256 MiB is generous */

lp_status lp_weights_add_file(lp_weights *w, const char *path, int *index, lp_error *err)
{
    lp_mapped_file *files = realloc(w->files, (size_t)(w->n_files + 1) * sizeof *files);
    if (!files)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    w->files = files;
    lp_status status = lp_map_file(path, &w->files[w->n_files], err);
    if (status != LP_OK)
        return status;
    *index = w->n_files++;
    return LP_OK;
}

lp_status lp_weights_add_tensor(lp_weights *w, const lp_tensor *tensor, lp_error *err)
{
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        lp_tensor *tensors = realloc(w->tensors, cap * sizeof *tensors);
        if (!tensors)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for %zu tensors", cap);
        w->tensors = tensors;
        char **names = realloc(w->owned_names, cap * sizeof *names);
        if (!names)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for %zu tensors", cap);
        w->owned_names = names;
        w->cap_tensors = cap;
    }
    char *name = strdup(tensor->name);
    if (!name)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for tensor '%s'", tensor->name);
    lp_tensor *t = &w->tensors[w->n_tensors];
    *t = *tensor;
    t->name = name;
    w->owned_names[w->n_tensors] = name;
    w->n_tensors++;
    lp_role_assign(t, w->arch ? w->arch->family : "", w->format);
    return LP_OK;
}

const char *lp_weights_file_name(const lp_weights *w, int file_index)
{
    if (w->gguf)
        return lp_path_basename(lp_gguf_path(w->gguf));
    if (file_index < 0 || file_index >= w->n_files)
        return "?";
    return lp_path_basename(w->files[file_index].path);
}

int lp_weights_file_count(const lp_weights *w) { return w->gguf ? 1 : w->n_files; }

/* ---- lookup indexes ---------------------------------------------------------------------- */

/* The comparators see pointers into w->tensors, so no global context is needed (qsort has no
 * context argument in C11) and opening weights stays thread-safe. Ties keep file order. */
static int cmp_name(const void *a, const void *b)
{
    const lp_tensor *x = *(const lp_tensor *const *)a, *y = *(const lp_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x < y ? -1 : 1;
}

static int cmp_key(lp_role ra, int la, int ea, bool ba, const lp_tensor *y)
{
    if (ra != y->role)
        return ra < y->role ? -1 : 1;
    if (la != y->layer)
        return la < y->layer ? -1 : 1;
    if (ea != y->expert)
        return ea < y->expert ? -1 : 1;
    if (ba != y->is_bias)
        return ba ? 1 : -1;
    return 0;
}

static int cmp_role(const void *a, const void *b)
{
    const lp_tensor *x = *(const lp_tensor *const *)a, *y = *(const lp_tensor *const *)b;
    int c = cmp_key(x->role, x->layer, x->expert, x->is_bias, y);
    if (c)
        return c;
    return x < y ? -1 : 1;
}

static lp_status build_indexes(lp_weights *w, lp_error *err)
{
    size_t n = w->n_tensors;
    const lp_tensor **order = malloc((n ? n : 1) * sizeof *order);
    w->by_name = malloc((n ? n : 1) * sizeof *w->by_name);
    w->by_role = malloc((n ? n : 1) * sizeof *w->by_role);
    if (!order || !w->by_name || !w->by_role) {
        free(order);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory indexing %zu tensors", n);
    }
    for (size_t i = 0; i < n; i++)
        order[i] = &w->tensors[i];
    qsort(order, n, sizeof *order, cmp_name);
    for (size_t i = 0; i < n; i++)
        w->by_name[i] = (size_t)(order[i] - w->tensors);
    qsort(order, n, sizeof *order, cmp_role);
    for (size_t i = 0; i < n; i++)
        w->by_role[i] = (size_t)(order[i] - w->tensors);
    free(order);
    for (size_t i = 1; i < n; i++) {
        const lp_tensor *a = &w->tensors[w->by_name[i - 1]];
        const lp_tensor *b = &w->tensors[w->by_name[i]];
        if (strcmp(a->name, b->name) == 0) {
            if (a->file_index != b->file_index)
                return lp_error_set(err, LP_ERR_FORMAT, "tensor '%s' appears in both %s and %s",
                                    a->name, lp_weights_file_name(w, a->file_index),
                                    lp_weights_file_name(w, b->file_index));
            return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s' appears twice",
                                lp_weights_file_name(w, a->file_index), a->name);
        }
    }
    return LP_OK;
}

const lp_tensor *lp_weights_find_name(const lp_weights *w, const char *name)
{
    size_t lo = 0, hi = w->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, w->tensors[w->by_name[mid]].name);
        if (c == 0)
            return &w->tensors[w->by_name[mid]];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const lp_tensor *lp_weights_find(const lp_weights *w, lp_role role, int layer, int expert,
                                 bool is_bias)
{
    size_t lo = 0, hi = w->n_tensors;
    while (lo < hi) { /* first index whose key is >= the one asked for */
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(role, layer, expert, is_bias, &w->tensors[w->by_role[mid]]) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < w->n_tensors &&
        cmp_key(role, layer, expert, is_bias, &w->tensors[w->by_role[lo]]) == 0)
        return &w->tensors[w->by_role[lo]];
    return NULL;
}

/* ---- formats ----------------------------------------------------------------------------- */

/* An architecture loupe does not describe (yet) leaves the weights readable: remember why and
 * go on without a description. Other errors stay errors. */
static lp_status keep_unsupported(lp_weights *w, lp_status status, const lp_error *err)
{
    if (status != LP_ERR_UNSUPPORTED)
        return status;
    snprintf(w->arch_note, sizeof w->arch_note, "%s", err ? err->msg : "unsupported architecture");
    return LP_OK;
}

/* config.json beside the weights, if any. A config whose family loupe does not know is not an
 * error for the weights: they stay readable without a description. */
static lp_status load_config(lp_weights *w, const char *dir, lp_error *err)
{
    char *config = lp_path_join(dir, "config.json");
    if (!config)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    lp_status status = LP_OK;
    if (lp_path_exists(config)) {
        w->arch = malloc(sizeof *w->arch);
        if (!w->arch) {
            free(config);
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        }
        status = lp_arch_from_hf_config(config, w->arch, err);
        if (status != LP_OK) {
            free(w->arch);
            w->arch = NULL;
            status = keep_unsupported(w, status, err);
        }
        /* rope_layout stays as lp_arch_from_hf_config set it: HALVES for HF checkpoints (q/k
         * rows permuted for rotate_half), ADJACENT for GPT-J-style rotate_every_two. */
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

static lp_status open_safetensors_file(lp_weights *w, const char *path, lp_error *err)
{
    int fi = 0;
    lp_status status = lp_weights_add_file(w, path, &fi, err);
    if (status != LP_OK)
        return status;
    return lp_safetensors_parse(w, fi, err);
}

/* A shard file name from the index: a plain name inside the model folder. */
static bool shard_name_ok(const char *name)
{
    return name[0] != '\0' && !strchr(name, '/') && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

static lp_status open_sharded(lp_weights *w, const char *index_path, lp_error *err)
{
    const char *file = lp_path_basename(index_path);
    char *text = NULL;
    size_t size = 0;
    lp_status status = lp_read_file(index_path, INDEX_JSON_MAX, &text, &size, err);
    if (status != LP_OK)
        return status;
    json_error_t jerr;
    json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return lp_error_set(err, LP_ERR_FORMAT, "%s:%d:%d: %s", file, jerr.line, jerr.column,
                            jerr.text);
    char *dir = dir_of(index_path);
    const char **shards = NULL;
    int *shard_file = NULL;
    size_t n_shards = 0;
    json_t *map = json_object_get(root, "weight_map");
    if (!dir) {
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (!json_is_object(map)) {
        status = lp_error_set(err, LP_ERR_FORMAT, "%s: missing or non-object 'weight_map'", file);
        goto done;
    }
    size_t n_entries = json_object_size(map);
    shards = calloc(n_entries ? n_entries : 1, sizeof *shards);
    shard_file = calloc(n_entries ? n_entries : 1, sizeof *shard_file);
    if (!shards || !shard_file) {
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto done;
    }
    const char *key;
    json_t *value;
    json_object_foreach(map, key, value)
    {
        if (!json_is_string(value) || !shard_name_ok(json_string_value(value))) {
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: weight_map['%s'] is not a shard file name in the folder",
                                  file, key);
            goto done;
        }
        const char *shard = json_string_value(value);
        size_t s = 0;
        while (s < n_shards && strcmp(shards[s], shard) != 0)
            s++;
        if (s < n_shards)
            continue;
        shards[n_shards] = shard;
        char *shard_path = lp_path_join(dir, shard);
        if (!shard_path) {
            status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
            goto done;
        }
        status = lp_weights_add_file(w, shard_path, &shard_file[n_shards], err);
        if (status == LP_OK)
            status = lp_safetensors_parse(w, shard_file[n_shards], err);
        free(shard_path);
        if (status != LP_OK) {
            if (status == LP_ERR_NOT_FOUND)
                lp_error_prefix(err, "%s lists shard '%s': ", file, shard);
            goto done;
        }
        n_shards++;
    }
    status = build_indexes(w, err);
    if (status != LP_OK)
        goto done;
    json_object_foreach(map, key, value)
    {
        const lp_tensor *t = lp_weights_find_name(w, key);
        const char *shard = json_string_value(value);
        if (!t) {
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: tensor '%s' is listed in shard '%s', which does not hold it",
                                  file, key, shard);
            goto done;
        }
        const char *holder = lp_path_basename(w->files[t->file_index].path);
        if (strcmp(holder, shard) != 0) {
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: tensor '%s' is listed in shard '%s' but stored in '%s'",
                                  file, key, shard, holder);
            goto done;
        }
    }
    if (w->n_tensors != n_entries) {
        /* every listed name was found, so some shard holds tensors the index does not list */
        for (size_t i = 0; i < w->n_tensors; i++) {
            if (!json_object_get(map, w->tensors[i].name)) {
                status = lp_error_set(err, LP_ERR_FORMAT,
                                      "%s: shard '%s' holds tensor '%s', which the index does "
                                      "not list",
                                      file, lp_weights_file_name(w, w->tensors[i].file_index),
                                      w->tensors[i].name);
                goto done;
            }
        }
    }
done:
    free(shards);
    free(shard_file);
    free(dir);
    json_decref(root);
    return status;
}

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
    w->arch = malloc(sizeof *w->arch);
    if (!w->arch)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    status = lp_arch_from_gguf(w->gguf, w->arch, err);
    if (status != LP_OK) {
        free(w->arch);
        w->arch = NULL;
        if ((status = keep_unsupported(w, status, err)) != LP_OK)
            return status;
    }
    const char *file = lp_path_basename(path);
    int64_t n = lp_gguf_n_tensors(w->gguf);
    for (int64_t i = 0; i < n; i++) {
        lp_tensor t = {0};
        t.name = lp_gguf_tensor_name(w->gguf, i);
        t.dtype = lp_gguf_tensor_dtype(w->gguf, i);
        t.n_dims = lp_gguf_tensor_n_dims(w->gguf, i);
        if (!t.name || t.dtype == LP_DTYPE_INVALID)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor %" PRId64 " has no known type",
                                file, i);
        if (t.n_dims < 0 || t.n_dims > LP_MAX_DIMS)
            return lp_error_set(err, LP_ERR_UNSUPPORTED,
                                "%s: tensor '%s': %d dimensions exceed the limit of %d", file,
                                t.name, t.n_dims, LP_MAX_DIMS);
        uint64_t n_elements = 1;
        for (int d = 0; d < t.n_dims; d++) {
            /* GGUF lists ne[0] (the row length) first; shapes here are outermost first */
            int64_t ne = lp_gguf_tensor_ne(w->gguf, i, d);
            if (ne < 0 || !lp_mul_u64(n_elements, (uint64_t)ne, &n_elements) ||
                n_elements > (uint64_t)INT64_MAX)
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s: tensor '%s': dimension %d (%" PRId64
                                    ") is negative or overflows 64 bits",
                                    file, t.name, d, ne);
            t.shape[t.n_dims - 1 - d] = ne;
        }
        t.n_elements = (int64_t)n_elements;
        t.n_bytes = lp_gguf_tensor_bytes(w->gguf, i);
        uint64_t need;
        if (!lp_dtype_bytes_for(t.dtype, n_elements, &need) || need != t.n_bytes)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tensor '%s': %" PRIu64 " elements of %s do not make %" PRIu64
                                " bytes",
                                file, t.name, n_elements, lp_dtype_name(t.dtype), t.n_bytes);
        t.file_index = 0;
        t.file_offset = lp_gguf_tensor_offset(w->gguf, i);
        t.data = lp_gguf_tensor_data(w->gguf, i);
        if (!t.data && t.n_bytes > 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': no data in the file", file,
                                t.name);
        if ((status = lp_weights_add_tensor(w, &t, err)) != LP_OK)
            return status;
    }
    return LP_OK;
}

static lp_status open_llama2c(lp_weights *w, const char *path, lp_error *err)
{
    lp_mapped_file probe;
    lp_status status = lp_map_file(path, &probe, err);
    if (status != LP_OK)
        return status;
    bool tokenizer = lp_llama2c_is_tokenizer(probe.data, probe.size);
    /* pytorch_model.bin: a zip archive (torch.save since 1.6) or a bare pickle (protocol 2-5) */
    bool torch = probe.size >= 4 && (memcmp(probe.data, "PK\x03\x04", 4) == 0 ||
                                     (probe.data[0] == 0x80 && probe.data[1] >= 2 &&
                                      probe.data[1] <= 5));
    lp_unmap_file(&probe);
    if (torch)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: a PyTorch checkpoint (zip/pickle), not a llama2.c .bin; loupe "
                            "reads safetensors, GGUF and llama2.c (convert it to safetensors)",
                            lp_path_basename(path));
    if (tokenizer)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: a llama2.c tokenizer.bin (max_token_length, then score/length/"
                            "bytes records), not a checkpoint; see loupe tokenize",
                            lp_path_basename(path));
    w->arch = malloc(sizeof *w->arch);
    if (!w->arch)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    status = lp_arch_from_llama2c(path, w->arch, err);
    if (status != LP_OK) {
        free(w->arch);
        w->arch = NULL;
        return status;
    }
    w->arch->rope_layout = LP_ROPE_ADJACENT; /* Meta's original q/k row order */
    return lp_llama2c_load(w, path, err);
}

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

lp_status lp_weights_open(const char *path, lp_weights **out, lp_error *err)
{
    *out = NULL;
    lp_weights *w = calloc(1, sizeof *w);
    if (!w)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    w->path = strdup(path);
    char *file = NULL, *dir = NULL;
    lp_status status = LP_OK;
    if (!w->path) {
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (lp_path_is_dir(path)) {
        if ((status = resolve_folder(path, &file, err)) != LP_OK)
            goto fail;
    } else {
        file = strdup(path);
    }
    dir = file ? dir_of(file) : NULL;
    if (!file || !dir) {
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (!lp_path_exists(file)) {
        status = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no such file or folder", file);
        goto fail;
    }
    if (lp_ends_with(file, ".gguf")) {
        w->format = LP_FORMAT_GGUF;
        status = open_gguf(w, file, err);
    } else if (lp_ends_with(file, ".safetensors") || lp_ends_with(file, ".safetensors.index.json")) {
        w->format = LP_FORMAT_SAFETENSORS;
        status = load_config(w, dir, err);
        if (status == LP_OK)
            status = lp_ends_with(file, ".json") ? open_sharded(w, file, err)
                                              : open_safetensors_file(w, file, err);
    } else if (lp_ends_with(file, ".bin")) {
        w->format = LP_FORMAT_LLAMA2C;
        status = open_llama2c(w, file, err);
    } else {
        status = lp_error_set(err, LP_ERR_UNSUPPORTED,
                              "%s: not a weights file (expected .safetensors, "
                              ".safetensors.index.json, .gguf or a llama2.c .bin)",
                              file);
    }
    if (status == LP_OK && !w->by_name)
        status = build_indexes(w, err);
    if (status != LP_OK)
        goto fail;
    free(file);
    free(dir);
    *out = w;
    return LP_OK;
fail:
    free(file);
    free(dir);
    lp_weights_close(w);
    return status;
}

lp_status lp_weights_open_safetensors_memory(const void *data, size_t size, const char *name,
                                             lp_weights **out, lp_error *err)
{
    *out = NULL;
    lp_weights *w = calloc(1, sizeof *w);
    if (!w)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    w->format = LP_FORMAT_SAFETENSORS;
    w->files_borrowed = true;
    w->path = strdup(name);
    w->files = calloc(1, sizeof *w->files);
    if (w->files)
        w->n_files = 1;
    lp_status status;
    if (!w->path || !w->files || !(w->files[0].path = strdup(name))) {
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    w->files[0].data = data;
    w->files[0].size = size;
    if ((status = lp_safetensors_parse(w, 0, err)) != LP_OK ||
        (status = build_indexes(w, err)) != LP_OK)
        goto fail;
    *out = w;
    return LP_OK;
fail:
    lp_weights_close(w);
    return status;
}

void lp_weights_close(lp_weights *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->owned_names[i]);
    free(w->owned_names);
    free(w->tensors);
    free(w->by_name);
    free(w->by_role);
    for (int i = 0; i < w->n_files; i++) {
        if (w->files_borrowed)
            free(w->files[i].path);
        else
            lp_unmap_file(&w->files[i]);
    }
    free(w->files);
    if (w->gguf)
        lp_gguf_close(w->gguf);
    free(w->arch);
    free(w->path);
    free(w);
}

lp_weights_format lp_weights_format_of(const lp_weights *w) { return w->format; }

const char *lp_weights_format_name(lp_weights_format format)
{
    switch (format) {
    case LP_FORMAT_SAFETENSORS: return "safetensors";
    case LP_FORMAT_GGUF: return "gguf";
    case LP_FORMAT_LLAMA2C: return "llama2c";
    default: return "unknown";
    }
}

size_t lp_weights_count(const lp_weights *w) { return w->n_tensors; }

const lp_tensor *lp_weights_tensor(const lp_weights *w, size_t index)
{
    return index < w->n_tensors ? &w->tensors[index] : NULL;
}

const lp_arch *lp_weights_arch(const lp_weights *w) { return w->arch; }

const struct lp_gguf *lp_weights_gguf(const lp_weights *w) { return w->gguf; }

const char *lp_weights_path(const lp_weights *w) { return w->path; }

/* ---- rows to float32 --------------------------------------------------------------------- */

static void convert_plain(lp_dtype dtype, const uint8_t *src, int64_t n, float *dst)
{
    switch (dtype) {
    case LP_DTYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case LP_DTYPE_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, src + 8 * i, 8);
            dst[i] = (float)v;
        }
        break;
    case LP_DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lp_f16_to_f32(lp_load_u16(src + 2 * i));
        break;
    case LP_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lp_bf16_to_f32(lp_load_u16(src + 2 * i));
        break;
    case LP_DTYPE_F8_E4M3:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lp_f8_e4m3_to_f32(src[i]);
        break;
    case LP_DTYPE_F8_E5M2:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lp_f8_e5m2_to_f32(src[i]);
        break;
    case LP_DTYPE_I64:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)(int64_t)lp_load_u64(src + 8 * i);
        break;
    case LP_DTYPE_U64:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)lp_load_u64(src + 8 * i);
        break;
    case LP_DTYPE_I32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)lp_load_i32(src + 4 * i);
        break;
    case LP_DTYPE_U32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)lp_load_u32(src + 4 * i);
        break;
    case LP_DTYPE_I16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)(int16_t)lp_load_u16(src + 2 * i);
        break;
    case LP_DTYPE_U16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)lp_load_u16(src + 2 * i);
        break;
    case LP_DTYPE_I8:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)(int8_t)src[i];
        break;
    case LP_DTYPE_U8:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)src[i];
        break;
    case LP_DTYPE_BOOL:
        for (int64_t i = 0; i < n; i++)
            dst[i] = src[i] ? 1.0f : 0.0f;
        break;
    default: break;
    }
}

lp_status lp_tensor_rows_f32(const lp_tensor *t, int64_t row_begin, int64_t n_rows, float *dst,
                             lp_error *err)
{
    int64_t row_len = t->n_dims > 0 ? t->shape[t->n_dims - 1] : 1;
    int64_t total_rows = row_len > 0 ? t->n_elements / row_len : 0;
    int64_t end;
    if (row_begin < 0 || n_rows < 0 || !lp_add_i64(row_begin, n_rows, &end) || end > total_rows)
        return lp_error_set(err, LP_ERR_RANGE,
                            "tensor '%s': rows [%" PRId64 ", %" PRId64 "+%" PRId64
                            ") outside its %" PRId64 " rows",
                            t->name, row_begin, row_begin, n_rows, total_rows);
    if (n_rows == 0 || row_len == 0)
        return LP_OK;
    const lp_dtype_info *info = lp_dtype_get(t->dtype);
    if (row_len % info->block_elems != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "tensor '%s': row length %" PRId64 " is not a whole number of %s "
                            "blocks (%u values)",
                            t->name, row_len, info->name, info->block_elems);
    /* in range of n_bytes, which the reader checked against the file */
    uint64_t row_bytes = (uint64_t)(row_len / info->block_elems) * info->block_bytes;
    const uint8_t *src = (const uint8_t *)t->data + (uint64_t)row_begin * row_bytes;
    int64_t n = n_rows * row_len;
    if (info->is_quant) {
        lp_status status = lp_dequantize(t->dtype, src, n, dst, err);
        if (status != LP_OK)
            lp_error_prefix(err, "tensor '%s': ", t->name);
        return status;
    }
    if (t->dtype == LP_DTYPE_INVALID)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "tensor '%s': invalid dtype", t->name);
    convert_plain(t->dtype, src, n, dst);
    return LP_OK;
}
