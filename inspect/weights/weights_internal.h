/* Internals of the tensor catalogue: the lp_weights handle (catalog.c), opening files into it
 * (open.c), the name -> role mapper (roles.c). The report `loupe inspect` prints is
 * weights/report_internal.h.
 *
 *   lp_weights *w = lp_weights_new(path, LP_FORMAT_SAFETENSORS, &err);
 *   int fi;
 *   lp_weights_add_file(w, "model.safetensors", &fi, &err);     // maps it
 *   lp_weights_file_sink file = {w, fi};
 *   lp_tensor_sink sink = lp_weights_sink(&file);                // tensors of that file
 *   lp_safetensors_read(w->files[fi].data, w->files[fi].size, "model.safetensors", &sink, &err);
 *   lp_weights_index(w, &err);                                   // by name and role; duplicates
 *
 * The readers (formats/) report tensors through the sink and know nothing of this struct.
 */
#ifndef LP_INSPECT_WEIGHTS_INTERNAL_H
#define LP_INSPECT_WEIGHTS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mapfile.h"
#include "inspect/formats/formats_internal.h"
#include "inspect/inspect.h"

struct lp_gguf;

struct lp_weights {
    lp_weights_format format;
    char *path;               /* as given to lp_weights_open */
    lp_mapped_file *files;    /* [n_files]; shards of a sharded safetensors, else one */
    int n_files;
    lp_tensor *tensors;       /* [n_tensors], file order (shard by shard); names are our copies */
    size_t n_tensors;
    size_t cap_tensors;
    size_t *by_name;          /* [n_tensors] indexes sorted by name */
    size_t *by_role;          /* [n_tensors] indexes sorted by (role, layer, expert, is_bias) */
    lp_arch *arch;            /* NULL when the weights came without a description */
    struct lp_gguf *gguf;     /* GGUF weights only */
    char arch_note[LP_ERROR_MSG_MAX]; /* why arch is NULL although a description was found */
    char *config_path;        /* the config.json the description was read from, or NULL */
    bool arch_incomplete;     /* a GGUF that lacks required hyperparameters: a failed check */
    bool files_borrowed;      /* files[] point at caller memory (fuzzing): never unmapped */
};

/* An empty catalogue of this format (path copied); NULL (with err set) when out of memory. */
lp_weights *lp_weights_new(const char *path, lp_weights_format format, lp_error *err);

/* Map one more file into weights->files; *index receives its file_index. */
lp_status lp_weights_add_file(lp_weights *weights, const char *path, int *index, lp_error *err);

/* Append a tensor of file file_index (name copied; role fields filled from the name with the
 * family of weights->arch, if any). */
lp_status lp_weights_add_tensor(lp_weights *weights, int file_index, const lp_tensor_desc *tensor,
                                lp_error *err);

/* A sink that adds the tensors a reader reports to file->weights as file->file_index's; it
 * points at *file, which must outlive the reader's call. */
typedef struct lp_weights_file_sink {
    lp_weights *weights;
    int file_index;
} lp_weights_file_sink;
lp_tensor_sink lp_weights_sink(lp_weights_file_sink *file);

/* Build the name and role indexes; two tensors of one name are LP_ERR_FORMAT naming the files. */
lp_status lp_weights_index(lp_weights *weights, lp_error *err);

/* Parse one safetensors image held in memory (fuzz entry points, tests). data must outlive the
 * handle; lp_weights_close() does not free it. No config.json is looked for. */
lp_status lp_weights_open_safetensors_memory(const void *data, size_t size, const char *name,
                                             lp_weights **out, lp_error *err);

/* The base name of the file holding tensors with this file_index (GGUF maps its own file). */
const char *lp_weights_file_name(const lp_weights *weights, int file_index);
/* Number of files behind the weights (shards; 1 for GGUF and llama2.c). */
int lp_weights_file_count(const lp_weights *weights);

/* Set role, layer, expert, is_bias and transposed of *tensor from tensor->name. family is the
 * config's model_type (it decides what "post_attention_layernorm" means) or "" when unknown;
 * format picks the naming scheme (GGUF "blk.N.attn_q", llama2.c "layers.N.wq", HF otherwise). */
void lp_role_assign(lp_tensor *tensor, const char *family, lp_weights_format format);

/* True for roles of stored buffers that are not learnable parameters (RoPE tables, masks). */
bool lp_role_is_buffer(lp_role role);

#endif
