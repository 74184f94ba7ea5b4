/* The output folder of a synthetic model: created with its parents, refused when it is someone
 * else's, and filled all at once (temporary names, renamed when every file is written). */
#define _POSIX_C_SOURCE 200809L /* mkdir, getpid, opendir */
#include "trace/synth/synth_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mapfile.h"

/* Temporary files carry this tag, so an interrupted run's leftovers can be told apart. */
#define TEMP_TAG ".synth-tmp."

static lp_status make_dirs(const char *path, lp_error *err)
{
    size_t len = strlen(path);
    char *buf = malloc(len + 1);
    if (!buf)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            lp_status st = lp_error_set(err, LP_ERR_IO, "%s: cannot create folder: %s", buf,
                                        strerror(errno));
            free(buf);
            return st;
        }
        buf[i] = saved;
    }
    free(buf);
    if (!lp_path_is_dir(path))
        return lp_error_set(err, LP_ERR_USAGE, "%s: exists and is not a folder", path);
    return LP_OK;
}

/* True when the folder holds nothing but our temporary files. */
static lp_status folder_is_empty(const char *dir, bool *empty, lp_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    *empty = true;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        /* Temporary files of an interrupted run of ours do not make the folder someone else's. */
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            strstr(e->d_name, TEMP_TAG) == NULL) {
            *empty = false;
            break;
        }
    closedir(d);
    return LP_OK;
}

/* The "generator" of dir/planted_heads.json, or false when there is none we can read. */
static bool marker_names(const char *dir, const char *generator)
{
    char *marker = lp_path_join(dir, "planted_heads.json");
    if (!marker)
        return false;
    /* A marker we wrote is about 1.5 KiB; anything far larger is not ours (and is not read). */
    char *text = NULL;
    size_t size = 0;
    lp_error ignored = {0};
    json_t *root = NULL;
    if (lp_path_exists(marker) && lp_read_file(marker, 1u << 20, &text, &size, &ignored) == LP_OK)
        root = json_loadb(text, size, 0, NULL);
    free(text);
    free(marker);
    const char *gen = json_string_value(json_object_get(root, "generator"));
    bool ours = gen && strcmp(gen, generator) == 0;
    json_decref(root);
    return ours;
}

lp_status lp_synth_check_out_dir(const char *dir, const char *generator, lp_error *err)
{
    bool empty = false;
    lp_status st = folder_is_empty(dir, &empty, err);
    if (st != LP_OK || empty)
        return st;
    if (!marker_names(dir, generator))
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: folder is not empty and is no earlier synth output (no "
                            "planted_heads.json from \"%s\"): refusing to overwrite it",
                            dir, generator);
    return LP_OK;
}

static char *temp_name(const char *dir, const char *name)
{
    char tmp[256];
    snprintf(tmp, sizeof tmp, ".%s" TEMP_TAG "%ld", name, (long)getpid());
    return lp_path_join(dir, tmp);
}

static lp_status write_file(const lp_synth_file *f, const char *path, lp_error *err)
{
    if (f->tensors)
        return lp_st_writer_write(f->tensors, path, err);
    if (f->gguf)
        return lp_gguf_writer_write(f->gguf, path, err);
    if (json_dump_file(f->json, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", path,
                            errno ? strerror(errno) : "jansson failed");
    return LP_OK;
}

/* Write every file under its temporary name, then rename them all into place. */
static lp_status write_and_rename(const lp_synth_file *files, size_t n, char **tmp, char **final,
                                  lp_error *err)
{
    lp_status st;
    for (size_t i = 0; i < n; i++)
        if ((st = write_file(&files[i], tmp[i], err)) != LP_OK)
            return st;
    for (size_t i = 0; i < n; i++)
        if (rename(tmp[i], final[i]) != 0)
            return lp_error_set(err, LP_ERR_IO, "%s: cannot rename into place: %s", final[i],
                                strerror(errno));
    return LP_OK;
}

lp_status lp_synth_commit(const char *out_dir, const lp_synth_file *files, size_t n_files,
                          lp_error *err)
{
    lp_status st = make_dirs(out_dir, err);
    if (st != LP_OK)
        return st;
    char **tmp = calloc(n_files ? n_files : 1, sizeof *tmp);
    char **final = calloc(n_files ? n_files : 1, sizeof *final);
    if (!tmp || !final)
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LP_OK && i < n_files; i++) {
        tmp[i] = temp_name(out_dir, files[i].name);
        final[i] = lp_path_join(out_dir, files[i].name);
        if (!tmp[i] || !final[i])
            st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    if (st == LP_OK)
        st = write_and_rename(files, n_files, tmp, final, err);
    for (size_t i = 0; tmp && final && i < n_files; i++) {
        if (tmp[i])
            remove(tmp[i]); /* no-op once renamed */
        free(tmp[i]);
        free(final[i]);
    }
    free(tmp);
    free(final);
    return st;
}
