/* Blocked attention with an online softmax (FlashAttention's scheme on the CPU): no T x T
 * buffer; exact probabilities and per-row statistics on request.
 *
 * The keys the call needs are packed once into panels of 16 (kp[panel][d][16], converted from
 * f16/bf16 as they are packed) and its V rows copied contiguous (converted likewise). Query rows are taken
 * LP_ATTN_MR (6) at a time and keys ATT_BK (64) at a time:
 *   scores  S[6][64] = Q tile . K block^T   by the attn_qk micro-kernel (6 x 16 per panel, the
 *                                           GEMM's register tile, q broadcast from its rows)
 *   softmax per row over the block's visible keys: running max m, sum l = sum exp(s - m), the
 *           output row rescaled by exp(m_old - m_new) when the block raises the max
 *   output  O[6][v_dim] += P[6][64] . V block   by the attn_pv micro-kernel
 * Blocks no row of the tile sees are skipped (causal: everything right of the diagonal block;
 * window: everything left of it); in the blocks that are partly visible, each row's keys outside
 * its range get weight 0.
 * When probs or row_stats is requested, pass 1 also keeps each row's finished scores (in a
 * [48, n_k] scratch per head: O(n_k), never T x T) and pass 2, once the
 * row's final m and l are known, turns them into p = exp(s - m) / l in one sweep that also sums
 * what the statistics need (attn_row_probs), with p log p = p (s - m - log l):
 *   entropy = log l - sum p (s - m)   distance = sum p (pos - j)   local = sum of local p
 * so the probabilities are exact (not rescaled) and come from the very scores pass 1 used,
 * without a second Q.K; the sparsity counts then run on the row of p (lp_attn_row_sparsity).
 * Pass 2 and the rows' state live in attention_rows.c, shared with attention_decode.c, which
 * serves heads of a few query rows over a cache (a decode step) without any packing.
 * A learned sink starts each row as if one key with score sink_logit and a zero value row had
 * been seen (m = sink_logit, l = 1).
 * GQA (n_group > 1): the group's query heads share the call's packed K/V; pass 1 runs each
 * head's tile against a key block before moving to the next, so the block is in L1 for all.
 * A non-finite score (NaN or overflow in q or k) poisons its row: output, visible probabilities
 * and statistics become NaN instead of a plausible-looking distribution. When the packed copy
 * cannot be allocated the reference runs instead (it needs no scratch).
 */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

/* Keys per block; query tiles per panel (pass 1 takes each K/V block once for all of them). */
enum { ATT_BK = 64, ATT_PANEL = 8 };

/* The packed keys and f32 values of one call: keys [kbase, khi) (kbase a multiple of ATT_BK). */
typedef struct att_call {
    const lp_kernel_table *kt;
    const lp_attn_args *a;
    int64_t row_begin, row_end;
    int64_t kbase, khi;
    float *kp;        /* ceil((khi - kbase) / 16) panels of [head_dim][16], zero past khi */
    const float *v0;  /* V row kbase as f32 */
    int64_t v_stride; /* between f32 V rows */
    float *v_conv;    /* contiguous f32 copy of the V rows */
    float *wide;      /* [head_dim][16] scratch: f16/bf16 keys converted before packing,
                         then each query tile's 16-wide panel before it is compacted */
    float *qp;        /* the panel's query tiles, packed [ATT_PANEL * n_heads][head_dim][LP_ATTN_MR] */
    float *rowp;      /* with probs or stats: the kept scores of the panel's rows,
                         [ATT_PANEL * n_heads][LP_ATTN_MR][n_k] (O(n_k), L2-sized at 4096) */
    int64_t n_heads;  /* the query heads of the KV group */
    lp_attn_args *heads; /* [n_heads]: each head as a call of its own (lp_attn_group_head) */
    lp_attn_row_state *rs; /* [ATT_PANEL * n_heads][LP_ATTN_MR]: the panel's rows */
} att_call;

/* The calls of one thread reuse one scratch block, grown when a call needs more and freed when
 * the thread exits: at T = 4096 the packed K and V alone are 2 MB, which malloc serves by mmap,
 * and first-touching them on every call cost 3-4% of the attention (page faults). */
typedef struct att_scratch {
    float *base;
    size_t floats;
} att_scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_ok;

static void scratch_release(void *p)
{
    att_scratch *sc = p;
    free(sc->base);
    free(sc);
}

static void scratch_key_init(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_release) == 0;
}

/* At least `floats` 64-byte aligned floats for this call (NULL: out of memory). */
static float *thread_scratch(size_t floats)
{
    pthread_once(&scratch_once, scratch_key_init);
    if (!scratch_key_ok)
        return NULL;
    att_scratch *sc = pthread_getspecific(scratch_key);
    if (!sc) {
        sc = calloc(1, sizeof *sc);
        if (!sc || pthread_setspecific(scratch_key, sc) != 0) {
            free(sc);
            return NULL;
        }
    }
    if (sc->floats < floats) {
        free(sc->base);
        size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
        sc->base = aligned_alloc(64, bytes > 0 ? bytes : 64);
        sc->floats = sc->base ? floats : 0;
    }
    return sc->base;
}

/* n floats rounded up to whole cache lines: the scratch's parts stay 64-byte aligned. */
static size_t line_floats(int64_t n) { return ((size_t)(n > 0 ? n : 0) + 15) / 16 * 16; }

/* Pack keys [kbase, khi) into 16-key panels, f16/bf16 rows converted into `wide` first; V
 * likewise when it is not f32. */
static void call_pack(att_call *c)
{
    const lp_attn_args *a = c->a;
    lp_dtype dt = lp_attn_kv_dtype(a);
    int64_t hd = a->head_dim, n = c->khi - c->kbase;
    int64_t panels = (n + LP_ATTN_NR - 1) / LP_ATTN_NR;
    float *rows = c->wide;
    for (int64_t p = 0; p < panels; p++) {
        int64_t key0 = c->kbase + p * LP_ATTN_NR;
        int keys = c->khi - key0 < LP_ATTN_NR ? (int)(c->khi - key0) : LP_ATTN_NR;
        float *kp = c->kp + p * LP_ATTN_NR * hd;
        if (dt == LP_DTYPE_F32) {
            c->kt->attn_pack_k((const float *)a->k + key0 * a->k_stride, a->k_stride, keys, hd, kp);
            continue;
        }
        for (int j = 0; j < keys; j++) {
            const void *stored = (const uint8_t *)a->k + (uint64_t)((key0 + j) * a->k_stride) * 2;
            if (dt == LP_DTYPE_F16)
                c->kt->f16_to_f32(stored, rows + j * hd, hd);
            else
                c->kt->bf16_to_f32(stored, rows + j * hd, hd);
        }
        c->kt->attn_pack_k(rows, hd, keys, hd, kp);
    }
    /* V rows copied contiguous: rows of a [T, heads * dim] projection are kilobytes apart, and
     * 64 of them at such a stride fall into a few L1 sets */
    int64_t vd = a->v_dim;
    for (int64_t j = 0; j < n; j++) {
        const void *stored = (const uint8_t *)a->v +
                             (uint64_t)((c->kbase + j) * a->v_stride) * (dt == LP_DTYPE_F32 ? 4 : 2);
        if (dt == LP_DTYPE_F32)
            memcpy(c->v_conv + j * vd, stored, (size_t)vd * sizeof(float));
        else if (dt == LP_DTYPE_F16)
            c->kt->f16_to_f32(stored, c->v_conv + j * vd, vd);
        else
            c->kt->bf16_to_f32(stored, c->v_conv + j * vd, vd);
    }
    c->v0 = c->v_conv;
    c->v_stride = vd;
}

/* Query rows [i0, i0 + rows) as the panel attn_qk reads, qp[d * LP_ATTN_MR + r] (0 past rows):
 * the key packer's 16-wide panel (register transposes; a scalar copy cost a load and a strided
 * store per value) with the first 6 of each 16 kept. */
static void pack_queries(const att_call *c, const lp_attn_args *a, int64_t i0, int rows,
                         float *qp)
{
    int64_t hd = a->head_dim;
    c->kt->attn_pack_k(a->q + i0 * a->q_stride, a->q_stride, rows, hd, c->wide);
    for (int64_t d = 0; d < hd; d++)
        memcpy(qp + d * LP_ATTN_MR, c->wide + d * LP_ATTN_NR, LP_ATTN_MR * sizeof *qp);
}

/* Raw scores of the packed query tile against keys [kb, kb + kn): S[r * ATT_BK + j]. */
static void tile_scores(const att_call *c, const float *qp, int rows, int64_t kb, int64_t kn,
                        float *S)
{
    const lp_attn_args *a = c->a;
    const float *kp = c->kp + (kb - c->kbase) * a->head_dim;
    for (int64_t p = 0; p * LP_ATTN_NR < kn; p++)
        c->kt->attn_qk(qp, rows, kp + p * LP_ATTN_NR * a->head_dim, a->head_dim, a->scale,
                       S + p * LP_ATTN_NR, ATT_BK);
}

/* Pass 1 for a query row and the block of keys [kb, kb + kn): fold the row's visible keys of
 * the block into its running max and sum, set *alpha to the factor its output row takes before
 * the block's P x V (exp(m_old - m_new) when the max rises, else 1), and turn the row's scores
 * s[0 .. kn) in place into the weights exp(s - m) (0 for keys the row does not see). kept (NULL
 * or the row's kept scores, indexed by key) receives the finished scores of its visible keys. */
static void row_take_block(const lp_kernel_table *kt, const lp_attn_args *a,
                           lp_attn_row_state *rs, int64_t kb, int64_t kn, float *s,
                           float *kept, float *alpha)
{
    int64_t j0 = rs->lo > kb ? rs->lo : kb;
    int64_t j1 = rs->hi < kb + kn ? rs->hi : kb + kn;
    *alpha = 1.0f;
    if (j0 >= j1 || rs->poisoned) {
        memset(s, 0, (size_t)kn * sizeof *s);
        return;
    }
    int64_t count = j1 - j0;
    float *sv = s + (j0 - kb);
    memset(s, 0, (size_t)(j0 - kb) * sizeof *s);
    memset(s + (j1 - kb), 0, (size_t)(kb + kn - j1) * sizeof *s);
    lp_attn_finish_scores(a, sv, j0, count, rs->pos);
    bool finite;
    float block_max = kt->block_max(sv, count, &finite);
    if (!finite) {
        rs->poisoned = true;
        memset(sv, 0, (size_t)count * sizeof *sv);
        return;
    }
    if (kept)
        memcpy(kept + j0, sv, (size_t)count * sizeof *sv);
    if (block_max > rs->m) {
        if (rs->m != -INFINITY)
            *alpha = lp_attn_rescale(kt, rs->m, block_max);
        rs->l *= *alpha;
        rs->m = block_max;
    }
    rs->l += kt->attn_exp_sum(sv, count, rs->m); /* sv now holds the weights exp(s - m) */
}

/* Scores that are q.k times the scale and nothing else: the tiles whose rows all see a whole
 * key block take the fused softmax step. */
static bool plain_scores(const lp_attn_args *a)
{
    return a->softcap <= 0.0f && a->alibi_slope == 0.0f && !a->alibi_slopes;
}

/* Pass 1 of a block every row of the tile sees entirely (plain scores): the fused softmax step
 * over the whole score tile; a row it reports non-finite is poisoned, its weights zeroed. */
static void tile_take_block(const lp_kernel_table *kt, lp_attn_row_state *rs, int rows,
                            int64_t kn, float *S, float *alpha)
{
    LP_ASSERT(rows >= 1 && rows <= LP_ATTN_MR);
    float m[LP_ATTN_MR], l[LP_ATTN_MR];
    bool any_poisoned = false;
    for (int r = 0; r < rows; r++) {
        m[r] = rs[r].m;
        l[r] = rs[r].l;
        any_poisoned = any_poisoned || rs[r].poisoned;
    }
    unsigned bad = kt->attn_softmax(S, ATT_BK, rows, kn, m, l, alpha);
    for (int r = 0; r < rows; r++) {
        if ((bad >> r & 1u) || (any_poisoned && rs[r].poisoned)) {
            rs[r].poisoned = true;
            memset(S + r * ATT_BK, 0, sizeof(float) * ATT_BK);
            alpha[r] = 1.0f;
            continue;
        }
        rs[r].m = m[r];
        rs[r].l = l[r];
    }
}

/* Finish query row i's output: normalized, or NaN when poisoned. */
static void row_finish(const lp_kernel_table *kt, const lp_attn_args *a,
                       const lp_attn_row_state *rs, int64_t i)
{
    float *out = a->out + i * a->out_stride;
    if (rs->poisoned) {
        for (int64_t d = 0; d < a->v_dim; d++)
            out[d] = NAN;
    } else if (!lp_attn_row_empty(rs)) {
        kt->scale(out, 1.0f / rs->l, a->v_dim);
    }
}

/* Pass 2 for row r (query i) of a panel's (tile, head) slot, from the scores pass 1 kept. */
static void row_probs(const att_call *c, int64_t slot, int r, int64_t i)
{
    const lp_attn_args *a = &c->heads[slot % c->n_heads];
    lp_attn_row_probes(c->kt, a, &c->rs[slot * LP_ATTN_MR + r],
                       c->rowp + (slot * LP_ATTN_MR + r) * a->n_k, i);
}

/* The row where pass 1 keeps the finished scores of row r of a panel's (tile, head) slot
 * (t * n_heads + g); NULL: none kept. */
static float *kept_row(const att_call *c, int64_t slot, int r)
{
    return c->rowp ? c->rowp + (slot * LP_ATTN_MR + r) * c->a->n_k : NULL;
}

/* One tile of a panel: its first row, rows, and the keys any of them sees (the same for every
 * head of the group: one mask). */
typedef struct tile_span {
    int64_t i0, k_lo, k_hi;
    int rows;
} tile_span;

/* A row's scores of one key block into its kept row. A whole block is a copy of constant size,
 * which the compiler unrolls into vector moves: memcpy of a variable 256 bytes became rep movsq,
 * whose start-up cost was 1% of a probed pass. */
static void keep_scores(float *kept, const float *s, int64_t kn)
{
    if (kn == ATT_BK)
        memcpy(kept, s, ATT_BK * sizeof *s);
    else
        memcpy(kept, s, (size_t)kn * sizeof *s);
}

/* Pass 1 of tile t against the key block [kb, kb + kn), for every head of the group. */
static void tile_block(const att_call *c, int t, const tile_span *sp, int64_t kb, int64_t kn)
{
    const lp_kernel_table *kt = c->kt;
    const int64_t hd = c->a->head_dim;
    const bool keep = c->a->probs || c->a->row_stats;
    float S[LP_ATTN_MR * ATT_BK], alpha[LP_ATTN_MR];
    const lp_attn_row_state *rs0 = c->rs + (int64_t)t * c->n_heads * LP_ATTN_MR;
    bool whole = plain_scores(c->a); /* every row sees the whole block: the fused step */
    for (int r = 0; r < sp->rows && whole; r++)
        whole = rs0[r].lo <= kb && kb + kn <= rs0[r].hi;
    for (int64_t g = 0; g < c->n_heads; g++) {
        int64_t slot = t * c->n_heads + g;
        const lp_attn_args *a = &c->heads[g];
        lp_attn_row_state *rs = c->rs + slot * LP_ATTN_MR;
        tile_scores(c, c->qp + slot * LP_ATTN_MR * hd, sp->rows, kb, kn, S);
        for (int r = 0; r < sp->rows && whole && keep; r++)
            keep_scores(kept_row(c, slot, r) + kb, S + r * ATT_BK, kn);
        if (whole)
            tile_take_block(kt, rs, sp->rows, kn, S, alpha);
        else
            for (int r = 0; r < sp->rows; r++)
                row_take_block(kt, a, &rs[r], kb, kn, S + r * ATT_BK,
                               kept_row(c, slot, r), &alpha[r]);
        kt->attn_pv(S, ATT_BK, sp->rows, kn, c->v0 + (kb - c->kbase) * c->v_stride, c->v_stride,
                    alpha, a->out + sp->i0 * a->out_stride, a->out_stride, a->v_dim);
    }
}

/* A panel of up to ATT_PANEL tiles of LP_ATTN_MR query rows from i0, for every head of the
 * group: both passes. Pass 1 runs the panel's tiles and the group's heads inside the key-block
 * loop, so each packed block of K and V comes from L2 or L3 once for all of them (one tile at a
 * time reloaded every block for every tile: the two threads' K/V streams then shared the L3). */
static void query_panel(const att_call *c, int64_t i0, int64_t n_rows)
{
    const int64_t hd = c->a->head_dim;
    tile_span sp[ATT_PANEL];
    int tiles = (int)((n_rows + LP_ATTN_MR - 1) / LP_ATTN_MR);
    int64_t k_lo = c->a->n_k, k_hi = 0;
    for (int t = 0; t < tiles; t++) {
        sp[t].i0 = i0 + t * LP_ATTN_MR;
        sp[t].rows = n_rows - t * LP_ATTN_MR < LP_ATTN_MR ? (int)(n_rows - t * LP_ATTN_MR)
                                                          : LP_ATTN_MR;
        for (int64_t g = 0; g < c->n_heads; g++) {
            int64_t slot = t * c->n_heads + g;
            pack_queries(c, &c->heads[g], sp[t].i0, sp[t].rows, c->qp + slot * LP_ATTN_MR * hd);
            for (int r = 0; r < sp[t].rows; r++)
                lp_attn_row_init(&c->heads[g], sp[t].i0 + r, &c->rs[slot * LP_ATTN_MR + r]);
        }
        const lp_attn_row_state *rs0 = c->rs + (int64_t)t * c->n_heads * LP_ATTN_MR;
        sp[t].k_lo = c->a->n_k;
        sp[t].k_hi = 0;
        for (int r = 0; r < sp[t].rows; r++)
            if (rs0[r].lo < rs0[r].hi) {
                sp[t].k_lo = rs0[r].lo < sp[t].k_lo ? rs0[r].lo : sp[t].k_lo;
                sp[t].k_hi = rs0[r].hi > sp[t].k_hi ? rs0[r].hi : sp[t].k_hi;
            }
        k_lo = sp[t].k_lo < k_lo ? sp[t].k_lo : k_lo;
        k_hi = sp[t].k_hi > k_hi ? sp[t].k_hi : k_hi;
    }
    /* blocks aligned to ATT_BK from key 0: each tile sees the blocks it saw on its own */
    for (int64_t kb = k_lo / ATT_BK * ATT_BK; kb < k_hi; kb += ATT_BK)
        for (int t = 0; t < tiles; t++)
            if (kb < sp[t].k_hi && kb + ATT_BK > sp[t].k_lo)
                tile_block(c, t, &sp[t], kb, sp[t].k_hi - kb < ATT_BK ? sp[t].k_hi - kb : ATT_BK);
    for (int t = 0; t < tiles; t++)
        for (int64_t g = 0; g < c->n_heads; g++)
            for (int r = 0; r < sp[t].rows; r++)
                row_finish(c->kt, &c->heads[g], &c->rs[(t * c->n_heads + g) * LP_ATTN_MR + r],
                           sp[t].i0 + r);
    if (!c->a->probs && !c->a->row_stats)
        return;
    for (int t = 0; t < tiles; t++)
        for (int64_t g = 0; g < c->n_heads; g++)
            for (int r = 0; r < sp[t].rows; r++)
                row_probs(c, t * c->n_heads + g, r, sp[t].i0 + r);
    lp_attn_note_probed((uint64_t)(n_rows * c->n_heads));
}

static void call_free(att_call *c)
{
    free(c->rs);
    free(c->heads);
}

void lp_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n)
{
    lp_kernels_table()->f32_to_f16(src, dst, n);
}

typedef struct f16_rows_job {
    const lp_kernel_table *kt;
    const float *src;
    int64_t src_stride, rows, cols, parts;
    uint16_t *dst;
} f16_rows_job;

static void f16_rows_part(void *ctx, int64_t part)
{
    const f16_rows_job *j = ctx;
    for (int64_t r = j->rows * part / j->parts; r < j->rows * (part + 1) / j->parts; r++)
        j->kt->f32_to_f16(j->src + r * j->src_stride, j->dst + r * j->cols, j->cols);
}

void lp_f32_to_f16_rows(const float *src, int64_t src_stride, int64_t rows, int64_t cols,
                        uint16_t *dst, lp_pool *pool)
{
    int64_t threads = lp_pool_threads(pool);
    f16_rows_job job = {lp_kernels_table(), src, src_stride, rows, cols,
                        rows < threads ? rows : threads, dst};
    lp_pool_run(pool, job.parts, f16_rows_part, &job);
}

void lp_attention(const lp_attn_args *a)
{
    if (lp_attention_decode_applies(a)) {
        lp_attention_decode(a);
        return;
    }
    att_call c = {.kt = lp_kernels_table(), .a = a, .n_heads = lp_attn_group_size(a)};
    lp_attn_rows(a, &c.row_begin, &c.row_end);
    /* the keys any computed row sees */
    int64_t k_lo = a->n_k, k_hi = 0;
    for (int64_t i = c.row_begin; i < c.row_end; i++) {
        int64_t lo, hi;
        lp_mask_row_range(a->mask, a->batch, i, &lo, &hi);
        hi = hi < a->n_k ? hi : a->n_k;
        if (lo < hi) {
            k_lo = lo < k_lo ? lo : k_lo;
            k_hi = hi > k_hi ? hi : k_hi;
        }
    }
    c.kbase = k_lo < k_hi ? k_lo / ATT_BK * ATT_BK : 0;
    c.khi = k_lo < k_hi ? k_hi : 0;
    int64_t slots = c.n_heads * ATT_PANEL; /* (tile, head) pairs of a panel */
    c.rs = malloc((size_t)slots * LP_ATTN_MR * sizeof *c.rs);
    c.heads = malloc((size_t)c.n_heads * sizeof *c.heads);
    bool keep = a->probs || a->row_stats;
    int64_t n = c.khi - c.kbase, hd = a->head_dim;
    size_t kp_n = line_floats((n + LP_ATTN_NR - 1) / LP_ATTN_NR * LP_ATTN_NR * hd);
    size_t v_n = line_floats(n * a->v_dim), rows_n = line_floats(LP_ATTN_NR * hd);
    size_t qp_n = line_floats(slots * LP_ATTN_MR * hd);
    size_t kept_n = keep ? line_floats(slots * LP_ATTN_MR * a->n_k) : 0;
    float *block = thread_scratch(kp_n + v_n + rows_n + qp_n + kept_n);
    if (!c.rs || !c.heads || !block) {
        call_free(&c); /* the reference needs less */
        lp_attention_ref(a);
        return;
    }
    c.kp = block;
    c.v_conv = c.kp + kp_n;
    c.wide = c.v_conv + v_n;
    c.qp = c.wide + rows_n;
    c.rowp = keep ? c.qp + qp_n : NULL;
    call_pack(&c);
    for (int64_t g = 0; g < c.n_heads; g++)
        c.heads[g] = lp_attn_group_head(a, g);
    for (int64_t i0 = c.row_begin; i0 < c.row_end; i0 += ATT_PANEL * LP_ATTN_MR) {
        int64_t left = c.row_end - i0;
        query_panel(&c, i0, left < ATT_PANEL * LP_ATTN_MR ? left : ATT_PANEL * LP_ATTN_MR);
    }
    call_free(&c);
}
