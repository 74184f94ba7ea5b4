/* What the files of trace/synth/ share: the seeded random stream, the family writer's two halves
 * (tensors, config) that the planted model builds on, the output folder, and the planted
 * model's vocabulary. */
#ifndef LP_TRACE_SYNTH_INTERNAL_H
#define LP_TRACE_SYNTH_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/random.h"
#include "inspect/formats/gguf_write.h"
#include "inspect/formats/safetensors_write.h"
#include "trace/synth/synth.h"

/* ---- deterministic randomness (splitmix64): the same bytes on every platform ----------------- */

typedef struct lp_synth_rng {
    uint64_t state;
} lp_synth_rng;

static inline uint64_t lp_synth_rng_next(lp_synth_rng *r)
{
    return lp_splitmix64(&r->state);
}

static inline double lp_synth_rng_uniform(lp_synth_rng *r) /* (0, 1) */
{
    return ((double)(lp_synth_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline double lp_synth_rng_normal(lp_synth_rng *r) /* Box-Muller, one value per call */
{
    double u1 = lp_synth_rng_uniform(r), u2 = lp_synth_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- family.c: a family's tensors and config.json, in memory -------------------------------- */

/* LP_ERR_USAGE naming the field when the spec cannot describe a model of its family. */
lp_status lp_synth_check_spec(const lp_synth_spec *spec, lp_error *err);
/* A folder to write into (LP_ERR_USAGE for an empty path) and lp_synth_check_spec. */
lp_status lp_synth_check_request(const char *out_dir, const lp_synth_spec *spec, lp_error *err);
/* Every tensor of the family, asked of spec->fill (or the random fill) in file order, stored
 * under the family's Hugging Face names; then the "format": "pt" metadata. */
lp_status lp_synth_add_tensors(const lp_synth_spec *spec, lp_st_writer *w, lp_error *err);
/* One tensor as the fill gave it, in the layout the pass computes with ([rows, max(cols, 1)]
 * f32; t.name NULL): what the GGUF form (gguf.c) is built from. */
typedef struct lp_synth_part {
    lp_synth_tensor t;
    float *data;
} lp_synth_part;

typedef struct lp_synth_parts {
    lp_synth_part *items;
    size_t n, cap;
} lp_synth_parts;

/* Every fill lp_synth_add_tensors asks for (the same order and stream: the same weights), kept
 * in memory instead of stored. Free with lp_synth_parts_free (also on failure: it is empty). */
lp_status lp_synth_collect_parts(const lp_synth_spec *spec, lp_synth_parts *parts, lp_error *err);
void lp_synth_parts_free(lp_synth_parts *parts);

/* The family's config.json; NULL when out of memory. */
json_t *lp_synth_config_json(const lp_synth_spec *spec);

/* jansson calls that remember an allocation failure in *ok instead of checking every call. */
void lp_synth_put(json_t *obj, const char *key, json_t *value, bool *ok);
void lp_synth_append(json_t *arr, json_t *value, bool *ok);

/* ---- folder.c: the output folder -------------------------------------------------------------- */

/* One file of a model folder: a safetensors file (tensors), a GGUF file (gguf) or a JSON
 * document (json). */
typedef struct lp_synth_file {
    const char *name;
    const lp_st_writer *tensors;
    json_t *json;
    const lp_gguf_writer *gguf;
} lp_synth_file;

/* Create out_dir (and missing parents), write every file under a temporary name and rename them
 * into place only when all are written; on a failure the temporary files are removed. */
lp_status lp_synth_commit(const char *out_dir, const lp_synth_file *files, size_t n_files,
                          lp_error *err);
/* LP_OK for an empty folder (temporary files of an interrupted run aside) or one whose
 * planted_heads.json names `generator`; LP_ERR_USAGE otherwise, the folder untouched. */
lp_status lp_synth_check_out_dir(const char *dir, const char *generator, lp_error *err);

/* ---- vocab.c: the planted model's whole-word vocabulary and its tokenizer.json ------------- */

#define LP_SYNTH_TOKEN_UNK 0
#define LP_SYNTH_TOKEN_BOS 1
#define LP_SYNTH_TOKEN_EOS 2

typedef struct lp_synth_vocab {
    char **pieces;
    int32_t n, cap;
    int32_t (*merges)[2]; /* left id, right id; rank = index */
    int32_t n_merges, merges_cap;
    bool *is_text;        /* pieces that words are built of: identities kept apart */
} lp_synth_vocab;

/* Llama's layout: <unk> <s> </s>, the 256 byte-fallback tokens, the word mark and characters,
 * then one token per merge of every word of lp_synth_words. */
lp_status lp_synth_vocab_build(lp_synth_vocab *v, lp_error *err);
void lp_synth_vocab_free(lp_synth_vocab *v);
/* A SentencePiece-style BPE tokenizer.json of the vocabulary; NULL or *ok false on OOM. */
json_t *lp_synth_tokenizer_json(const lp_synth_vocab *v, bool *ok);

#endif
