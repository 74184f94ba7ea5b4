/* Internals of the tensor catalogue shared by the format readers (safetensors.c, llama2c.c,
 * weights.c), the name -> role mapper (roles.c) and `loupe inspect` (cmd_inspect.c).
 *
 * A reader appends tensors to an lp_weights with lp_weights_add_tensor(); weights.c owns the
 * catalogue, the mapped files and the lookup indexes.
 */
#ifndef LP_INSPECT_WEIGHTS_INTERNAL_H
#define LP_INSPECT_WEIGHTS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "core/mapfile.h"
#include "inspect/inspect.h"

struct lp_gguf;

struct lp_weights {
    lp_weights_format format;
    char *path;               /* as given to lp_weights_open */
    lp_mapped_file *files;    /* [n_files]; shards of a sharded safetensors, else one */
    int n_files;
    lp_tensor *tensors;       /* [n_tensors], in file order (shard by shard) */
    size_t n_tensors;
    size_t cap_tensors;
    char **owned_names;       /* [n_tensors] heap copies the tensors' names point into */
    size_t *by_name;          /* [n_tensors] indexes sorted by name */
    size_t *by_role;          /* [n_tensors] indexes sorted by (role, layer, expert, is_bias) */
    lp_arch *arch;            /* NULL when the weights came without a description */
    struct lp_gguf *gguf;     /* GGUF weights only */
    char arch_note[LP_ERROR_MSG_MAX]; /* why arch is NULL although a description was found */
    bool files_borrowed;      /* files[] point at caller memory (fuzzing): never unmapped */
};

/* Parse one safetensors image held in memory (fuzz entry points, tests). data must outlive the
 * handle; lp_weights_close() does not free it. No config.json is looked for. */
lp_status lp_weights_open_safetensors_memory(const void *data, size_t size, const char *name,
                                             lp_weights **out, lp_error *err);

/* The base name of the file holding tensors with this file_index (GGUF maps its own file). */
const char *lp_weights_file_name(const lp_weights *weights, int file_index);
/* Number of files behind the weights (shards; 1 for GGUF and llama2.c). */
int lp_weights_file_count(const lp_weights *weights);

/* Append a tensor (name is copied; role fields are filled from the name with the family of
 * weights->arch, if any). Returns LP_ERR_NOMEM on allocation failure. */
lp_status lp_weights_add_tensor(lp_weights *weights, const lp_tensor *tensor, lp_error *err);

/* Map one more file into weights->files; *index receives its file_index. */
lp_status lp_weights_add_file(lp_weights *weights, const char *path, int *index, lp_error *err);

/* Readers: append the tensors of one file that is already mapped as weights->files[file_index]. */
lp_status lp_safetensors_parse(lp_weights *weights, int file_index, lp_error *err);
/* llama2.c legacy checkpoint: maps path, checks the 28-byte header against the file size and
 * appends one tensor per layer and matrix ("layers.3.wq"). */
lp_status lp_llama2c_load(lp_weights *weights, const char *path, lp_error *err);

/* True when data is a well-formed llama2.c tokenizer.bin rather than a checkpoint. */
bool lp_llama2c_is_tokenizer(const uint8_t *data, size_t size);

/* Set role, layer, expert, is_bias and transposed of *tensor from tensor->name. family is the
 * config's model_type (it decides what "post_attention_layernorm" means) or "" when unknown;
 * format picks the naming scheme (GGUF "blk.N.attn_q", llama2.c "layers.N.wq", HF otherwise). */
void lp_role_assign(lp_tensor *tensor, const char *family, lp_weights_format format);

/* True for roles of stored buffers that are not learnable parameters (RoPE tables, masks). */
bool lp_role_is_buffer(lp_role role);

/* `loupe inspect`'s report of open weights as one JSON object (format, architecture, params,
 * tensors, tied_embeddings, checks); stats adds per-tensor statistics and reads every tensor.
 * Without stats no tensor data is read except the embedding/classifier comparison, which is
 * sampled above 64 MiB. Caller json_decref()s *out. */
lp_status lp_inspect_report(const lp_weights *weights, bool stats, json_t **out, lp_error *err);

/* `loupe inspect --json`: the same document as json_dumps(lp_inspect_report(...),
 * JSON_INDENT(2) | JSON_REAL_PRECISION(9)) plus a newline, byte for byte, written to out with
 * the tensors array streamed (one tensor object alive at a time) so that memory stays a small
 * multiple of the file even with 300,000 tensors. */
lp_status lp_inspect_write_json(const lp_weights *weights, bool stats, FILE *out, lp_error *err);

/* The pieces `loupe inspect` prints from: the report (embed_tensors false leaves the tensors out
 * of the document; *stats_out gets one lp_tensor_stats per tensor when stats, caller frees), the
 * streamed JSON of it. */
typedef struct lp_tensor_stats {
    double min, max, mean, m2; /* over finite values; m2 = sum of squared deviations */
    int64_t n_finite, n_nan, n_inf;
} lp_tensor_stats;
lp_status lp_inspect_build_report(const lp_weights *w, bool stats, bool embed_tensors, json_t **out,
                                  lp_tensor_stats **stats_out, lp_error *err);
/* "[4096, 11008]" */
void lp_format_shape(char *buf, size_t size, const int64_t *shape, int n_dims);
lp_status lp_inspect_write_report_json(FILE *f, json_t *report, const lp_weights *w,
                                       const lp_tensor_stats *stats, lp_error *err);

#endif
