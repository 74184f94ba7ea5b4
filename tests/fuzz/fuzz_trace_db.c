/* Fuzz entry point for the trace database reader (trace/store/read*.c, db.c): the input is a
 * SQLite file, written to one scratch path and read as `loupe render` and `loupe export` read it:
 * the latest complete run and runs 1-3, their tokens, token ids, head statistics, every stored
 * map (each row read as floats and as raw bytes), predictions, full logits, leak checks and the
 * runs row as text.
 *
 * Beyond "no crash": a refusal carries a one-line message; a run that reads has n_layers and
 * n_heads in [1, 65536]; a map that opens has 1 <= n_q <= n_k and its rows read within the shape.
 * Seeds are real databases `loupe trace` wrote (the .sqlite files in tests/fuzz/trace_db/, since
 * git ignores .db), so mutations start inside SQLite's format; the reader must survive whatever
 * SQLite accepts.
 *
 * With LOUPE_FUZZ=ON (clang):  build-fuzz/tests/fuzz/fuzz_trace_db_libfuzzer tests/fuzz/trace_db
 * Replay (every build):        build/tests/fuzz/fuzz_trace_db tests/fuzz/trace_db tests/fuzz/trace_db/regress
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/store/store.h"

#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_trace_db: broken invariant: %s\n", what);
        abort();
    }
}

static void check_error(lp_status st, const lp_error *err)
{
    if (st == LP_OK)
        return;
    require(err->msg[0] != '\0', "a refusal carries a message");
    require(strchr(err->msg, '\n') == NULL, "the message is one line");
}

#define MAX_MAPS 64 /* (layer, head) pairs tried per run */
#define MAX_ROWS 8  /* rows read per map */

static void read_maps(lp_store *s, const lp_store_run *run)
{
    int tried = 0;
    for (int64_t l = 0; l < run->n_layers && tried < MAX_MAPS; l++)
        for (int64_t h = 0; h < run->n_heads && tried < MAX_MAPS; h++, tried++) {
            lp_store_map *m = NULL;
            lp_error err = {0};
            lp_status st = lp_store_map_open(s, run, l, h, &m, &err);
            check_error(st, &err);
            if (st != LP_OK)
                continue;
            int64_t n_q, n_k;
            lp_store_map_shape(m, &n_q, &n_k);
            require(n_q >= 1 && n_q <= n_k, "a map that opens has 1 <= n_q <= n_k");
            int elem = lp_store_map_elem_size(m);
            require(elem == 2 || elem == 4, "maps are f16 or f32");
            if (n_k <= 4096) {
                float *row = malloc((size_t)n_k * sizeof *row);
                unsigned char *raw = malloc((size_t)n_k * (size_t)elem);
                for (int64_t r = 0; row && raw && r < n_q && r < MAX_ROWS; r++) {
                    check_error(lp_store_map_read(m, r, 0, n_k, row, &err), &err);
                    check_error(lp_store_map_read_raw(m, r, raw, &err), &err);
                }
                free(row);
                free(raw);
            }
            lp_store_map_close(m);
        }
}

static void read_run(lp_store *s, int64_t run_id)
{
    lp_store_run run;
    bool incomplete = false;
    lp_error err = {0};
    lp_status st = lp_store_read_run(s, run_id, NULL, &run, &incomplete, &err);
    check_error(st, &err);
    if (st != LP_OK)
        return;
    require(run.n_layers >= 1 && run.n_layers <= 65536 && run.n_heads >= 1 &&
                run.n_heads <= 65536,
            "a run that reads has sane layer and head counts");
    char **texts = NULL;
    int64_t n = 0;
    if ((st = lp_store_read_tokens(s, run.id, &texts, &n, &err)) == LP_OK)
        lp_store_free_texts(texts, n);
    check_error(st, &err);
    int32_t *ids = NULL;
    if ((st = lp_store_read_token_ids(s, run.id, &ids, &n, &err)) == LP_OK)
        free(ids);
    check_error(st, &err);
    for (int k = 0; k < LP_STAT_COUNT; k++) {
        double *values = NULL;
        if ((st = lp_store_read_head_stat(s, &run, (lp_head_stat)k, &values, &err)) == LP_OK)
            free(values);
        check_error(st, &err);
    }
    read_maps(s, &run);
    lp_store_predictions p;
    if ((st = lp_store_read_predictions(s, &run, &p, &err)) == LP_OK)
        lp_store_predictions_clear(&p);
    check_error(st, &err);
    int64_t rows, vocab;
    if ((st = lp_store_logits_shape(s, &run, &rows, &vocab, &err)) == LP_OK && vocab > 0 &&
        vocab <= 1 << 20 && run.n_tokens > 0) {
        float *logits = malloc((size_t)vocab * sizeof *logits);
        if (logits)
            check_error(lp_store_read_logits(s, &run, 0, vocab, logits, &err), &err);
        free(logits);
    }
    lp_leak_check *checks = NULL;
    if ((st = lp_store_read_leak_checks(s, run.id, &checks, &n, &err)) == LP_OK)
        free(checks);
    char **keys = NULL, **values = NULL;
    if ((st = lp_store_read_run_fields(s, run.id, &keys, &values, &n, &err)) == LP_OK) {
        lp_store_free_texts(keys, n);
        lp_store_free_texts(values, n);
    }
    check_error(st, &err);
    int64_t first;
    check_error(lp_store_read_first_generated(s, run.id, &first, &err), &err);
    lp_store_run_clear(&run);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = lp_fuzz_scratch_path("fuzz_trace_db", "runs.db");
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror("fuzz_trace_db: scratch file");
        abort();
    }
    lp_store *s = NULL;
    lp_error err = {0};
    lp_status st = lp_store_open_read(path, &s, &err);
    check_error(st, &err);
    if (st == LP_OK) {
        for (int64_t id = 0; id <= 3; id++)
            read_run(s, id);
        int64_t leak_run;
        check_error(lp_store_latest_leak_run(s, &leak_run, &err), &err);
        lp_store_close(s);
    }
    lp_fuzz_scratch_clear();
    return 0;
}

#include "fuzz_replay.h"
LP_FUZZ_REPLAY_MAIN("fuzz_trace_db")
