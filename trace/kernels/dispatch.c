/* Runtime kernel dispatch: detect the CPU once, start from ref and take the best ISA it runs;
 * LP_ISA=ref|avx2 in the environment forces one. Also the public vector-kernel entry points. */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static const lp_kernel_table *active_table = &lp_kernels_ref_table;
static pthread_once_t dispatch_once = PTHREAD_ONCE_INIT;

static const char *const isa_names[LP_ISA_COUNT] = {[LP_ISA_REF] = "ref", [LP_ISA_AVX2] = "avx2"};

const char *lp_isa_name(lp_isa isa)
{
    return (unsigned)isa < LP_ISA_COUNT ? isa_names[isa] : "unknown";
}

bool lp_kernels_cpu_has(lp_isa isa)
{
    switch (isa) {
    case LP_ISA_REF:
        return true;
    case LP_ISA_AVX2:
#if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        /* F16C by CPUID leaf 1, ECX bit 29: older clang does not know the "f16c" name. AVX2
         * already implies the OS saves the ymm state (checked by __builtin_cpu_supports). */
        unsigned eax, ebx, ecx, edx;
        bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
        return false;
#endif
    default:
        return false;
    }
}

static const lp_kernel_table *table_for(lp_isa isa)
{
    switch (isa) {
    case LP_ISA_AVX2:
        return &lp_kernels_avx2_table;
    default:
        return &lp_kernels_ref_table;
    }
}

static void dispatch_init(void)
{
    lp_isa best = LP_ISA_REF;
    if (lp_kernels_cpu_has(LP_ISA_AVX2))
        best = LP_ISA_AVX2;
    const char *forced = getenv("LP_ISA");
    if (forced && *forced) {
        /* An unknown or unsupported name keeps the detected best: the trace records which ISA
         * actually ran, so a typo cannot go unnoticed. */
        for (int isa = 0; isa < LP_ISA_COUNT; isa++)
            if (strcmp(forced, isa_names[isa]) == 0 && lp_kernels_cpu_has((lp_isa)isa))
                best = (lp_isa)isa;
    }
    active_table = table_for(best);
}

const lp_kernel_table *lp_kernels_table(void)
{
    pthread_once(&dispatch_once, dispatch_init);
    return active_table;
}

lp_isa lp_kernels_isa(void) { return lp_kernels_table()->isa; }

bool lp_kernels_set_isa(lp_isa isa)
{
    pthread_once(&dispatch_once, dispatch_init);
    if ((unsigned)isa >= LP_ISA_COUNT || !lp_kernels_cpu_has(isa))
        return false;
    active_table = table_for(isa);
    return true;
}

void lp_rmsnorm(float *y, const float *x, const float *weight, int64_t n, float eps,
                bool weight_plus_one)
{
    lp_kernels_table()->rmsnorm(y, x, weight, n, eps, weight_plus_one);
}

void lp_layernorm(float *y, const float *x, const float *weight, const float *bias, int64_t n,
                  float eps)
{
    lp_kernels_table()->layernorm(y, x, weight, bias, n, eps);
}

void lp_softmax(float *x, int64_t n) { lp_kernels_table()->softmax(x, n); }

void lp_silu_mul(float *gate, const float *up, int64_t n)
{
    lp_kernels_table()->silu_mul(gate, up, n);
}

void lp_gelu_mul(float *gate, const float *up, int64_t n, bool tanh_approx)
{
    lp_kernels_table()->gelu_mul(gate, up, n, tanh_approx);
}

void lp_gelu(float *x, int64_t n, bool tanh_approx) { lp_kernels_table()->gelu(x, n, tanh_approx); }

void lp_silu(float *x, int64_t n) { lp_kernels_table()->silu(x, n); }

void lp_add(float *y, const float *x, int64_t n) { lp_kernels_table()->add(y, x, n); }

/* RoPE: cos/sin are computed once per call (one position) and shared by all heads; the angle is
 * pos * inv_freq rounded to float, as Hugging Face computes it in float32. The coefficients are
 * laid out per rotated dim so that both pair layouts rotate with plain vector multiplies. */
void lp_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
             const float *inv_freq, float attn_scale, bool adjacent_pairs)
{
    enum { CHUNK = 256 }; /* rotated dims per round; heads wider than that go in rounds */
    float c[CHUNK], s[CHUNK];
    const lp_kernel_table *kt = lp_kernels_table();
    int64_t half = rot_dim / 2;
    float pos_f = (float)pos;
    if (rot_dim <= CHUNK) {
        for (int64_t i = 0; i < half; i++) {
            float angle = pos_f * inv_freq[i];
            float cv = (float)cos((double)angle) * attn_scale;
            float sv = (float)sin((double)angle) * attn_scale;
            if (adjacent_pairs) {
                c[2 * i] = c[2 * i + 1] = cv;
                s[2 * i] = -sv;
                s[2 * i + 1] = sv;
            } else {
                c[i] = cv;
                s[i] = sv;
            }
        }
        kt->rope_rotate(x, n_heads, head_dim, rot_dim, c, s, adjacent_pairs);
        return;
    }
    /* Very wide rotations (none known today): the scalar formula, pair by pair. */
    for (int64_t h = 0; h < n_heads; h++) {
        float *head = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            float angle = pos_f * inv_freq[i];
            float cv = (float)cos((double)angle) * attn_scale;
            float sv = (float)sin((double)angle) * attn_scale;
            int64_t i0 = adjacent_pairs ? 2 * i : i, i1 = adjacent_pairs ? 2 * i + 1 : i + half;
            float x0 = head[i0], x1 = head[i1];
            head[i0] = x0 * cv - x1 * sv;
            head[i1] = x0 * sv + x1 * cv;
        }
    }
}
