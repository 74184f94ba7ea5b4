/* Read-only memory maps of model files: tensor data is never read unless touched.
 *
 *   lp_mapped_file map;
 *   if (lp_map_file(path, &map, &err) != LP_OK) return err.code;
 *   ... map.data[0 .. map.size) ...   // borrowed: valid until lp_unmap_file()
 *   lp_unmap_file(&map);
 */
#ifndef LP_CORE_MAPFILE_H
#define LP_CORE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct lp_mapped_file {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    char *path;          /* owned copy, for error messages */
} lp_mapped_file;

lp_status lp_map_file(const char *path, lp_mapped_file *out, lp_error *err);
void lp_unmap_file(lp_mapped_file *map);

/* Read a whole (small) file into a NUL-terminated heap buffer; caller frees. Refuses files
 * larger than max_bytes with LP_ERR_RANGE. */
lp_status lp_read_file(const char *path, size_t max_bytes, char **out, size_t *out_size,
                       lp_error *err);

/* The text of a --prompt-file: at most LP_PROMPT_FILE_MAX bytes, one final line break ("\n" or
 * "\r\n") dropped (it belongs to the file, not the prompt), a NUL byte refused with its offset.
 * *text is malloc'd and NUL-terminated; caller frees. Every command that takes --prompt-file reads
 * it this way, so the same file gives the same tokens everywhere. */
#define LP_PROMPT_FILE_MAX ((size_t)16 << 20)
lp_status lp_read_prompt_file(const char *path, char **text, size_t *len, lp_error *err);

/* The last path component, for messages ("model.safetensors" from "/x/y/model.safetensors"). */
const char *lp_path_basename(const char *path);
int lp_path_is_dir(const char *path);
int lp_path_exists(const char *path);
/* Join dir and name into a new heap string; NULL on allocation failure. */
char *lp_path_join(const char *dir, const char *name);

#endif
