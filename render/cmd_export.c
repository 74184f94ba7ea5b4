/* `loupe export`: a run of a trace database as one safetensors or npz file for Python (the
 * tensors and their layout: render/export.c). */
#include <stdio.h>

#include "core/cli/cli.h"
#include "render/render.h"

static const char *const CMD = "export";

typedef struct export_opts {
    int64_t run;
    const char *output;
} export_opts;

static const lp_option export_options[] = {
    LP_OPT_INT_OF(export_opts, run, "run", "N", 1, (double)INT64_MAX,
                  "run id (default: the latest complete trace run, else the latest complete run)"),
    LP_OPT_STRING_OF(export_opts, output, "output", "FILE",
                     "the file to write: FILE.safetensors or FILE.npz"),
};

static const lp_cli_alias export_aliases[] = {{"o", "output"}, {NULL, NULL}};

LP_CLI_COMMAND(export, run_export, export_options, 1, 1,
               "write a traced run as safetensors or npz for Python",
               "DB [--run N] -o FILE.safetensors|FILE.npz",
    .description =
        "Write one run of a trace database as a file that safetensors, numpy.load and PyTorch\n"
        "read without loupe: the attention maps (one [layers, heads, n_q, n_k] tensor when every\n"
        "head was stored, else attention.layer_L.head_H), head_stats.NAME [layers, heads],\n"
        "tokens, predictions.token_id/prob/logit [tokens, k] and logits [tokens, vocab] when the\n"
        "run stored them. The runs row and the token texts are the metadata (safetensors'\n"
        "__metadata__; metadata.json inside the npz).",
    .notes = "Example: loupe export demo-out/trace.db -o run1.npz\n"
             "Exit status: 0 written, 2 bad usage or input (one line on stderr).",
    .aliases = export_aliases);

static int run_export(int argc, char **argv)
{
    export_opts o = {0};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&export_spec, argc, argv, &o, pos, NULL);
    if (!o.output)
        return lp_cli_usage_error(CMD, "no output: give -o FILE.safetensors or -o FILE.npz");
    if (lp_export_format_from_path(o.output) == LP_EXPORT_COUNT)
        return lp_cli_usage_error(CMD, "%s: unknown format (the extension must be .safetensors "
                                  "or .npz)", o.output);
    lp_error err = {0};
    lp_store *db;
    lp_store_run run;
    bool incomplete = false;
    if (lp_store_open_read(pos[0], &db, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    lp_status st = lp_store_read_run(db, o.run, "trace", &run, &incomplete, &err);
    if (st == LP_ERR_NOT_FOUND && o.run == 0) /* a database of leak runs only */
        st = lp_store_read_run(db, 0, NULL, &run, &incomplete, &err);
    if (st != LP_OK) {
        lp_store_close(db);
        return lp_cli_fail(CMD, &err);
    }
    if (incomplete)
        fprintf(stderr, "loupe export: warning: run %lld is '%s', not complete: writing what it "
                        "holds\n", (long long)run.id, run.status);
    lp_export_report rep;
    st = lp_render_export(db, &run, o.output, &rep, &err);
    int64_t run_id = run.id;
    lp_store_run_clear(&run);
    lp_store_close(db);
    if (st != LP_OK)
        return lp_cli_fail(CMD, &err);
    char size[32];
    printf("wrote %s: run %lld, %lld tensors%s, %s\n", o.output, (long long)run_id,
           (long long)rep.n_tensors, rep.attention_stacked ? " (attention as one tensor)" : "",
           lp_format_bytes(rep.bytes, size, sizeof size));
    return LP_EXIT_OK;
}
