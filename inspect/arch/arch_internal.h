/* Inside the inspect module: writing an lp_arch back out as a YAML card (configs/README.md),
 * and the config/card readers over text in memory (fuzzing, tests).
 *
 *   lp_arch arch;
 *   lp_arch_from_hf_config("config.json", &arch, &err);
 *   lp_arch_write_yaml(&arch, "https://huggingface.co/.../config.json", stdout, &err);
 *   lp_arch_from_yaml_text(text, len, "card.yaml", &arch, &err);   // name is for messages
 *
 * Reading the card back with lp_arch_from_yaml gives an lp_arch equal field by field (except
 * name and source); tests/inspect/test_arch.c checks this round trip.
 */
#ifndef LP_INSPECT_ARCH_INTERNAL_H
#define LP_INSPECT_ARCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "inspect/formats/formats_internal.h"
#include "inspect/inspect.h"

/* The largest count or size any config value may hold (2^40, about 1.1e12: above every real
 * vocabulary, width or context). Readers refuse larger values with an error naming this limit,
 * so sums and small multiples of them cannot overflow int64_t. */
#define LP_ARCH_MAX_COUNT ((int64_t)1 << 40)

/* name_in("qwen2_moe", "gpt_neox starcoder2 qwen2*"): name is one of the space-separated names,
 * or starts with one that ends in '*'. */
bool lp_arch_name_in(const char *name, const char *names);

/* What a family's modeling code hard-codes: the bool at `field` (offsetof(lp_arch, ...)) is
 * `value` for the families listed (as lp_arch_name_in takes them). */
typedef struct lp_arch_fixed {
    const char *families;
    size_t field;
    bool value;
} lp_arch_fixed;
#define LP_ARCH_FIXED(families, field, value) {families, offsetof(lp_arch, field), value}

/* Apply the rows whose families hold `family`, in order. */
void lp_arch_apply_fixed(lp_arch *arch, const char *family, const lp_arch_fixed *rows, size_t n);

/* Read path (at most max_bytes) and describe it with the text reader read (lp_arch_from_hf_json,
 * lp_arch_from_yaml_text); a file that cannot be read leaves *out initialized with its source. */
typedef lp_status (*lp_arch_text_reader)(const char *text, size_t size, const char *name,
                                         lp_arch *out, lp_error *err);
lp_status lp_arch_read_file(const char *path, size_t max_bytes, lp_arch_text_reader read,
                            lp_arch *out, lp_error *err);

/* transformers' defaults for yarn's beta_fast (32) and beta_slow (1) where they are 0. */
void lp_arch_yarn_defaults(lp_rope_scaling *scaling);

/* config_url may be NULL. Returns LP_ERR_IO when the stream fails. */
lp_status lp_arch_write_yaml(const lp_arch *arch, const char *config_url, FILE *out,
                             lp_error *err);

/* The readers of lp_arch_from_hf_config / lp_arch_from_yaml over a buffer of `size` bytes (no
 * NUL needed); `name` stands for the file in messages and in arch->source. */
lp_status lp_arch_from_hf_json(const char *text, size_t size, const char *name, lp_arch *out,
                               lp_error *err);
lp_status lp_arch_from_yaml_text(const char *text, size_t size, const char *name, lp_arch *out,
                                 lp_error *err);

/* The top-level keys of a config.json (and of its text_config, as "text_config.KEY") that the
 * rules never look up and that are not known to leave the network unchanged (bookkeeping,
 * generation defaults, dropout: hf_config.c's no_effect_key), in file order, as a JSON array of strings (caller json_decref()s *keys).
 * Fails as lp_arch_from_hf_config does on a config it cannot read. */
struct json_t;
lp_status lp_hf_config_unread_keys(const char *path, struct json_t **keys, lp_error *err);

/* The description a llama2.c header gives (what run.c hard-codes, plus the header's dims);
 * path is the checkpoint's, for arch->source and messages. */
lp_status lp_arch_from_llama2c_header(const lp_llama2c_header *header, const char *path,
                                      lp_arch *out, lp_error *err);

#endif
