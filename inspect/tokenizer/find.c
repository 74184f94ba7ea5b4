/* Finding the tokenizer that goes with a model file or folder. */
#define _POSIX_C_SOURCE 200809L
#include "inspect/tokenizer/tokenizer.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"

/* The folder of a model path: the path itself for a folder, else its parent. Caller frees. */
static char *model_folder(const char *model_path)
{
    if (lp_path_is_dir(model_path))
        return strdup(model_path);
    const char *slash = strrchr(model_path, '/');
    if (!slash)
        return strdup(".");
    size_t len = (size_t)(slash - model_path);
    char *dir = malloc(len + 2);
    if (!dir)
        return NULL;
    memcpy(dir, len ? model_path : "/", len ? len : 1);
    dir[len ? len : 1] = '\0';
    return dir;
}

/* llama2.c tokenizers: tokenizer.bin (run.c's default name), else the first tok*.bin in name
 * order (tok512.bin, tok32000.bin ...), so the choice does not depend on readdir order. */
static char *llama2c_tokenizer_in(const char *dir)
{
    char *bin = lp_path_join(dir, "tokenizer.bin");
    if (!bin || lp_path_exists(bin))
        return bin;
    free(bin);
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char best[256] = "";
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        const char *name = entry->d_name;
        size_t len = strlen(name);
        if (len < 8 || len >= sizeof best || strncmp(name, "tok", 3) != 0 ||
            strcmp(name + len - 4, ".bin") != 0)
            continue;
        if (!best[0] || strcmp(name, best) < 0)
            memcpy(best, name, len + 1);
    }
    closedir(d);
    return best[0] ? lp_path_join(dir, best) : NULL;
}

lp_status lp_tokenizer_for_model(const char *model_path, const struct lp_gguf *gguf,
                                 bool is_llama2c, lp_tokenizer **out, lp_error *err)
{
    *out = NULL;
    if (gguf)
        return lp_tokenizer_from_gguf(gguf, out, err);
    char *dir = model_folder(model_path);
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
