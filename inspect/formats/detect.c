/* lp_detect_format: a file's kind by its first bytes, then by its name. */
#include "inspect/formats/detect.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "core/mapfile.h"
#include "core/names.h"
#include "core/text.h"
#include "inspect/formats/formats_internal.h"

#define LLAMA2C_MAGIC 0x616b3432u
#define SAFETENSORS_MAX_HEADER 100000000ull

static const lp_name_entry file_kind_names[] = {
    {LP_FILE_UNKNOWN, "unknown"},
    {LP_FILE_FOLDER, "folder"},
    {LP_FILE_SAFETENSORS, "safetensors"},
    {LP_FILE_SAFETENSORS_INDEX, "safetensors index"},
    {LP_FILE_GGUF, "gguf"},
    {LP_FILE_LLAMA2C, "llama2.c checkpoint"},
    {LP_FILE_LLAMA2C_TOKENIZER, "llama2.c tokenizer"},
    {LP_FILE_TOKENIZER_JSON, "tokenizer.json"},
    {LP_FILE_CONFIG_JSON, "config.json"},
    {LP_FILE_YAML_CARD, "yaml card"},
    {LP_FILE_NPY, "npy"},
};

LP_NAMES_DEFINE_WORD(lp_file_kind_name, lp_file_kind, file_kind_names, "unknown")

static bool is_json_text(const uint8_t *d, size_t size)
{
    size_t i = 0;
    while (i < size && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r'))
        i++;
    return i < size && d[i] == '{';
}

/* JSON is told apart by name: the index of a sharded checkpoint, a tokenizer, else a config. */
static lp_file_kind json_kind(const char *name)
{
    if (lp_ends_with(name, ".safetensors.index.json"))
        return LP_FILE_SAFETENSORS_INDEX;
    if (lp_ends_with(name, "tokenizer.json"))
        return LP_FILE_TOKENIZER_JSON;
    return LP_FILE_CONFIG_JSON;
}

static lp_file_kind kind_by_name(const char *name)
{
    static const lp_name_entry suffixes[] = {
        {LP_FILE_SAFETENSORS, ".safetensors"},
        {LP_FILE_GGUF, ".gguf"},
        {LP_FILE_LLAMA2C, ".bin"},
        {LP_FILE_YAML_CARD, ".yaml"},
        {LP_FILE_YAML_CARD, ".yml"},
        {LP_FILE_NPY, ".npy"},
    };
    if (lp_ends_with(name, ".json"))
        return json_kind(name);
    for (size_t i = 0; i < LP_NAMES_LEN(suffixes); i++)
        if (lp_ends_with(name, suffixes[i].name))
            return (lp_file_kind)suffixes[i].value;
    return LP_FILE_UNKNOWN;
}

/* The kind the bytes prove, or UNKNOWN. The llama2.c checks come after every format with a
 * magic number: a legacy checkpoint has none, so its header must fit the file exactly. */
static lp_file_kind kind_by_magic(const uint8_t *d, size_t size, const char *name)
{
    if (size >= 4 && memcmp(d, "GGUF", 4) == 0)
        return LP_FILE_GGUF;
    if (size >= 6 && memcmp(d, "\x93NUMPY", 6) == 0)
        return LP_FILE_NPY;
    if (size >= 4 && lp_load_u32(d) == LLAMA2C_MAGIC)
        return LP_FILE_LLAMA2C;
    if (size >= 9) {
        uint64_t header_len = lp_load_u64(d);
        if (header_len > 0 && header_len <= SAFETENSORS_MAX_HEADER && header_len <= size - 8 &&
            d[8] == '{')
            return LP_FILE_SAFETENSORS;
    }
    lp_llama2c_header header;
    if (lp_llama2c_read_header(d, size, name, &header, NULL) == LP_OK)
        return LP_FILE_LLAMA2C;
    if (lp_llama2c_is_tokenizer(d, size, NULL))
        return LP_FILE_LLAMA2C_TOKENIZER;
    return LP_FILE_UNKNOWN;
}

lp_file_kind lp_detect_format(const char *path)
{
    if (lp_path_is_dir(path))
        return LP_FILE_FOLDER;
    lp_mapped_file map;
    if (lp_map_file(path, &map, NULL) != LP_OK)
        return kind_by_name(path);
    lp_file_kind kind = kind_by_magic(map.data, map.size, lp_path_basename(path));
    if (kind == LP_FILE_UNKNOWN)
        kind = kind_by_name(path);
    /* JSON text has no magic: it decides only where the name does not ("config" with no suffix) */
    if (kind == LP_FILE_UNKNOWN && is_json_text(map.data, map.size))
        kind = json_kind(path);
    lp_unmap_file(&map);
    return kind;
}

