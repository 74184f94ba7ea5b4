/* Tests of the synthetic models (trace/synth/synth.h). The planted model: it loads, its tokenizer
 * gives whole words, and the real forward pass finds every planted head where the generator says
 * it is; broken plantings (lp_synth_fault) must fail the same checks, so the checks can fail.
 * The family writer: a table of families, each read back with its names, roles and layout, and
 * the specs it must refuse. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "core/mapfile.h"
#include "inspect/inspect.h"
#include "inspect/tokenizer/tokenizer.h"
#include "trace/leak/leak.h"
#include "trace/synth/synth.h"
#include "trace/trace.h"

#define T_MAX 64
#define N_L LP_SYNTH_LAYERS
#define N_H LP_SYNTH_HEADS
#define LOCAL_WINDOW 8

/* A scratch folder per test under LOUPE_TEST_TMP; removed (our four files only) at the end. */
static void scratch_dir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/synth-%s-%ld", lp_test_tmp_dir(), name, (long)getpid());
}

static void remove_synth_dir(const char *dir)
{
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json",
                                        "planted_heads.json", "stray.txt"};
    char path[1024];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
}

static void write_model(const char *dir, lp_dtype dtype, lp_synth_fault fault, uint64_t seed)
{
    lp_synth_options opts;
    lp_synth_options_init(&opts);
    opts.dtype = dtype;
    opts.fault = fault;
    opts.seed = seed;
    lp_error err = {0};
    lp_status st = lp_synth_write(dir, &opts, &err);
    if (st != LP_OK)
        fail_msg("lp_synth_write(%s): %s", dir, err.msg);
}

/* write_model into a fresh scratch folder named after name; its path is left in dir. */
static void write_scratch_model(char *dir, size_t size, const char *name, lp_dtype dtype,
                                lp_synth_fault fault, uint64_t seed)
{
    scratch_dir(dir, size, name);
    write_model(dir, dtype, fault, seed);
}

static int find_planted(lp_synth_behaviour b, int *layer)
{
    size_t n;
    const lp_synth_head *heads = lp_synth_planted_heads(&n);
    for (size_t i = 0; i < n; i++)
        if (heads[i].behaviour == b) {
            *layer = heads[i].layer;
            return heads[i].head;
        }
    fail_msg("no planted head of behaviour %s", lp_synth_behaviour_name(b));
    *layer = 0;
    return 0;
}

/* ---- the forward pass, recorded by our own observer ---------------------------------------- */

typedef struct capture {
    int64_t n_tokens;
    int64_t vocab;
    float probs[N_L][N_H][T_MAX][T_MAX];
    float *logits; /* [n_tokens, vocab] */
} capture;

/* Maps that fit the fixed arrays (a model larger than the planted one is not recorded) and the
 * logits. */
static bool cap_want(void *ctx, const lp_site *site)
{
    const capture *c = ctx;
    if (site->kind == LP_SITE_LOGITS)
        return true;
    return site->kind == LP_SITE_ATTN_PROBS && site->layer < N_L && site->head < N_H &&
           c->n_tokens <= T_MAX;
}

static lp_status cap_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    (void)err;
    capture *c = ctx;
    if (site->kind == LP_SITE_ATTN_PROBS) {
        for (int64_t r = 0; r < view->rows; r++)
            for (int64_t k = 0; k < view->cols; k++)
                c->probs[site->layer][site->head][r][k] = view->data[r * view->stride + k];
    } else if (site->kind == LP_SITE_LOGITS) {
        for (int64_t r = 0; r < view->rows; r++)
            memcpy(c->logits + (view->row0 + r) * c->vocab, view->data + r * view->stride,
                   (size_t)c->vocab * sizeof(float));
    }
    return LP_OK;
}

/* What the checks measure, per head: means over query rows (prev_token over rows >= 1). */
typedef struct head_measure {
    double entropy, max_prob, uniform_max_prob, sink, prev, self, local_frac;
    double induction; /* second copy: mass on keys right after an earlier copy of the query */
} head_measure;

typedef struct measured {
    int32_t tokens[T_MAX];
    int64_t n_tokens;
    head_measure head[N_L][N_H];
    int n_second_copy;       /* query rows of the second copy that predict a next token */
    int n_correct;           /* of those, top-1 = the next token */
    int n_unique;            /* of those, rows whose token occurs once per copy */
    int n_unique_correct;
    /* loupe leak's alignment rule on the logits: against the prompt, and against labels
     * shifted by one (label[t] = token[t + 1]) */
    lp_leak_alignment_verdict alignment, alignment_shifted;
    double loss_next, loss_same, shifted_same;
} measured;

static void run_and_measure(const char *dir, measured *m)
{
    lp_error err = {0};
    lp_tokenizer *tok = NULL;
    lp_model *model = NULL;
    if (lp_tokenizer_open(dir, &tok, &err) != LP_OK)
        fail_msg("tokenizer %s: %s", dir, err.msg);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *prompt = LP_SYNTH_DEMO_PROMPT;
    assert_int_equal(lp_tokenizer_encode(tok, prompt, strlen(prompt), true, &ids, &n, &err),
                     LP_OK);
    assert_true(n <= T_MAX && n % 2 == 1); /* <s> + two equal copies */
    memset(m, 0, sizeof *m);
    memcpy(m->tokens, ids, n * sizeof *ids);
    m->n_tokens = (int64_t)n;
    free(ids);
    lp_tokenizer_close(tok);

    if (lp_model_open(dir, &model, &err) != LP_OK)
        fail_msg("model %s: %s", dir, err.msg);
    capture *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->n_tokens = m->n_tokens;
    c->vocab = lp_model_arch(model)->vocab_size;
    c->logits = calloc((size_t)(c->n_tokens * c->vocab), sizeof(float));
    assert_non_null(c->logits);
    lp_observer obs = {c, cap_want, cap_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    lp_batch batch = lp_batch_single(m->tokens, m->n_tokens);
    if (lp_forward(model, &batch, &opts, &err) != LP_OK)
        fail_msg("forward: %s", err.msg);

    const int64_t T = m->n_tokens, copy = (T - 1) / 2, second = 1 + copy;
    double shifted_next;
    m->alignment = lp_leak_alignment(c->logits, c->vocab, m->tokens, T, &m->loss_next,
                                     &m->loss_same);
    m->alignment_shifted = lp_leak_alignment(c->logits, c->vocab, m->tokens + 1, T - 1,
                                             &shifted_next, &m->shifted_same);
    for (int l = 0; l < N_L; l++)
        for (int h = 0; h < N_H; h++) {
            head_measure *hm = &m->head[l][h];
            int n_ind = 0;
            for (int64_t q = 0; q < T; q++) {
                const float *row = c->probs[l][h][q];
                double ent = 0, mx = 0, local = 0;
                for (int64_t k = 0; k <= q; k++) {
                    double p = (double)row[k];
                    if (p > 0)
                        ent -= p * log(p);
                    mx = p > mx ? p : mx;
                    if (q - k < LOCAL_WINDOW)
                        local += p;
                }
                hm->entropy += ent / (double)T;
                hm->max_prob += mx / (double)T;
                hm->uniform_max_prob += 1.0 / (double)(q + 1) / (double)T;
                hm->sink += (double)row[0] / (double)T;
                hm->self += (double)row[q] / (double)T;
                hm->local_frac += local / (double)T;
                if (q >= 1)
                    hm->prev += (double)row[q - 1] / (double)(T - 1);
                if (q >= second) {
                    double mass = 0;
                    for (int64_t k = 1; k <= q; k++)
                        if (m->tokens[k - 1] == m->tokens[q] && k - 1 < q)
                            mass += (double)row[k];
                    hm->induction += mass;
                    n_ind++;
                }
            }
            hm->induction /= n_ind;
        }
    /* Predictions in the second copy: row q predicts token q + 1 (top-1 by the trace's own
     * lp_top_k, not lp_synth_check's loop). */
    for (int64_t q = second; q + 1 < T; q++) {
        lp_prediction top;
        assert_int_equal(lp_top_k(c->logits + q * c->vocab, c->vocab, 1, &top), 1);
        int64_t best = top.token_id;
        int occurrences = 0;
        for (int64_t k = 1; k < second; k++)
            occurrences += m->tokens[k] == m->tokens[q];
        bool right = best == m->tokens[q + 1];
        m->n_second_copy++;
        m->n_correct += right;
        if (occurrences == 1) {
            m->n_unique++;
            m->n_unique_correct += right;
        }
    }
    free(c->logits);
    free(c);
    lp_model_close(model);
}

/* ---- the checks a correct planting passes ---------------------------------------------------- */

typedef struct verdict {
    bool prev, sink, uniform, local, induction, predictions;
} verdict;

static verdict judge(const measured *m, bool verbose)
{
    verdict v = {0};
    int lp = 0, ls = 0, lu = 0, ll = 0, li = 0;
    int hp = find_planted(LP_SYNTH_PREV_TOKEN, &lp), hs = find_planted(LP_SYNTH_SINK, &ls);
    int hu = find_planted(LP_SYNTH_UNIFORM, &lu), hl = find_planted(LP_SYNTH_LOCAL, &ll);
    int hi = find_planted(LP_SYNTH_INDUCTION, &li);
    double best_other_prev = 0, best_other_sink = 0, best_other_ent = 0, best_other_local = 0,
           best_other_ind = 0;
    for (int l = 0; l < N_L; l++)
        for (int h = 0; h < N_H; h++) {
            const head_measure *x = &m->head[l][h];
            if (!(l == lp && h == hp) && x->prev > best_other_prev)
                best_other_prev = x->prev;
            if (!(l == ls && h == hs) && x->sink > best_other_sink)
                best_other_sink = x->sink;
            if (l == lu && h != hu && x->entropy > best_other_ent)
                best_other_ent = x->entropy;
            /* heads that mostly look at the previous token or themselves are local trivially */
            bool prev_or_self = x->prev > 0.5 || x->self > 0.5;
            if (!(l == ll && h == hl) && !prev_or_self && x->local_frac > best_other_local)
                best_other_local = x->local_frac;
            if (!(l == li && h == hi) && x->induction > best_other_ind)
                best_other_ind = x->induction;
        }
    const head_measure *P = &m->head[lp][hp], *S = &m->head[ls][hs], *U = &m->head[lu][hu],
                       *L = &m->head[ll][hl], *I = &m->head[li][hi];
    v.prev = P->prev > 0.9 && P->prev > best_other_prev + 0.4;
    v.sink = S->sink > 0.9 && S->sink > best_other_sink + 0.3;
    v.uniform = U->entropy > best_other_ent + 0.3 &&
                fabs(U->max_prob - U->uniform_max_prob) < 0.01 * U->uniform_max_prob;
    v.local = L->local_frac > 0.9 && L->prev < 0.5 && L->self < 0.5 &&
              L->local_frac > best_other_local + 0.2;
    v.induction = I->induction > 0.5 && I->induction > best_other_ind + 0.3;
    v.predictions = m->n_unique > 0 && m->n_unique_correct == m->n_unique &&
                    2 * m->n_correct > m->n_second_copy;
    if (verbose) {
        print_message("  prev      L%dH%d prev_token %.4f (best other %.4f)\n", lp, hp, P->prev,
                      best_other_prev);
        print_message("  sink      L%dH%d sink %.4f (best other %.4f)\n", ls, hs, S->sink,
                      best_other_sink);
        print_message("  uniform   L%dH%d entropy %.4f (best other layer-%d %.4f), max_prob %.4f "
                      "vs 1/(t+1) %.4f\n", lu, hu, U->entropy, lu, best_other_ent, U->max_prob,
                      U->uniform_max_prob);
        print_message("  local     L%dH%d local_frac %.4f prev %.3f self %.3f (best other %.4f)\n",
                      ll, hl, L->local_frac, L->prev, L->self, best_other_local);
        print_message("  induction L%dH%d mass %.4f (best other %.4f)\n", li, hi, I->induction,
                      best_other_ind);
        print_message("  top-1 in the second copy: %d/%d (tokens seen once: %d/%d)\n",
                      m->n_correct, m->n_second_copy, m->n_unique_correct, m->n_unique);
    }
    return v;
}

/* ---- tests --------------------------------------------------------------------------------------- */

/* The default model (F32, no fault, seed 1) in a scratch folder, for a test that only reads it:
 * *state is the folder's path. */
static int default_model_setup(void **state)
{
    static char dir[512];
    write_scratch_model(dir, sizeof dir, "default", LP_DTYPE_F32, LP_SYNTH_FAULT_NONE, 1);
    *state = dir;
    return 0;
}

static int default_model_teardown(void **state)
{
    remove_synth_dir(*state);
    return 0;
}

static void test_loads_and_shapes(void **state)
{
    const char *dir = *state;
    lp_weights *w = NULL;
    lp_error err = {0};
    if (lp_weights_open(dir, &w, &err) != LP_OK)
        fail_msg("%s", err.msg);
    const lp_arch *a = lp_weights_arch(w);
    assert_non_null(a);
    assert_string_equal(a->family, "llama");
    assert_int_equal(a->hidden_size, LP_SYNTH_HIDDEN);
    assert_int_equal(a->n_layers, LP_SYNTH_LAYERS);
    assert_int_equal(a->n_heads, LP_SYNTH_HEADS);
    assert_int_equal(a->n_kv_heads, LP_SYNTH_HEADS);
    assert_int_equal(a->head_dim, LP_SYNTH_HEAD_DIM);
    assert_int_equal(a->ffn_hidden, LP_SYNTH_FFN);
    assert_true(a->tied_embeddings);
    assert_true(a->rope_theta == 1e6);
    assert_int_equal(a->rope_layout, LP_ROPE_HALVES);
    assert_int_equal(a->bos_token_id, 1);
    assert_int_equal(lp_weights_count(w), 2 + 9 * LP_SYNTH_LAYERS);
    assert_null(lp_weights_find(w, LP_ROLE_LM_HEAD, -1, -1, false)); /* tied */

    /* Every embedding row has norm 1 (RMSNorm then scales all tokens alike). */
    const lp_tensor *emb = lp_weights_find(w, LP_ROLE_TOKEN_EMBD, -1, -1, false);
    assert_non_null(emb);
    assert_int_equal(emb->shape[0], a->vocab_size);
    float *rows = malloc((size_t)emb->n_elements * sizeof *rows);
    assert_non_null(rows);
    assert_int_equal(lp_tensor_rows_f32(emb, 0, emb->shape[0], rows, &err), LP_OK);
    for (int64_t t = 0; t < emb->shape[0]; t++) {
        double sq = 0;
        for (int64_t j = 0; j < emb->shape[1]; j++)
            sq += (double)rows[t * emb->shape[1] + j] * (double)rows[t * emb->shape[1] + j];
        if (fabs(sqrt(sq) - 1.0) > 1e-5)
            fail_msg("embedding row %lld has norm %.7f, want 1", (long long)t, sqrt(sq));
    }
    free(rows);

    /* The tokenizer's vocabulary is the model's. */
    lp_tokenizer *tok = NULL;
    assert_int_equal(lp_tokenizer_open(dir, &tok, &err), LP_OK);
    assert_int_equal(lp_tokenizer_vocab_size(tok), a->vocab_size);
    lp_tokenizer_close(tok);
    lp_weights_close(w);
}

static void test_tokenizer_whole_words(void **state)
{
    const char *dir = *state;
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    assert_int_equal(lp_tokenizer_open(dir, &tok, &err), LP_OK);
    const char *prompt = LP_SYNTH_DEMO_PROMPT;
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(lp_tokenizer_encode(tok, prompt, strlen(prompt), true, &ids, &n, &err),
                     LP_OK);
    assert_int_equal(ids[0], 1);
    assert_string_equal(lp_tokenizer_piece(tok, ids[0]), "<s>");
    /* One token per space-separated word, each "▁" + the word. */
    char words[512];
    snprintf(words, sizeof words, "%s", prompt);
    size_t k = 1;
    for (char *save = NULL, *word = strtok_r(words, " ", &save); word;
         word = strtok_r(NULL, " ", &save), k++) {
        char want[64];
        snprintf(want, sizeof want, "\xe2\x96\x81%s", word);
        assert_true(k < n);
        assert_string_equal(lp_tokenizer_piece(tok, ids[k]), want);
    }
    assert_int_equal(k, n);
    char *text = NULL;
    assert_int_equal(lp_tokenizer_decode(tok, ids, n, true, &text, &err), LP_OK);
    assert_string_equal(text, prompt);
    free(text);
    free(ids);
    /* Every word of the vocabulary is one token, wherever it stands. */
    size_t n_words;
    const char *const *vocab_words = lp_synth_words(&n_words);
    assert_true(n_words >= 50);
    for (size_t w = 0; w < n_words; w++) {
        char twice[80], want[80];
        snprintf(twice, sizeof twice, "%s %s", vocab_words[w], vocab_words[w]);
        snprintf(want, sizeof want, "\xe2\x96\x81%s", vocab_words[w]);
        assert_int_equal(lp_tokenizer_encode(tok, twice, strlen(twice), false, &ids, &n, &err),
                         LP_OK);
        if (n != 2 || strcmp(lp_tokenizer_piece(tok, ids[0]), want) != 0 || ids[1] != ids[0])
            fail_msg("'%s' does not encode to two '%s' tokens (%zu tokens)", twice, want, n);
        free(ids);
    }
    /* Words outside the vocabulary still round-trip through byte fallback. */
    const char *odd = "Zebra caf\xc3\xa9 the";
    assert_int_equal(lp_tokenizer_encode(tok, odd, strlen(odd), false, &ids, &n, &err), LP_OK);
    assert_int_equal(lp_tokenizer_decode(tok, ids, n, true, &text, &err), LP_OK);
    assert_string_equal(text, odd);
    free(text);
    free(ids);
    lp_tokenizer_close(tok);
}

static void test_planted_heads_found(void **state)
{
    (void)state;
    static const lp_dtype dtypes[] = {LP_DTYPE_F32, LP_DTYPE_BF16, LP_DTYPE_F16};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        char dir[512];
        write_scratch_model(dir, sizeof dir, lp_dtype_name(dtypes[i]), dtypes[i],
                            LP_SYNTH_FAULT_NONE, 1);
        measured m;
        run_and_measure(dir, &m);
        print_message("%s:\n", lp_dtype_name(dtypes[i]));
        verdict v = judge(&m, true);
        assert_true(v.prev);
        assert_true(v.sink);
        assert_true(v.uniform);
        assert_true(v.local);
        assert_true(v.induction);
        assert_true(v.predictions);
        /* The library's own check (trace statistics) agrees with the measurement above. */
        lp_synth_report rep;
        lp_error err = {0};
        assert_int_equal(lp_synth_check(dir, &rep, &err), LP_OK);
        assert_true(rep.passed);
        assert_int_equal(rep.n_findings, 5);
        for (size_t k = 0; k < rep.n_findings; k++) {
            const lp_synth_finding *f = &rep.findings[k];
            const head_measure *hm = &m.head[f->head.layer][f->head.head];
            double mine = f->head.behaviour == LP_SYNTH_PREV_TOKEN ? hm->prev
                          : f->head.behaviour == LP_SYNTH_SINK     ? hm->sink
                          : f->head.behaviour == LP_SYNTH_LOCAL    ? hm->local_frac
                          : f->head.behaviour == LP_SYNTH_UNIFORM  ? hm->entropy
                                                                   : hm->induction;
            if (fabs(f->value - mine) > 1e-3)
                fail_msg("%s: lp_synth_check says %.5f, measured %.5f", f->statistic, f->value,
                         mine);
        }
        assert_int_equal(rep.n_correct, m.n_correct);
        /* The model predicts the next token, not the current one (layer 1's FFN takes the
         * current identity out): a margin of nats, not a coin flip. */
        print_message("  loss next %.3f, current %.3f\n", rep.loss_next, rep.loss_current);
        assert_true(rep.alignment_passed);
        assert_true(rep.loss_next + 2.0 < rep.loss_current);
        /* loupe leak's rule agrees: judged (not inconclusive) and OK; against labels shifted
         * by one the same logits are flagged */
        print_message("  leak alignment: next %.3f, current %.3f; shifted labels %.3f\n",
                      m.loss_next, m.loss_same, m.shifted_same);
        assert_int_equal(m.alignment, LP_ALIGNMENT_OK);
        assert_int_equal(m.alignment_shifted, LP_ALIGNMENT_FLAGGED);
        remove_synth_dir(dir);
    }
}

static void test_other_seeds(void **state)
{
    (void)state;
    for (uint64_t seed = 2; seed <= 4; seed++) {
        char dir[512], name[32];
        snprintf(name, sizeof name, "seed%llu", (unsigned long long)seed);
        write_scratch_model(dir, sizeof dir, name, LP_DTYPE_F32, LP_SYNTH_FAULT_NONE, seed);
        measured m;
        run_and_measure(dir, &m);
        verdict v = judge(&m, false);
        if (!(v.prev && v.sink && v.uniform && v.local && v.induction && v.predictions)) {
            judge(&m, true);
            fail_msg("seed %llu: a planted head was not found", (unsigned long long)seed);
        }
        remove_synth_dir(dir);
    }
}

/* The checks must be able to fail: break the previous-token head and watch them do so. */
static void test_broken_plantings_fail(void **state)
{
    (void)state;
    char dir[512];
    write_scratch_model(dir, sizeof dir, "nophase", LP_DTYPE_F32, LP_SYNTH_FAULT_PREV_NO_PHASE, 1);
    measured m;
    run_and_measure(dir, &m);
    print_message("prev-no-phase:\n");
    verdict v = judge(&m, true);
    assert_false(v.prev);      /* it now attends to itself */
    assert_false(v.induction); /* and writes the current token, not the previous one */
    assert_true(v.sink);       /* the other plantings do not depend on it */
    lp_synth_report rep;
    lp_error err = {0};
    assert_int_equal(lp_synth_check(dir, &rep, &err), LP_OK);
    assert_false(rep.passed);
    assert_false(rep.findings[0].passed); /* previous_token */
    assert_true(rep.findings[1].passed);  /* sink */
    assert_false(rep.predictions_passed);
    remove_synth_dir(dir);

    write_scratch_model(dir, sizeof dir, "nowrite", LP_DTYPE_F32, LP_SYNTH_FAULT_NO_PREV_WRITE, 1);
    run_and_measure(dir, &m);
    print_message("no-prev-write:\n");
    v = judge(&m, true);
    assert_true(v.prev); /* the pattern is still there ... */
    assert_false(v.induction); /* ... but nothing for layer 1 to match */
    assert_false(v.predictions);
    assert_int_equal(lp_synth_check(dir, &rep, &err), LP_OK);
    assert_false(rep.passed);
    assert_true(rep.findings[0].passed);
    assert_false(rep.findings[4].passed); /* induction */
    remove_synth_dir(dir);
}

static bool files_equal(const char *a, const char *b)
{
    lp_mapped_file ma, mb;
    lp_error err = {0};
    if (lp_map_file(a, &ma, &err) != LP_OK)
        return false;
    if (lp_map_file(b, &mb, &err) != LP_OK) {
        lp_unmap_file(&ma);
        return false;
    }
    bool same = ma.size == mb.size && memcmp(ma.data, mb.data, ma.size) == 0;
    lp_unmap_file(&ma);
    lp_unmap_file(&mb);
    return same;
}

static void test_deterministic(void **state)
{
    (void)state;
    char d1[512], d2[512], d3[512];
    write_scratch_model(d1, sizeof d1, "det1", LP_DTYPE_BF16, LP_SYNTH_FAULT_NONE, 7);
    write_scratch_model(d2, sizeof d2, "det2", LP_DTYPE_BF16, LP_SYNTH_FAULT_NONE, 7);
    write_scratch_model(d3, sizeof d3, "det3", LP_DTYPE_BF16, LP_SYNTH_FAULT_NONE, 8);
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json",
                                        "planted_heads.json"};
    for (size_t i = 0; i < 4; i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", d1, files[i]);
        snprintf(b, sizeof b, "%s/%s", d2, files[i]);
        if (!files_equal(a, b))
            fail_msg("%s differs between two runs with the same seed", files[i]);
    }
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/model.safetensors", d1);
    snprintf(b, sizeof b, "%s/model.safetensors", d3);
    assert_false(files_equal(a, b)); /* the seed reaches the weights */
    remove_synth_dir(d1);
    remove_synth_dir(d2);
    remove_synth_dir(d3);
}

static void test_refuses_foreign_folder(void **state)
{
    (void)state;
    char dir[512], stray[1024], marker[1024];
    scratch_dir(dir, sizeof dir, "foreign");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(stray, sizeof stray, "%s/stray.txt", dir);
    FILE *f = fopen(stray, "w");
    assert_non_null(f);
    fputs("keep me\n", f);
    fclose(f);
    lp_synth_options opts;
    lp_synth_options_init(&opts);
    lp_error err = {0};
    assert_int_equal(lp_synth_write(dir, &opts, &err), LP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "refusing to overwrite"));
    assert_non_null(strstr(err.msg, dir));
    snprintf(marker, sizeof marker, "%s/planted_heads.json", dir);
    assert_false(lp_path_exists(marker)); /* nothing written */
    remove(stray);

    /* An earlier synth output is ours to replace, even with a database beside it. */
    write_model(dir, LP_DTYPE_F32, LP_SYNTH_FAULT_NONE, 1);
    f = fopen(stray, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(lp_synth_write(dir, &opts, &err), LP_OK);

    /* A file where the folder should be, and bad options. */
    assert_int_equal(lp_synth_write(stray, &opts, &err), LP_ERR_USAGE);
    opts.dtype = LP_DTYPE_Q4_0;
    assert_int_equal(lp_synth_write(dir, &opts, &err), LP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "q4_0"));
    remove_synth_dir(dir);
}

/* ---- models of any family (lp_synth_write_family) -------------------------------------------- */

/* Each family's tiny default model, written with the random fill: what the reader must find. */
typedef struct family_case {
    lp_synth_family family;
    const char *arch_family;  /* lp_arch.family as the reader names it */
    size_t n_tensors;         /* 2 layers; by hand from the family's layout */
    const char *probe;        /* a tensor name the family has ... */
    lp_role probe_role;       /* ... its role ... */
    bool probe_transposed;    /* ... and whether it is stored [in, out] */
    float norm_identity;      /* what the random fill writes into a norm weight */
} family_case;

static const family_case family_cases[] = {
    /* embed + 2 x (2 norms, q k v o, gate up down) + norm + lm_head */
    {LP_SYNTH_LLAMA, "llama", 21, "model.layers.1.mlp.gate_proj.weight", LP_ROLE_FFN_GATE, false, 1.0f},
    {LP_SYNTH_MISTRAL, "mistral", 21, "model.layers.0.self_attn.o_proj.weight", LP_ROLE_ATTN_O, false, 1.0f},
    /* + q, k, v biases per layer */
    {LP_SYNTH_QWEN2, "qwen2", 27, "model.layers.1.self_attn.v_proj.bias", LP_ROLE_ATTN_V, false, 1.0f},
    /* + q, k norms per layer */
    {LP_SYNTH_QWEN3, "qwen3", 25, "model.layers.0.self_attn.k_norm.weight", LP_ROLE_ATTN_K_NORM, false, 1.0f},
    /* per layer 2 norms, q k v o, router, 4 experts x 3 */
    {LP_SYNTH_MIXTRAL, "mixtral", 41, "model.layers.1.block_sparse_moe.experts.3.w2.weight", LP_ROLE_EXPERT_DOWN, false, 1.0f},
    /* tied: no lm_head */
    {LP_SYNTH_GEMMA, "gemma", 20, "model.layers.1.post_attention_layernorm.weight", LP_ROLE_FFN_NORM, false, 0.0f},
    /* four norms per layer */
    {LP_SYNTH_GEMMA2, "gemma2", 24, "model.layers.1.post_attention_layernorm.weight", LP_ROLE_ATTN_POST_NORM, false, 0.0f},
    {LP_SYNTH_GEMMA3, "gemma3_text", 28, "model.layers.0.pre_feedforward_layernorm.weight", LP_ROLE_FFN_NORM, false, 0.0f},
    /* wte, wpe, 2 x 12 (weight and bias of ln_1, c_attn, c_proj, ln_2, c_fc, mlp.c_proj), ln_f x 2 */
    {LP_SYNTH_GPT2, "gpt2", 28, "h.1.attn.c_attn.weight", LP_ROLE_ATTN_QKV, true, 1.0f},
    /* embed_in, 2 x 12 (weight and bias of 2 norms, query_key_value, dense, 2 MLP), final norm
     * x 2, embed_out */
    {LP_SYNTH_NEOX, "gpt_neox", 28, "gpt_neox.layers.1.attention.query_key_value.weight", LP_ROLE_ATTN_QKV, false, 1.0f},
    /* embed, 2 x 14 (norm x 2, q k v and their biases, dense x 2, fc1 x 2, fc2 x 2), final
     * norm x 2, lm_head x 2 */
    {LP_SYNTH_PHI, "phi", 33, "model.layers.0.self_attn.dense.bias", LP_ROLE_ATTN_O, false, 1.0f},
    /* wte, 2 x 10 (ln_1 x 2, q k v out_proj, fc_in x 2, fc_out x 2), ln_f x 2, lm_head x 2 */
    {LP_SYNTH_GPTJ, "gptj", 25, "transformer.h.1.mlp.fc_in.weight", LP_ROLE_FFN_UP, false, 1.0f},
    /* embed, 2 x 11 (norms x 2 x 2, q k v o, gate up down), final norm x 2, lm_head */
    {LP_SYNTH_STABLELM, "stablelm", 26, "model.layers.1.post_attention_layernorm.bias", LP_ROLE_FFN_NORM, false, 1.0f},
    /* Falcon-7B: word_embeddings, 2 x (input_layernorm x 2, query_key_value, dense, 2 MLP),
     * ln_f x 2; tied */
    {LP_SYNTH_FALCON, "falcon", 15, "transformer.h.0.self_attention.query_key_value.weight", LP_ROLE_ATTN_QKV, false, 1.0f},
    /* word_embeddings + its norm x 2, 2 x 12 (weight and bias of 2 norms, query_key_value,
     * dense, 2 MLP), ln_f x 2; tied */
    {LP_SYNTH_BLOOM, "bloom", 29, "transformer.word_embeddings_layernorm.bias", LP_ROLE_EMBD_NORM, false, 1.0f},
    /* embed_tokens, embed_positions, 2 x 16 (weight and bias of q k v out_proj, 2 norms, fc1,
     * fc2), final_layer_norm x 2; tied */
    {LP_SYNTH_OPT, "opt", 36, "model.decoder.layers.1.final_layer_norm.weight", LP_ROLE_FFN_NORM, false, 1.0f},
    /* embed, 2 x (2 norms, qkv_proj, o_proj, gate_up_proj, down_proj), norm, lm_head */
    {LP_SYNTH_PHI3, "phi3", 15, "model.layers.1.mlp.gate_up_proj.weight", LP_ROLE_FFN_GATE_UP, false, 1.0f},
    /* embed, 2 x (q k v o, q_norm, k_norm, 2 post norms, gate up down), norm, lm_head */
    {LP_SYNTH_OLMO2, "olmo2", 25, "model.layers.1.self_attn.q_norm.weight", LP_ROLE_ATTN_Q_NORM, false, 1.0f},
    /* per layer 2 norms, q k v o and their 3 biases, router, 4 experts x 3, the shared expert's 3
     * and its gate */
    {LP_SYNTH_QWEN2_MOE, "qwen2_moe", 55, "model.layers.1.mlp.shared_expert_gate.weight", LP_ROLE_SHARED_EXPERT_GATE, false, 1.0f},
    /* per layer 2 norms, q k v o, q/k norms, router, 4 experts x 3 */
    {LP_SYNTH_QWEN3_MOE, "qwen3_moe", 45, "model.layers.0.mlp.experts.2.up_proj.weight", LP_ROLE_EXPERT_UP, false, 1.0f},
    /* 2 norms and q, kv_a, its norm, kv_b, o per layer; layer 0 dense (3), layer 1 router, 4
     * experts x 3 and the shared experts' 3 */
    {LP_SYNTH_DEEPSEEK_V2, "deepseek_v2", 36, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight", LP_ROLE_ATTN_KV_A, false, 1.0f},
    /* + q_a, its norm and q_b instead of q, and the score correction */
    {LP_SYNTH_DEEPSEEK_V3, "deepseek_v3", 41, "model.layers.1.mlp.gate.e_score_correction_bias", LP_ROLE_ROUTER_BIAS, false, 1.0f},
    /* embed, 2 x (2 norms, q k v o and their 4 biases, sinks, router and its bias, stacked
     * gate_up and down with their biases), norm, lm_head */
    {LP_SYNTH_GPT_OSS, "gpt_oss", 37, "model.layers.1.mlp.experts.gate_up_proj", LP_ROLE_EXPERT_GATE_UP, true, 1.0f},
    /* MPT (no_bias): wte, 2 x (norm_1, Wqkv, out_proj, norm_2, up_proj, down_proj), norm_f;
     * tied */
    {LP_SYNTH_MPT, "mpt", 14, "transformer.blocks.1.attn.Wqkv.weight", LP_ROLE_ATTN_QKV, false, 1.0f},
    /* StarCoder2 (use_bias): embed, 2 x (2 norms, q k v o, c_fc, c_proj: weight and bias
     * each), norm x 2; tied */
    {LP_SYNTH_STARCODER2, "starcoder2", 35, "model.layers.1.mlp.c_fc.bias", LP_ROLE_FFN_UP, false, 1.0f},
};

static void check_family_case(const family_case *fc)
{
    char dir[512];
    scratch_dir(dir, sizeof dir, lp_synth_family_name(fc->family));
    lp_synth_spec spec;
    lp_synth_spec_init(&spec, fc->family);
    lp_error err = {0};
    if (lp_synth_write_family(dir, &spec, &err) != LP_OK)
        fail_msg("%s: %s", lp_synth_family_name(fc->family), err.msg);
    lp_model *model;
    if (lp_model_open(dir, &model, &err) != LP_OK)
        fail_msg("%s: %s", lp_synth_family_name(fc->family), err.msg);
    const lp_weights *w = lp_model_weights(model);
    const lp_arch *a = lp_model_arch(model);
    print_message("  %-8s -> %-12s %zu tensors\n", lp_synth_family_name(fc->family), a->family,
                  lp_weights_count(w));
    assert_string_equal(a->family, fc->arch_family);
    assert_int_equal(lp_weights_count(w), fc->n_tensors);
    assert_int_equal(a->n_layers, spec.n_layers);
    assert_int_equal(a->hidden_size, spec.hidden);
    assert_int_equal(a->n_kv_heads, spec.n_kv_heads);
    assert_int_equal(a->tied_embeddings, spec.tied);
    const lp_tensor *t = lp_weights_find_name(w, fc->probe);
    if (!t)
        fail_msg("%s: no tensor %s", lp_synth_family_name(fc->family), fc->probe);
    assert_int_equal(t->role, fc->probe_role);
    assert_int_equal(t->transposed, fc->probe_transposed);
    /* the random fill: norms are the identity, matrices spread over [-scale, scale] */
    const lp_tensor *norm = lp_weights_find(w, LP_ROLE_FFN_NORM, 1, -1, false);
    if (!norm) /* one norm feeds both branches (Phi, GPT-J) */
        norm = lp_weights_find(w, LP_ROLE_ATTN_NORM, 1, -1, false);
    if (!norm) /* only output norms (OLMo 2) */
        norm = lp_weights_find(w, LP_ROLE_FFN_POST_NORM, 1, -1, false);
    const lp_tensor *embd = lp_weights_find(w, LP_ROLE_TOKEN_EMBD, -1, -1, false);
    float nv[32], row[32];
    assert_int_equal(lp_tensor_rows_f32(norm, 0, 1, nv, &err), LP_OK);
    assert_int_equal(lp_tensor_rows_f32(embd, 5, 1, row, &err), LP_OK);
    float lo = row[0], hi = row[0];
    for (int i = 0; i < 32; i++) {
        assert_true(nv[i] == fc->norm_identity);
        lo = row[i] < lo ? row[i] : lo;
        hi = row[i] > hi ? row[i] : hi;
    }
    assert_true(lo >= -0.02f && hi <= 0.02f && hi - lo > 0.01f);
    /* and the forward pass runs on it */
    int32_t ids[6] = {1, 5, 9, 13, 5, 63};
    lp_batch batch = lp_batch_single(ids, 6);
    assert_int_equal(lp_forward(model, &batch, NULL, &err), LP_OK);
    lp_model_close(model);
    remove_synth_dir(dir);
}

static void test_family_models(void **state)
{
    (void)state;
    assert_int_equal(sizeof family_cases / sizeof family_cases[0], LP_SYNTH_FAMILY_COUNT);
    for (size_t i = 0; i < sizeof family_cases / sizeof family_cases[0]; i++)
        check_family_case(&family_cases[i]);
}

/* What lp_synth_write_family refuses, and the word its message names. */
typedef struct bad_spec_case {
    lp_synth_family family;
    int64_t n_heads, n_kv_heads, top_k, rope_dim;
    lp_dtype dtype;
    const char *message;
} bad_spec_case;

static void test_family_bad_specs(void **state)
{
    (void)state;
    static const bad_spec_case cases[] = {
        {LP_SYNTH_LLAMA, 4, 3, 0, 0, LP_DTYPE_F32, "3 kv heads do not divide 4 heads"},
        {LP_SYNTH_GPT2, 4, 2, 0, 0, LP_DTYPE_F32, "n_kv_heads = n_heads"},
        {LP_SYNTH_MIXTRAL, 4, 2, 5, 0, LP_DTYPE_F32, "top_k 5 of 4 experts"},
        {LP_SYNTH_QWEN3, 4, 2, 0, 9, LP_DTYPE_F32, "rope_dim 9"},
        {LP_SYNTH_GEMMA, 4, 1, 0, 0, LP_DTYPE_Q8_0, "q8_0"},
        {LP_SYNTH_FAMILY_COUNT, 4, 2, 0, 0, LP_DTYPE_F32, "family"},
    };
    char dir[512];
    scratch_dir(dir, sizeof dir, "badspec");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_spec_case *bc = &cases[i];
        lp_synth_spec spec;
        lp_synth_spec_init(&spec, bc->family == LP_SYNTH_FAMILY_COUNT ? LP_SYNTH_LLAMA : bc->family);
        spec.family = bc->family;
        spec.n_heads = bc->n_heads;
        spec.n_kv_heads = bc->n_kv_heads;
        if (bc->top_k)
            spec.top_k = bc->top_k;
        spec.rope_dim = bc->rope_dim;
        spec.dtype = bc->dtype;
        lp_error err = {0};
        assert_int_equal(lp_synth_write_family(dir, &spec, &err), LP_ERR_USAGE);
        if (!strstr(err.msg, bc->message))
            fail_msg("case %zu: '%s' does not say '%s'", i, err.msg, bc->message);
        assert_false(lp_path_exists(dir)); /* refused before anything is written */
    }
}

/* A fill of one's own is asked for every tensor, in the logical [out, in] layout, and its
 * values come back through the reader (GPT-2's c_attn transposed back by the catalogue). */
static lp_status fill_by_position(void *ctx, const lp_synth_tensor *t, float *data, lp_error *err)
{
    int *calls = ctx;
    (void)err;
    ++*calls;
    int64_t cols = t->cols > 0 ? t->cols : 1;
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < cols; c++)
            data[r * cols + c] = (float)(t->role * 1000 + r) + (float)c / 1024.0f;
    return LP_OK;
}

static void test_family_own_fill(void **state)
{
    (void)state;
    char dir[512];
    scratch_dir(dir, sizeof dir, "ownfill");
    lp_synth_spec spec;
    lp_synth_spec_init(&spec, LP_SYNTH_GPT2);
    int calls = 0;
    spec.fill = fill_by_position;
    spec.fill_ctx = &calls;
    lp_error err = {0};
    assert_int_equal(lp_synth_write_family(dir, &spec, &err), LP_OK);
    /* 28 tensors, c_attn's weight and bias asked for as three parts each: 2 x 2 x 2 more */
    assert_int_equal(calls, 28 + 8);
    lp_weights *w;
    assert_int_equal(lp_weights_open(dir, &w, &err), LP_OK);
    const lp_tensor *qkv = lp_weights_find_name(w, "h.0.attn.c_attn.weight");
    assert_non_null(qkv);
    assert_int_equal(qkv->shape[0], 32); /* stored [in 32, out 96] */
    assert_int_equal(qkv->shape[1], 96);
    float row[96];
    assert_int_equal(lp_tensor_rows_f32(qkv, 3, 1, row, &err), LP_OK); /* input 3's weights */
    assert_true(row[0] == (float)(LP_ROLE_ATTN_Q * 1000 + 0) + 3.0f / 1024.0f);
    assert_true(row[32 + 7] == (float)(LP_ROLE_ATTN_K * 1000 + 7) + 3.0f / 1024.0f);
    assert_true(row[64 + 31] == (float)(LP_ROLE_ATTN_V * 1000 + 31) + 3.0f / 1024.0f);
    lp_weights_close(w);
    remove_synth_dir(dir);
}

/* ---- the GGUF form (lp_synth_write_family_gguf) ---------------------------------------------- */

/* One spec in both forms, and what the GGUF form's reader must see. */
typedef struct gguf_form_case {
    const char *name;
    lp_synth_family family;
    void (*vary)(lp_synth_spec *spec); /* NULL: the family's defaults */
    const char *arch_family;           /* lp_arch.family of the GGUF */
    int64_t T;                         /* prompt length */
    double budget;                     /* max |logit difference|; 0: bit-equal */
} gguf_form_case;

static void vary_sequential(lp_synth_spec *s) { s->parallel = false; }
static void vary_new_arch(lp_synth_spec *s)
{
    s->new_arch = true;
    s->n_kv_heads = 2;
}
static void vary_stablelm2(lp_synth_spec *s)
{
    s->parallel = true;
    s->qk_norm = true;
    s->qkv_bias = true;
}
static void vary_longrope(lp_synth_spec *s)
{
    static const double short_f[4] = {1.0, 1.5, 2.0, 3.0}, long_f[4] = {2.0, 3.0, 5.0, 8.0};
    s->orig_ctx = 16;
    s->n_ctx = 64;
    s->short_factor = short_f;
    s->long_factor = long_f;
}
static void vary_bf16(lp_synth_spec *s) { s->dtype = s->vector_dtype = LP_DTYPE_BF16; }
static void vary_mpt_bias(lp_synth_spec *s)
{
    s->qkv_bias = true;
    s->qk_norm = true;
    s->qkv_clip = 0.5;
}
static void vary_qwen_no_shared(lp_synth_spec *s) { s->shared_ffn = 0; }
static void vary_learned_positions(lp_synth_spec *s) { s->alibi = false; }
static void vary_norm_topk(lp_synth_spec *s) { s->norm_topk_prob = true; } /* Qwen3-MoE's */

/* Llama's permuted q/k rotate the same pairs in another order (the dot products sum in another
 * order); gpt-oss likewise through its stacked experts' sums. Everything else is bit-equal. */
static const gguf_form_case gguf_form_cases[] = {
    {"llama", LP_SYNTH_LLAMA, NULL, "llama", 20, 1e-5},
    {"llama-bf16", LP_SYNTH_LLAMA, vary_bf16, "llama", 20, 1e-5},
    /* the "llama" architecture keeps no window: a prompt inside Mistral's 16 */
    {"mistral", LP_SYNTH_MISTRAL, NULL, "llama", 15, 1e-5},
    {"mixtral", LP_SYNTH_MIXTRAL, NULL, "mixtral", 20, 1e-5},
    {"qwen2", LP_SYNTH_QWEN2, NULL, "qwen2", 20, 0},
    {"qwen3", LP_SYNTH_QWEN3, NULL, "qwen3", 20, 0},
    {"gemma", LP_SYNTH_GEMMA, NULL, "gemma", 20, 0},
    {"gemma2", LP_SYNTH_GEMMA2, NULL, "gemma2", 20, 0},
    {"gemma3", LP_SYNTH_GEMMA3, NULL, "gemma3", 20, 0},
    {"gpt2", LP_SYNTH_GPT2, NULL, "gpt2", 20, 0},
    {"gpt_neox", LP_SYNTH_NEOX, NULL, "gpt_neox", 20, 0},
    {"gpt_neox-sequential", LP_SYNTH_NEOX, vary_sequential, "gpt_neox", 20, 0},
    {"phi", LP_SYNTH_PHI, NULL, "phi", 20, 0},
    {"gptj", LP_SYNTH_GPTJ, NULL, "gptj", 20, 0},
    {"stablelm-3b", LP_SYNTH_STABLELM, NULL, "stablelm", 20, 0},
    {"stablelm-2", LP_SYNTH_STABLELM, vary_stablelm2, "stablelm", 20, 0},
    {"falcon-7b", LP_SYNTH_FALCON, NULL, "falcon", 20, 0},
    {"falcon-40b", LP_SYNTH_FALCON, vary_new_arch, "falcon", 20, 0},
    {"bloom", LP_SYNTH_BLOOM, NULL, "bloom", 20, 0},
    {"phi3", LP_SYNTH_PHI3, NULL, "phi3", 20, 0},
    {"phi3-longrope", LP_SYNTH_PHI3, vary_longrope, "phi3", 20, 0},
    {"olmo2", LP_SYNTH_OLMO2, NULL, "olmo2", 20, 0},
    {"qwen2_moe", LP_SYNTH_QWEN2_MOE, NULL, "qwen2_moe", 20, 0},
    {"qwen2_moe-unshared", LP_SYNTH_QWEN2_MOE, vary_qwen_no_shared, "qwen2_moe", 20, 0},
    {"qwen3_moe", LP_SYNTH_QWEN3_MOE, vary_norm_topk, "qwen3_moe", 20, 0},
    {"deepseek_v2", LP_SYNTH_DEEPSEEK_V2, NULL, "deepseek_v2", 20, 0},
    {"deepseek_v3", LP_SYNTH_DEEPSEEK_V3, NULL, "deepseek_v2", 20, 0},
    {"gpt_oss", LP_SYNTH_GPT_OSS, NULL, "gpt_oss", 20, 1e-5},
    {"mpt", LP_SYNTH_MPT, NULL, "mpt", 20, 0},
    {"mpt-bias-qk-ln-clip", LP_SYNTH_MPT, vary_mpt_bias, "mpt", 20, 0},
    {"mpt-learned-positions", LP_SYNTH_MPT, vary_learned_positions, "mpt", 20, 0},
    /* the "starcoder2" architecture keeps no window either */
    {"starcoder2", LP_SYNTH_STARCODER2, NULL, "starcoder2", 15, 0},
};

/* The logits and maps of path (a folder or a .gguf) on ids[0, T). */
static void run_family(const char *path, const int32_t *ids, int64_t T, const char *want_family,
                       capture *c)
{
    lp_error err = {0};
    lp_model *model;
    if (lp_model_open(path, &model, &err) != LP_OK)
        fail_msg("%s: %s", path, err.msg);
    if (want_family && strcmp(lp_model_arch(model)->family, want_family) != 0)
        fail_msg("%s: family %s, want %s", path, lp_model_arch(model)->family, want_family);
    c->n_tokens = T;
    c->vocab = lp_model_arch(model)->vocab_size;
    c->logits = calloc((size_t)(T * c->vocab), sizeof(float));
    assert_non_null(c->logits);
    lp_observer obs = {c, cap_want, cap_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    lp_batch batch = lp_batch_single(ids, T);
    if (lp_forward(model, &batch, &opts, &err) != LP_OK)
        fail_msg("%s: %s", path, err.msg);
    lp_model_close(model);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = d > m || d != d ? d : m;
    }
    return m;
}

static bool check_gguf_form(const gguf_form_case *gc)
{
    char st_dir[512], gguf_dir[600], gguf_path[700];
    scratch_dir(st_dir, sizeof st_dir, gc->name);
    snprintf(gguf_dir, sizeof gguf_dir, "%s-gguf", st_dir);
    snprintf(gguf_path, sizeof gguf_path, "%s/model.gguf", gguf_dir);
    lp_synth_spec spec;
    lp_synth_spec_init(&spec, gc->family);
    spec.scale = 0.3; /* logits with some spread, so that equal means something */
    spec.seed = 11;
    if (gc->vary)
        gc->vary(&spec);
    lp_error err = {0};
    if (lp_synth_write_family(st_dir, &spec, &err) != LP_OK ||
        lp_synth_write_family_gguf(gguf_dir, &spec, &err) != LP_OK)
        fail_msg("%s: %s", gc->name, err.msg);
    int32_t ids[T_MAX];
    for (int64_t t = 0; t < gc->T; t++)
        ids[t] = (int32_t)((t * 37 + 5) % spec.vocab);
    capture *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    run_family(st_dir, ids, gc->T, NULL, a);
    run_family(gguf_path, ids, gc->T, gc->arch_family, b);
    size_t n_logits = (size_t)(gc->T * a->vocab);
    double d_logits = max_diff(a->logits, b->logits, n_logits);
    double d_probs = max_diff(&a->probs[0][0][0][0], &b->probs[0][0][0][0],
                              sizeof a->probs / sizeof(float));
    double spread = 0;
    for (size_t i = 0; i < n_logits; i++)
        spread = fmax(spread, fabs((double)a->logits[i] - (double)a->logits[0]));
    print_message("  %-20s T=%2lld  |logits| spread %.3f  gguf - safetensors: logits %.2e, "
                  "maps %.2e (budget %.0e)\n", gc->name, (long long)gc->T, spread, d_logits,
                  d_probs, gc->budget);
    bool ok = spread > 0.05 && d_logits <= gc->budget && d_probs <= gc->budget;
    if (!ok)
        print_error("%s:%d: %s: spread %.3f, logits %.2e, maps %.2e against %.0e\n", __FILE__,
                    __LINE__, gc->name, spread, d_logits, d_probs, gc->budget);
    free(a->logits);
    free(b->logits);
    free(a);
    free(b);
    remove_synth_dir(st_dir);
    remove(gguf_path);
    rmdir(gguf_dir);
    return ok;
}

static void test_family_gguf_forms(void **state)
{
    (void)state;
    int n_failed = 0;
    for (size_t i = 0; i < sizeof gguf_form_cases / sizeof gguf_form_cases[0]; i++)
        n_failed += !check_gguf_form(&gguf_form_cases[i]);
    assert_int_equal(n_failed, 0);
}

/* Specs no llama.cpp architecture can carry: refused, nothing written (Qwen3-MoE's default spec
 * leaves norm_topk_prob false, which its GGUF graph cannot). */
static void test_family_gguf_refusals(void **state)
{
    (void)state;
    static const struct {
        lp_synth_family family;
        bool alibi, parallel;
        const char *message;
    } cases[] = {
        {LP_SYNTH_OPT, false, false, "no GGUF architecture"},
        {LP_SYNTH_FALCON, true, true, "ALiBi"},
        {LP_SYNTH_FALCON, false, false, "sequential"},
        {LP_SYNTH_QWEN3_MOE, false, false, "always renormalizes"},
    };
    char dir[512];
    scratch_dir(dir, sizeof dir, "gguf-refused");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lp_synth_spec spec;
        lp_synth_spec_init(&spec, cases[i].family);
        if (cases[i].family == LP_SYNTH_FALCON) {
            spec.alibi = cases[i].alibi;
            spec.parallel = cases[i].parallel;
        }
        lp_error err = {0};
        assert_int_equal(lp_synth_write_family_gguf(dir, &spec, &err), LP_ERR_UNSUPPORTED);
        if (!strstr(err.msg, cases[i].message))
            fail_msg("case %zu: '%s' does not say '%s'", i, err.msg, cases[i].message);
        assert_false(lp_path_exists(dir));
    }
    lp_synth_spec spec;
    lp_synth_spec_init(&spec, LP_SYNTH_QWEN2_MOE);
    spec.dense_layer[1] = true;
    lp_error err = {0};
    assert_int_equal(lp_synth_write_family_gguf(dir, &spec, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "layer 1 is dense"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_loads_and_shapes, default_model_setup,
                                        default_model_teardown),
        cmocka_unit_test_setup_teardown(test_tokenizer_whole_words, default_model_setup,
                                        default_model_teardown),
        cmocka_unit_test(test_planted_heads_found),
        cmocka_unit_test(test_other_seeds),
        cmocka_unit_test(test_broken_plantings_fail),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_refuses_foreign_folder),
        cmocka_unit_test(test_family_models),
        cmocka_unit_test(test_family_bad_specs),
        cmocka_unit_test(test_family_own_fill),
        cmocka_unit_test(test_family_gguf_forms),
        cmocka_unit_test(test_family_gguf_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
