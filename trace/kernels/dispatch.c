/* Runtime kernel dispatch: build each ISA's table (ref's, then the ISA's overrides), detect the
 * CPU once and take the best table it runs; LP_ISA=ref|avx2|avx512|avx512vnni in the environment
 * forces one. Also the public vector-kernel entry points. */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* One complete table per ISA, built once from ref's and the ISA's overrides. */
static lp_kernel_table tables[LP_ISA_COUNT];
static const lp_kernel_table *active_table = &lp_kernels_ref_table;
static pthread_once_t dispatch_once = PTHREAD_ONCE_INIT;

static const char *const isa_names[LP_ISA_COUNT] = {
    [LP_ISA_REF] = "ref", [LP_ISA_AVX2] = "avx2", [LP_ISA_AVX512] = "avx512",
    [LP_ISA_AVX512_VNNI] = "avx512vnni"};

/* What each ISA changes in its parent's table; ref itself changes nothing. */
static const lp_kernel_table *const isa_overrides[LP_ISA_COUNT] = {
    [LP_ISA_AVX2] = &lp_kernels_avx2_overrides,
    [LP_ISA_AVX512] = &lp_kernels_avx512_overrides,
    [LP_ISA_AVX512_VNNI] = &lp_kernels_avx512_vnni_overrides,
};
/* The table each ISA starts from: AVX-512 keeps every AVX2 kernel it does not replace, VNNI
 * every AVX-512 one (its GEMM included). */
static const lp_isa isa_parents[LP_ISA_COUNT] = {
    [LP_ISA_REF] = LP_ISA_REF, [LP_ISA_AVX2] = LP_ISA_REF, [LP_ISA_AVX512] = LP_ISA_AVX2,
    [LP_ISA_AVX512_VNNI] = LP_ISA_AVX512};

const char *lp_isa_name(lp_isa isa)
{
    return (unsigned)isa < LP_ISA_COUNT ? isa_names[isa] : "unknown";
}

static bool os_saves_zmm(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) /* OSXSAVE */
        return false;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    return (xcr0_lo & 0xe6u) == 0xe6u;
#else
    return false;
#endif
}

/* AVX512BW and AVX512VL (CPUID leaf 7 EBX bits 30, 31) and AVX512_VNNI (ECX bit 11), read from
 * CPUID rather than by __builtin_cpu_supports, whose feature names older compilers lack. */
static bool cpu_has_avx512_vnni(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
        return false;
    return (ebx >> 30 & 1u) && (ebx >> 31 & 1u) && (ecx >> 11 & 1u);
#else
    return false;
#endif
}

static bool cpu_has(lp_isa isa)
{
    switch (isa) {
    case LP_ISA_REF:
        return true;
    case LP_ISA_AVX2:
#if defined(__x86_64__) || defined(__i386__)
    {
        __builtin_cpu_init();
        /* F16C by CPUID leaf 1, ECX bit 29: older clang does not know the "f16c" name. AVX2
         * already implies the OS saves the ymm state (checked by __builtin_cpu_supports). */
        unsigned eax, ebx, ecx, edx;
        bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    }
#else
        return false;
#endif
    case LP_ISA_AVX512:
        /* the CPU's AVX-512F, and the OS saving the opmask and zmm state (XCR0 bits 5-7, with
         * the SSE and AVX state of bits 1-2): a kernel using zmm registers on an OS that does
         * not save them would corrupt other threads' vectors */
        return cpu_has(LP_ISA_AVX2) && __builtin_cpu_supports("avx512f") && os_saves_zmm();
    case LP_ISA_AVX512_VNNI: /* the zmm state check comes with AVX-512F's */
        return cpu_has(LP_ISA_AVX512) && cpu_has_avx512_vnni();
    default:
        return false;
    }
}

void lp_kernels_override(lp_kernel_table *table, const lp_kernel_table *overrides)
{
    table->isa = overrides->isa;
    if (overrides->gemm.ukernel)
        table->gemm = overrides->gemm;
#define LP_TAKE_SLOT(slot)                                                                         \
    if (overrides->slot)                                                                           \
        table->slot = overrides->slot;
    LP_KERNEL_SLOTS(LP_TAKE_SLOT)
#undef LP_TAKE_SLOT
}

const char *lp_kernels_missing_slot(const lp_kernel_table *t)
{
    const lp_gemm_config *g = &t->gemm;
    if (!g->ukernel || !g->pack_a || !g->pack_b)
        return "gemm";
    if (g->mr <= 0 || g->nr <= 0 || g->mc <= 0 || g->nc <= 0 || g->kc <= 0 || g->kc % 256 != 0)
        return "gemm block sizes";
#define LP_CHECK_SLOT(slot)                                                                        \
    if (!t->slot)                                                                                  \
        return #slot;
    LP_KERNEL_SLOTS(LP_CHECK_SLOT)
#undef LP_CHECK_SLOT
    return NULL;
}

static void build_tables(void)
{
    for (int isa = 0; isa < LP_ISA_COUNT; isa++) { /* parents come first in the enum */
        tables[isa] = isa == LP_ISA_REF ? lp_kernels_ref_table : tables[isa_parents[isa]];
        if (isa_overrides[isa])
            lp_kernels_override(&tables[isa], isa_overrides[isa]);
        LP_ASSERT(tables[isa].isa == (lp_isa)isa && !lp_kernels_missing_slot(&tables[isa]));
    }
}

static void dispatch_init(void)
{
    build_tables();
    lp_isa best = LP_ISA_REF;
    for (int isa = 0; isa < LP_ISA_COUNT; isa++) /* later ISAs are wider */
        if (cpu_has((lp_isa)isa))
            best = (lp_isa)isa;
    const char *forced = getenv("LP_ISA");
    if (forced && *forced) {
        /* An unknown or unsupported name keeps the detected best: the trace records which ISA
         * actually ran, so a typo cannot go unnoticed. */
        for (int isa = 0; isa < LP_ISA_COUNT; isa++)
            if (strcmp(forced, isa_names[isa]) == 0 && cpu_has((lp_isa)isa))
                best = (lp_isa)isa;
    }
    active_table = &tables[best];
}

const lp_kernel_table *lp_kernels_table(void)
{
    pthread_once(&dispatch_once, dispatch_init);
    return active_table;
}

const lp_kernel_table *lp_kernels_table_for(lp_isa isa)
{
    pthread_once(&dispatch_once, dispatch_init);
    return (unsigned)isa < LP_ISA_COUNT ? &tables[isa] : NULL;
}

lp_isa lp_kernels_isa(void) { return lp_kernels_table()->isa; }

bool lp_kernels_set_isa(lp_isa isa)
{
    pthread_once(&dispatch_once, dispatch_init);
    if ((unsigned)isa >= LP_ISA_COUNT || !cpu_has(isa))
        return false;
    active_table = &tables[isa];
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

/* RoPE: cos/sin are computed once per call (one position) and shared by all heads. The
 * coefficients are laid out per rotated dim so that both pair layouts rotate with plain vector
 * multiplies; rotations wider than the buffer go pair by pair through ref's formula. */
void lp_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
             const float *inv_freq, float attn_scale, bool adjacent_pairs)
{
    enum { MAX_ROT = 256 };
    if (rot_dim > MAX_ROT) {
        lp_rope_ref(x, n_heads, head_dim, rot_dim, pos, inv_freq, attn_scale, adjacent_pairs);
        return;
    }
    float c[MAX_ROT], s[MAX_ROT];
    for (int64_t i = 0; i < rot_dim / 2; i++) {
        float cv, sv;
        lp_rope_coeff((float)pos, inv_freq[i], attn_scale, &cv, &sv);
        if (adjacent_pairs) {
            c[2 * i] = c[2 * i + 1] = cv;
            s[2 * i] = -sv;
            s[2 * i + 1] = sv;
        } else {
            c[i] = cv;
            s[i] = sv;
        }
    }
    lp_kernels_table()->rope_rotate(x, n_heads, head_dim, rot_dim, c, s, adjacent_pairs);
}
