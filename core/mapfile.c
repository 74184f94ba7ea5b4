/* mmap wrappers and small file helpers. */
#define _POSIX_C_SOURCE 200809L
#include "core/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

lp_status lp_map_file(const char *path, lp_mapped_file *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return lp_error_set(err, errno == ENOENT ? LP_ERR_NOT_FOUND : LP_ERR_IO, "%s: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        return lp_error_set(err, LP_ERR_IO, "%s: %s", path, strerror(saved));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return lp_error_set(err, LP_ERR_IO, "%s: is a directory", path);
    }
    out->path = strdup(path);
    if (!out->path) {
        close(fd);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    }
    out->size = (size_t)st.st_size;
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int saved = errno;
            close(fd);
            free(out->path);
            memset(out, 0, sizeof *out);
            return lp_error_set(err, LP_ERR_IO, "%s: mmap: %s", path, strerror(saved));
        }
        out->data = p;
    }
    close(fd);
    return LP_OK;
}

void lp_unmap_file(lp_mapped_file *map)
{
    if (!map)
        return;
    if (map->data)
        munmap((void *)map->data, map->size);
    free(map->path);
    memset(map, 0, sizeof *map);
}

lp_status lp_read_file(const char *path, size_t max_bytes, char **out, size_t *out_size,
                       lp_error *err)
{
    *out = NULL;
    if (out_size)
        *out_size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lp_error_set(err, errno == ENOENT ? LP_ERR_NOT_FOUND : LP_ERR_IO, "%s: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return lp_error_set(err, LP_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return lp_error_set(err, LP_ERR_RANGE, "%s: %lld bytes exceeds the limit of %zu bytes", path,
                            (long long)st.st_size, max_bytes);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
    }
    size_t got = fread(buf, 1, size, f);
    int failed = ferror(f);
    fclose(f);
    if (failed || got != size) {
        free(buf);
        return lp_error_set(err, LP_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, size);
    }
    buf[size] = '\0';
    *out = buf;
    if (out_size)
        *out_size = size;
    return LP_OK;
}

lp_status lp_read_prompt_file(const char *path, char **text, size_t *len, lp_error *err)
{
    size_t size;
    lp_status st = lp_read_file(path, LP_PROMPT_FILE_MAX, text, &size, err);
    if (st != LP_OK)
        return st;
    char *buf = *text;
    if (size > 0 && buf[size - 1] == '\n')
        buf[--size] = '\0';
    if (size > 0 && buf[size - 1] == '\r')
        buf[--size] = '\0';
    size_t text_len = strlen(buf);
    if (text_len != size) {
        free(buf);
        *text = NULL;
        return lp_error_set(err, LP_ERR_FORMAT, "%s: NUL byte at offset %zu (expected text)", path,
                            text_len);
    }
    if (len)
        *len = size;
    return LP_OK;
}

const char *lp_path_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int lp_path_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int lp_path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

char *lp_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *joined = malloc(a + b + 2);
    if (!joined)
        return NULL;
    memcpy(joined, dir, a);
    size_t pos = a;
    if (a > 0 && dir[a - 1] != '/')
        joined[pos++] = '/';
    memcpy(joined + pos, name, b + 1);
    return joined;
}
