/* `loupe synth OUT_DIR`: write the small model with planted heads (trace/synth/synth.h) and read it
 * back, so what it prints is what a later command will see. */
#include "trace/synth/synth.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/cli/cli.h"
#include "inspect/inspect.h"
#include "inspect/tokenizer/tokenizer.h"

#define CMD "synth"

typedef struct synth_opts {
    int64_t seed;
    int dtype; /* index into dtype_choices */
    int fault; /* an lp_synth_fault: fault_choices is in the enum's order */
    bool check;
    const char *like; /* a card or config: a random model of its family instead */
    int64_t layers;   /* with --like; 0 = 2 */
    int format;       /* with --like: index into format_choices */
} synth_opts;

static const char *const dtype_choices[] = {"f32", "bf16", "f16", NULL};
static const lp_dtype dtype_values[] = {LP_DTYPE_F32, LP_DTYPE_BF16, LP_DTYPE_F16};
static const char *const fault_choices[] = {"none", "prev-no-phase", "no-prev-write", NULL};
static const char *const format_choices[] = {"safetensors", "gguf", NULL};
enum { FORMAT_SAFETENSORS, FORMAT_GGUF };

static const lp_option synth_options[] = {
    LP_OPT_INT_OF(synth_opts, seed, "seed", "N", 0, 9007199254740992.0,
                  "token identities and noise heads (default 1); same seed, same bytes"),
    LP_OPT_ENUM_OF(synth_opts, dtype, "dtype", dtype_choices, "stored weights (default f32)"),
    LP_OPT_FLAG_OF(synth_opts, check, "check",
                   "then run the model on the demo prompt and show that each planted head\n"
                   "tops its statistic (exit 1 if one does not)"),
    LP_OPT_STRING_OF(synth_opts, like, "like", "CARD",
                     "instead: a small random-weight model of the family that CARD (a YAML card,\n"
                     "config.json or catalogue name) describes, with its rules and that family's\n"
                     "Hugging Face tensor names and config keys (config.json, model.safetensors)"),
    LP_OPT_INT_OF(synth_opts, layers, "layers", "N", 1, 64, "with --like: layers (default 2)"),
    LP_OPT_ENUM_OF(synth_opts, format, "format", format_choices,
                   "with --like: safetensors (default: config.json, model.safetensors) or gguf\n"
                   "(model.gguf as llama.cpp's converter writes the family: its architecture,\n"
                   "keys, tensor names and layouts, and a byte-level vocabulary)"),
    LP_OPT_ENUM_OF(synth_opts, fault, "fault", fault_choices,
                   "for tests: plant a head wrongly (prev-no-phase: the previous-token head\n"
                   "loses its phase and attends to itself; no-prev-write: it writes nothing,\n"
                   "so the induction head has nothing to match)"),
    LP_OPT_END_OF_TABLE,
};

LP_CLI_COMMAND(synth, run_synth, synth_options, 1, 1,
               "write a small model with planted attention heads",
               "OUT_DIR [--seed N] [--dtype f32|bf16|f16] [--check] [--like CARD [--layers N] "
               "[--format safetensors|gguf]]",
    .description =
        "Write a small Llama-style model whose attention heads are planted with known behaviours,\n"
        "so every command can be tried offline on a model with a known answer. OUT_DIR is created\n"
        "if missing; a folder that is neither empty nor an earlier synth output is refused.\n"
        "OUT_DIR gets config.json, model.safetensors, tokenizer.json and planted_heads.json.",
    .notes =
        "Planted heads: layer 0 head 1 previous token, head 3 sink (<s>), head 4 local window,\n"
        "head 6 uniform; layer 1 head 5 induction. All other heads are seeded noise.\n"
        "Exit status: 0 written (and found), 1 --check did not find a planted head, 2 bad usage or an\n"
        "output folder that is not ours.");

static int print_check(const char *out_dir)
{
    lp_synth_report rep;
    lp_error err = {0};
    if (lp_synth_check(out_dir, &rep, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    printf("check: the demo prompt (%" PRId64 " tokens, a sentence said twice) through the "
           "forward pass\n", rep.n_tokens);
    for (size_t i = 0; i < rep.n_findings; i++) {
        const lp_synth_finding *f = &rep.findings[i];
        char detail[160];
        int len = snprintf(detail, sizeof detail, "(");
        if (f->bar > 0)
            len += snprintf(detail + len, sizeof detail - (size_t)len, "bar %.1f; ", f->bar);
        if (f->runner_up_layer >= 0)
            len += snprintf(detail + len, sizeof detail - (size_t)len,
                            "next best %.3f, layer %d head %d", f->runner_up, f->runner_up_layer,
                            f->runner_up_head);
        else
            len += snprintf(detail + len, sizeof detail - (size_t)len, "no competitor");
        if (f->head.behaviour == LP_SYNTH_UNIFORM)
            snprintf(detail + len, sizeof detail - (size_t)len,
                     "; max_prob %.4f, mean 1/(t+1) %.4f", f->extra, f->extra_want);
        printf("  %s  layer %d head %d  %-15s %s = %.3f %s)\n", f->passed ? "PASS" : "FAIL",
               f->head.layer, f->head.head, lp_synth_behaviour_name(f->head.behaviour),
               f->statistic, f->value, detail);
    }
    printf("  %s  top-1 predictions in the second copy: %d/%d (words said once per copy: %d/%d)\n",
           rep.predictions_passed ? "PASS" : "FAIL", rep.n_correct, rep.n_predicted,
           rep.n_unambiguous_correct, rep.n_unambiguous);
    printf("  %s  mean loss against the next token %.3f nats < against the current token %.3f\n",
           rep.alignment_passed ? "PASS" : "FAIL", rep.loss_next, rep.loss_current);
    return rep.passed ? LP_EXIT_OK : LP_EXIT_CHECK_FAILED;
}

/* Read the folder back: the counts printed are the ones loupe's readers see. */
static int print_written(const char *out_dir, const lp_synth_options *opts)
{
    lp_error err = {0};
    lp_weights *w = NULL;
    lp_tokenizer *tok = NULL;
    if (lp_weights_open(out_dir, &w, &err) != LP_OK ||
        lp_tokenizer_open(out_dir, &tok, &err) != LP_OK) {
        lp_weights_close(w);
        return lp_cli_fail(CMD, &err);
    }
    uint64_t bytes = 0;
    int64_t params = 0;
    for (size_t i = 0; i < lp_weights_count(w); i++) {
        const lp_tensor *t = lp_weights_tensor(w, i);
        bytes += t->n_bytes;
        params += t->n_elements;
    }
    const lp_arch *a = lp_weights_arch(w);
    char pbuf[32], bbuf[32];
    static const char *const fault_names[] = {"", ", fault prev-no-phase", ", fault no-prev-write"};
    printf("wrote %s (seed %" PRIu64 ", %s%s)\n", out_dir, opts->seed, lp_dtype_name(opts->dtype),
           fault_names[opts->fault]);
    printf("  config.json         llama: hidden %" PRId64 ", %" PRId64 " layers, %" PRId64
           " heads x %" PRId64 ", rope_theta %.0f, tied embeddings\n",
           a ? a->hidden_size : 0, a ? a->n_layers : 0, a ? a->n_heads : 0, a ? a->head_dim : 0,
           a ? a->rope_theta : 0.0);
    printf("  model.safetensors   %zu tensors, %s parameters, %s\n", lp_weights_count(w),
           lp_format_int(params, pbuf, sizeof pbuf), lp_format_bytes(bytes, bbuf, sizeof bbuf));
    printf("  tokenizer.json      %" PRId64 " tokens (%s: whole words, byte fallback)\n",
           lp_tokenizer_vocab_size(tok), lp_tokenizer_kind(tok));
    lp_tokenizer_close(tok);
    lp_weights_close(w);
    return LP_EXIT_OK;
}

static void print_planted(void)
{
    size_t n;
    const lp_synth_head *heads = lp_synth_planted_heads(&n);
    printf("  planted_heads.json  %zu planted heads:\n", n);
    for (size_t i = 0; i < n; i++)
        printf("    layer %d head %d  %s\n", heads[i].layer, heads[i].head,
               lp_synth_behaviour_name(heads[i].behaviour));
}

/* --like CARD: the card's family, small, random weights. */
static int run_like(const char *out_dir, const synth_opts *o)
{
    lp_arch arch;
    lp_synth_spec spec;
    lp_error err = {0};
    if (o->check || o->fault != LP_SYNTH_FAULT_NONE) {
        lp_error_set(&err, LP_ERR_USAGE, "--like writes random weights: no --check or --fault");
        return lp_cli_fail(CMD, &err);
    }
    if (lp_arch_load(o->like, &arch, &err) != LP_OK ||
        lp_synth_spec_like(&arch, &spec, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    spec.seed = (uint64_t)o->seed;
    spec.dtype = dtype_values[o->dtype];
    if (o->layers > 0)
        spec.n_layers = o->layers;
    lp_status st = o->format == FORMAT_GGUF ? lp_synth_write_family_gguf(out_dir, &spec, &err)
                                            : lp_synth_write_family(out_dir, &spec, &err);
    if (st != LP_OK)
        return lp_cli_fail(CMD, &err);
    printf("wrote %s%s like %s: %s, %" PRId64 " layers, hidden %" PRId64 ", %" PRId64 " heads (%" PRId64
           " kv) x %" PRId64 ", vocab %" PRId64 ", seed %" PRIu64 ", %s\n",
           out_dir, o->format == FORMAT_GGUF ? "/model.gguf" : "", arch.name[0] ? arch.name : o->like, lp_synth_family_name(spec.family),
           spec.n_layers, spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.vocab,
           spec.seed, lp_dtype_name(spec.dtype));
    printf("try: loupe trace %s --tokens 1,5,9,13,5,9\n", out_dir);
    return LP_EXIT_OK;
}

static int run_synth(int argc, char **argv)
{
    synth_opts o = {1, 0, LP_SYNTH_FAULT_NONE, false, NULL, 0, FORMAT_SAFETENSORS};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&synth_spec, argc, argv, &o, pos, NULL);
    const char *out_dir = pos[0];
    if (o.like)
        return run_like(out_dir, &o);
    if (o.format != FORMAT_SAFETENSORS) {
        lp_error err = {0};
        lp_error_set(&err, LP_ERR_USAGE, "--format is for --like models; the planted model is "
                                         "safetensors");
        return lp_cli_fail(CMD, &err);
    }
    lp_synth_options opts;
    lp_synth_options_init(&opts);
    opts.seed = (uint64_t)o.seed;
    opts.dtype = dtype_values[o.dtype];
    opts.fault = (lp_synth_fault)o.fault;
    lp_error err = {0};
    if (lp_synth_write(out_dir, &opts, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    int status = print_written(out_dir, &opts);
    if (status != LP_EXIT_OK)
        return status;
    print_planted();
    if (o.check)
        return print_check(out_dir);
    printf("try: loupe trace %s --prompt \"%s\"\n", out_dir, LP_SYNTH_DEMO_PROMPT);
    return LP_EXIT_OK;
}
