/* Config audits (warnings) and the RoPE long-context report. */
#include "estimate/estimate.h"

#include <math.h>
#include <string.h>

#include "estimate/estimate_internal.h"

static const double TWO_PI = 6.283185307179586;

/* Local names so this file does not depend on inspect's string tables. */
const char *lp_est_scaling_name(lp_rope_scaling_kind kind)
{
    static const char *const names[LP_ROPE_SCALING_KIND_COUNT] = {
        "none", "linear", "dynamic", "llama3", "yarn", "longrope",
    };
    return (unsigned)kind < LP_ROPE_SCALING_KIND_COUNT ? names[kind] : "unknown";
}

/* ---- RoPE -------------------------------------------------------------------------------- */

static int64_t rope_dim_of(const lp_arch *arch)
{
    if (arch->mla)
        return arch->qk_rope_head_dim;
    if (arch->rope_dim > 0)
        return arch->rope_dim;
    double partial = arch->partial_rotary > 0 ? arch->partial_rotary : 1.0;
    double d = (double)lp_est_head_dim(arch) * partial;
    return (int64_t)d;
}

/* YaRN's boundary: the dimension index whose frequency turns num_rotations times over ctx. */
static double yarn_correction_dim(double num_rotations, double dim, double base, double ctx)
{
    return dim * log(ctx / (num_rotations * TWO_PI)) / (2.0 * log(base));
}

void lp_est_rope_report(const lp_arch *arch, lp_est_rope *rope)
{
    memset(rope, 0, sizeof *rope);
    int64_t dim = rope_dim_of(arch);
    /* 2^16 pairs is 64x any real head; beyond it the report is skipped, not truncated */
    if (arch->pos_kind != LP_POS_ROPE || dim < 2 || dim / 2 > ((int64_t)1 << 16) ||
        arch->rope_theta <= 1.0)
        return;
    const lp_rope_scaling *sc = &arch->rope_scaling;
    double factor = sc->factor > 0 ? sc->factor : 1.0;
    bool scaled = sc->kind != LP_ROPE_SCALING_NONE;
    rope->present = true;
    rope->rope_dim = dim;
    rope->n_pairs = dim / 2;
    rope->n_stored = dim / 2 < LP_EST_MAX_ROPE_PAIRS ? dim / 2 : LP_EST_MAX_ROPE_PAIRS;
    rope->theta = arch->rope_theta;
    /* The context before scaling: original_max_position_embeddings when given; for linear
     * scaling without it, max_position_embeddings is taken as the scaled target (Gemma 3);
     * dynamic NTK and YaRN treat max_position_embeddings as the original, as transformers does. */
    if (scaled && sc->original_ctx > 0)
        rope->trained_ctx = sc->original_ctx;
    else if (sc->kind == LP_ROPE_SCALING_LINEAR && factor > 1.0)
        rope->trained_ctx = (int64_t)((double)arch->n_ctx / factor);
    else
        rope->trained_ctx = arch->n_ctx;
    double extended = (double)rope->trained_ctx * (scaled ? factor : 1.0);
    rope->target_ctx = (double)arch->n_ctx > extended ? arch->n_ctx : (int64_t)extended;
    rope->scaling_modelled = sc->kind != LP_ROPE_SCALING_LONGROPE;

    double d = (double)dim, base = arch->rope_theta, trained = (double)rope->trained_ctx;
    /* dynamic NTK raises the base for the sequence length it runs at: here the target */
    double dynamic_base = base;
    if (sc->kind == LP_ROPE_SCALING_DYNAMIC && trained > 0 && d > 2)
        dynamic_base = base * pow(factor * (double)rope->target_ctx / trained - (factor - 1.0),
                                  d / (d - 2.0));
    double yarn_low = 0, yarn_high = 0;
    if (sc->kind == LP_ROPE_SCALING_YARN && trained > 0) {
        double fast = sc->beta_fast > 0 ? sc->beta_fast : 32.0;
        double slow = sc->beta_slow > 0 ? sc->beta_slow : 1.0;
        yarn_low = floor(yarn_correction_dim(fast, d, base, trained));
        yarn_high = ceil(yarn_correction_dim(slow, d, base, trained));
        if (yarn_low < 0)
            yarn_low = 0;
        if (yarn_high > d - 1)
            yarn_high = d - 1;
        if (yarn_high == yarn_low)
            yarn_high += 0.001;
    }
    for (int64_t i = 0; i < rope->n_pairs; i++) {
        double inv = pow(base, -2.0 * (double)i / d);
        double wavelength = TWO_PI / inv;
        double scaled_inv = inv;
        switch (sc->kind) {
        case LP_ROPE_SCALING_LINEAR:
            scaled_inv = inv / factor;
            break;
        case LP_ROPE_SCALING_DYNAMIC:
            scaled_inv = pow(dynamic_base, -2.0 * (double)i / d);
            break;
        case LP_ROPE_SCALING_LLAMA3: {
            double low_ff = sc->low_freq_factor > 0 ? sc->low_freq_factor : 1.0;
            double high_ff = sc->high_freq_factor > 0 ? sc->high_freq_factor : 4.0;
            double low_wavelen = trained / low_ff, high_wavelen = trained / high_ff;
            if (wavelength > low_wavelen) {
                scaled_inv = inv / factor;
            } else if (wavelength >= high_wavelen && high_ff != low_ff) {
                double smooth = (trained / wavelength - low_ff) / (high_ff - low_ff);
                scaled_inv = (1.0 - smooth) * inv / factor + smooth * inv;
            }
            break;
        }
        case LP_ROPE_SCALING_YARN: {
            double ramp = ((double)i - yarn_low) / (yarn_high - yarn_low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extrapolate = 1.0 - ramp; /* high frequencies keep their speed */
            scaled_inv = inv / factor * (1.0 - extrapolate) + inv * extrapolate;
            break;
        }
        default:
            break;
        }
        double scaled_wavelength = TWO_PI / scaled_inv;
        if (i < rope->n_stored) {
            rope->freqs[i].wavelength = wavelength;
            rope->freqs[i].scaled_wavelength = scaled_wavelength;
        }
        if (wavelength > trained)
            rope->pairs_no_rotation++;
        if (scaled_wavelength > (double)rope->target_ctx)
            rope->pairs_no_rotation_scaled++;
        if (fabs(scaled_wavelength - wavelength) > 1e-3 * wavelength)
            rope->pairs_changed++;
    }
}

/* ---- audit ------------------------------------------------------------------------------- */

static void audit_rope_scaling(const lp_arch *arch, lp_est_report *rep)
{
    const lp_rope_scaling *sc = &arch->rope_scaling;
    if (sc->kind == LP_ROPE_SCALING_NONE)
        return;
    const char *kind = lp_est_scaling_name(sc->kind);
    if (sc->factor <= 1.0 && sc->kind != LP_ROPE_SCALING_LONGROPE) {
        lp_est_warn(rep, "rope_scaling_inconsistent",
                    "rope_scaling %s factor %g does not extend the context (factor <= 1)", kind,
                    sc->factor);
        return;
    }
    if (sc->original_ctx <= 0 || arch->n_ctx <= 0)
        return;
    double claimed = (double)sc->original_ctx * sc->factor;
    if (sc->kind == LP_ROPE_SCALING_LLAMA3) {
        /* llama3 scales only the low frequencies, so n_ctx need not equal factor x original
         * (Llama 3.1: 8 x 8192 vs 131072); only a context that is not extended is suspicious */
        if (arch->n_ctx <= sc->original_ctx)
            lp_est_warn(rep, "rope_scaling_inconsistent",
                        "rope_scaling llama3 factor %g with original context %lld, but "
                        "max_position_embeddings %lld is not larger",
                        sc->factor, (long long)sc->original_ctx, (long long)arch->n_ctx);
        return;
    }
    if (fabs(claimed - (double)arch->n_ctx) > 0.01 * claimed)
        lp_est_warn(rep, "rope_scaling_inconsistent",
                    "rope_scaling %s factor %g x original context %lld = %.0f tokens, but "
                    "max_position_embeddings is %lld",
                    kind, sc->factor, (long long)sc->original_ctx, claimed, (long long)arch->n_ctx);
}

/* Heads: kv heads that do not divide the query heads, head_dim x heads != hidden. */
static void audit_heads(const lp_arch *arch, lp_est_report *rep)
{
    if (arch->mla)
        return;
    int64_t reported = -1;
    for (int64_t l = 0; l < arch->n_layers; l++) {
        int64_t kv = lp_est_layer_kv_heads(arch, l);
        if (kv > 0 && arch->n_heads % kv != 0 && kv != reported) {
            lp_est_warn(rep, "kv_heads_not_dividing",
                        "layer %lld: %lld kv heads do not divide %lld query heads (GQA needs "
                        "each kv head shared by a whole number of query heads)",
                        (long long)l, (long long)kv, (long long)arch->n_heads);
            reported = kv;
        }
    }
    int64_t head_dim = lp_est_head_dim(arch);
    if (head_dim * arch->n_heads != arch->hidden_size)
        lp_est_warn(rep, "head_dim_times_heads_not_hidden",
                    "head_dim %lld x %lld heads = %lld != hidden_size %lld: %s",
                    (long long)head_dim, (long long)arch->n_heads,
                    (long long)(head_dim * arch->n_heads), (long long)arch->hidden_size,
                    arch->head_dim_explicit
                        ? "legitimate when the config sets head_dim (Gemma, Qwen3); q and o "
                          "are sized heads x head_dim, not hidden"
                        : "head_dim was derived, so the config is inconsistent");
}

void lp_est_audit(const lp_arch *arch, const lp_est_options *opts, lp_est_report *rep)
{
    if (arch->assumed_family[0])
        lp_est_warn(rep, "unknown_model_type",
                    "model_type '%s' is not one loupe knows: counted with %s's rules (SwiGLU, "
                    "RMSNorm, no biases, untied, RoPE), which its modeling code may not follow; "
                    "--strict refuses",
                    arch->family, arch->assumed_family);
    audit_heads(arch, rep);
    if (arch->vocab_size % 64 != 0)
        lp_est_warn(rep, "vocab_not_multiple_of_64",
                    "vocab_size %lld is not a multiple of 64 (%lld would be): GEMM tiles and "
                    "tensor-parallel shards of the embedding and lm_head are ragged",
                    (long long)arch->vocab_size, (long long)((arch->vocab_size + 63) / 64 * 64));
    if (arch->n_experts > 0 && arch->n_experts_per_tok > arch->n_experts)
        lp_est_warn(rep, "experts_per_token_exceeds_experts",
                    "num_experts_per_tok %lld > %lld experts", (long long)arch->n_experts_per_tok,
                    (long long)arch->n_experts);
    audit_rope_scaling(arch, rep);

    int64_t widest = arch->sliding_window;
    for (int64_t l = 0; l < arch->n_layers; l++)
        if (lp_est_layer_window(arch, l) > widest)
            widest = lp_est_layer_window(arch, l);
    if (widest > 0 && arch->n_ctx > 0 && widest > arch->n_ctx)
        lp_est_warn(rep, "sliding_window_exceeds_context",
                    "sliding window %lld > context %lld: the window never limits attention or the "
                    "KV cache",
                    (long long)widest, (long long)arch->n_ctx);

    if (arch->tied_embeddings && opts->lm_head_tensor_present == 1)
        lp_est_warn(rep, "tied_but_lm_head_present",
                    "tie_word_embeddings is set but the weights contain a separate lm_head/output "
                    "tensor: the tied count (%lld) omits %lld stored parameters",
                    (long long)rep->params.total,
                    (long long)(arch->vocab_size * lp_est_embed_dim(arch)));

    if (arch->n_ctx > 0 && rep->seq > arch->n_ctx)
        lp_est_warn(rep, "seq_exceeds_context",
                    "--seq %lld exceeds the trained context %lld (max_position_embeddings)",
                    (long long)rep->seq, (long long)arch->n_ctx);
    if (arch->pos_kind == LP_POS_ROPE && rope_dim_of(arch) / 2 > ((int64_t)1 << 16))
        lp_est_warn(rep, "rope_report_skipped",
                    "rope_dim %lld: more than 2^16 rotary pairs, RoPE report skipped",
                    (long long)rope_dim_of(arch));
    if (rep->rope.present && !rep->rope.scaling_modelled)
        lp_est_warn(rep, "rope_scaling_not_modelled",
                    "rope_scaling %s uses per-dimension factors that the RoPE report does not "
                    "model",
                    lp_est_scaling_name(arch->rope_scaling.kind));
}
