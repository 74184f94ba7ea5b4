/* "What file is this?": one answer for every part of loupe that takes a path, decided by the
 * file's bytes first (magic numbers, a llama2.c header that fits its file, a tokenizer.bin's
 * records), then by its name, then by JSON text where the name says nothing.
 *
 *   switch (lp_detect_format("models/x/model.safetensors")) {
 *   case LP_FILE_SAFETENSORS: ...                 // "model.safetensors" holds a safetensors header
 *   case LP_FILE_FOLDER: ...                      // look inside
 *   case LP_FILE_UNKNOWN: ...                     // neither the bytes nor the name say
 *   }
 *
 * A file whose bytes match no format gets the kind its name gives (".safetensors", ".gguf",
 * ".bin", ".json", ".yaml", ".npy"), so that a damaged file reaches the reader of the format it
 * claims to be, whose error says what is wrong with it. JSON is told apart by name only:
 * *.safetensors.index.json, *tokenizer.json, else a config.
 */
#ifndef LP_INSPECT_DETECT_H
#define LP_INSPECT_DETECT_H

typedef enum lp_file_kind {
    LP_FILE_UNKNOWN,
    LP_FILE_FOLDER,
    LP_FILE_SAFETENSORS,
    LP_FILE_SAFETENSORS_INDEX, /* model.safetensors.index.json of a sharded checkpoint */
    LP_FILE_GGUF,
    LP_FILE_LLAMA2C,           /* a llama2.c checkpoint (any export version) */
    LP_FILE_LLAMA2C_TOKENIZER, /* a llama2.c tokenizer.bin */
    LP_FILE_TOKENIZER_JSON,    /* Hugging Face tokenizer.json */
    LP_FILE_CONFIG_JSON,       /* Hugging Face config.json */
    LP_FILE_YAML_CARD,         /* a model card (configs/README.md) */
    LP_FILE_NPY,
    LP_FILE_KIND_COUNT
} lp_file_kind;

/* Never fails: an unreadable or missing path is judged by its name alone. Reads the first bytes
 * (all of a file that may be a llama2.c tokenizer.bin, whose records must fill it). */
lp_file_kind lp_detect_format(const char *path);

/* "safetensors", "gguf", "llama2.c tokenizer", ... */
const char *lp_file_kind_name(lp_file_kind kind);

#endif
