/* One scratch file for fuzz targets whose readers take a path: $LOUPE_TEST_TMP (or /tmp)
 * /PROG.XXXXXX/NAME, made on first use and removed at exit together with NAME-wal and NAME-shm
 * (what SQLite may leave beside a database).
 *
 *   const char *path = lp_fuzz_scratch_path("fuzz_llama2c", "model.bin");
 *   ... write the input there, read it ...
 *   lp_fuzz_scratch_clear();   // the file and its -wal/-shm, the folder stays for the next input
 */
#ifndef LP_TESTS_FUZZ_SCRATCH_H
#define LP_TESTS_FUZZ_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char lp_fuzz_scratch_dir[4096];
static char lp_fuzz_scratch_file[4096 + 256];

static void lp_fuzz_scratch_clear(void)
{
    char side[sizeof lp_fuzz_scratch_file + 8];
    snprintf(side, sizeof side, "%s-wal", lp_fuzz_scratch_file);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", lp_fuzz_scratch_file);
    unlink(side);
    unlink(lp_fuzz_scratch_file);
}

static void lp_fuzz_scratch_remove(void)
{
    lp_fuzz_scratch_clear();
    rmdir(lp_fuzz_scratch_dir);
}

static const char *lp_fuzz_scratch_path(const char *prog, const char *name)
{
    if (lp_fuzz_scratch_file[0])
        return lp_fuzz_scratch_file;
    const char *tmp = getenv("LOUPE_TEST_TMP");
    snprintf(lp_fuzz_scratch_dir, sizeof lp_fuzz_scratch_dir, "%s/%s.XXXXXX",
             tmp && *tmp ? tmp : "/tmp", prog);
    if (mkdtemp(lp_fuzz_scratch_dir) == NULL) {
        fprintf(stderr, "%s: cannot make a scratch folder\n", prog);
        abort(); /* the harness cannot run, not a finding */
    }
    snprintf(lp_fuzz_scratch_file, sizeof lp_fuzz_scratch_file, "%s/%s", lp_fuzz_scratch_dir,
             name);
    atexit(lp_fuzz_scratch_remove);
    return lp_fuzz_scratch_file;
}

#endif
