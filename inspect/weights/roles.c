/* Tensor name -> canonical role, for Hugging Face names of every supported family, GGUF's
 * llama.cpp names and the names loupe gives llama2.c's tensors. */
#include "inspect/weights/weights_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/names.h"

static const lp_name_entry role_names[] = {
    {LP_ROLE_UNKNOWN, "unknown"},
    {LP_ROLE_TOKEN_EMBD, "token_embd"},
    {LP_ROLE_POS_EMBD, "pos_embd"},
    {LP_ROLE_EMBD_NORM, "embd_norm"},
    {LP_ROLE_ATTN_NORM, "attn_norm"},
    {LP_ROLE_ATTN_Q, "attn_q"},
    {LP_ROLE_ATTN_K, "attn_k"},
    {LP_ROLE_ATTN_V, "attn_v"},
    {LP_ROLE_ATTN_QKV, "attn_qkv"},
    {LP_ROLE_ATTN_O, "attn_o"},
    {LP_ROLE_ATTN_Q_NORM, "attn_q_norm"},
    {LP_ROLE_ATTN_K_NORM, "attn_k_norm"},
    {LP_ROLE_ATTN_POST_NORM, "attn_post_norm"},
    {LP_ROLE_ATTN_Q_A, "attn_q_a"},
    {LP_ROLE_ATTN_Q_A_NORM, "attn_q_a_norm"},
    {LP_ROLE_ATTN_Q_B, "attn_q_b"},
    {LP_ROLE_ATTN_KV_A, "attn_kv_a"},
    {LP_ROLE_ATTN_KV_A_NORM, "attn_kv_a_norm"},
    {LP_ROLE_ATTN_KV_B, "attn_kv_b"},
    {LP_ROLE_ATTN_K_B, "attn_k_b"},
    {LP_ROLE_ATTN_V_B, "attn_v_b"},
    {LP_ROLE_ATTN_SINKS, "attn_sinks"},
    {LP_ROLE_FFN_NORM, "ffn_norm"},
    {LP_ROLE_FFN_GATE, "ffn_gate"},
    {LP_ROLE_FFN_UP, "ffn_up"},
    {LP_ROLE_FFN_GATE_UP, "ffn_gate_up"},
    {LP_ROLE_FFN_DOWN, "ffn_down"},
    {LP_ROLE_FFN_POST_NORM, "ffn_post_norm"},
    {LP_ROLE_ROUTER, "router"},
    {LP_ROLE_ROUTER_BIAS, "router_bias"},
    {LP_ROLE_EXPERT_GATE, "expert_gate"},
    {LP_ROLE_EXPERT_UP, "expert_up"},
    {LP_ROLE_EXPERT_DOWN, "expert_down"},
    {LP_ROLE_EXPERT_GATE_UP, "expert_gate_up"},
    {LP_ROLE_SHARED_GATE, "shared_gate"},
    {LP_ROLE_SHARED_UP, "shared_up"},
    {LP_ROLE_SHARED_DOWN, "shared_down"},
    {LP_ROLE_SHARED_EXPERT_GATE, "shared_expert_gate"},
    {LP_ROLE_OUTPUT_NORM, "output_norm"},
    {LP_ROLE_LM_HEAD, "lm_head"},
    {LP_ROLE_EMBD_PROJ_IN, "embd_proj_in"},
    {LP_ROLE_EMBD_PROJ_OUT, "embd_proj_out"},
    {LP_ROLE_ROPE_FREQS, "rope_freqs"},
    {LP_ROLE_ATTN_MASK_BUFFER, "attn_mask_buffer"},
};

LP_NAMES_DEFINE_WORD(lp_role_name, lp_role, role_names, "unknown")

bool lp_role_is_buffer(lp_role role)
{
    return role == LP_ROLE_ROPE_FREQS || role == LP_ROLE_ATTN_MASK_BUFFER;
}

typedef struct name_role {
    const char *name;
    lp_role role;
} name_role;

static lp_role lookup(const name_role *table, const char *name)
{
    for (size_t i = 0; table[i].name; i++)
        if (strcmp(table[i].name, name) == 0)
            return table[i].role;
    return LP_ROLE_UNKNOWN;
}

/* Parse a non-negative decimal component of at most 9 digits (enough for any layer or expert
 * index); -1 otherwise. */
static int parse_index(const char *s, size_t len)
{
    if (len == 0 || len > 9)
        return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* ---- GGUF (llama.cpp's LLM_TENSOR_NAMES) ------------------------------------------------- */

static const name_role gguf_global[] = {
    {"token_embd", LP_ROLE_TOKEN_EMBD},     {"position_embd", LP_ROLE_POS_EMBD},
    {"token_embd_norm", LP_ROLE_EMBD_NORM}, {"output_norm", LP_ROLE_OUTPUT_NORM},
    {"output", LP_ROLE_LM_HEAD},            {"rope_freqs", LP_ROLE_ROPE_FREQS},
    {NULL, LP_ROLE_UNKNOWN},
};

static const name_role gguf_layer[] = {
    {"attn_norm", LP_ROLE_ATTN_NORM},
    {"attn_norm_2", LP_ROLE_FFN_NORM}, /* Falcon new_decoder_architecture's ln_mlp */
    {"attn_q", LP_ROLE_ATTN_Q},
    {"attn_k", LP_ROLE_ATTN_K},
    {"attn_v", LP_ROLE_ATTN_V},
    {"attn_qkv", LP_ROLE_ATTN_QKV},
    {"attn_output", LP_ROLE_ATTN_O},
    {"attn_q_norm", LP_ROLE_ATTN_Q_NORM},
    {"attn_k_norm", LP_ROLE_ATTN_K_NORM},
    {"post_attention_norm", LP_ROLE_ATTN_POST_NORM},
    {"attn_post_norm", LP_ROLE_ATTN_POST_NORM},
    {"attn_q_a", LP_ROLE_ATTN_Q_A},
    {"attn_q_a_norm", LP_ROLE_ATTN_Q_A_NORM},
    {"attn_q_b", LP_ROLE_ATTN_Q_B},
    {"attn_kv_a_mqa", LP_ROLE_ATTN_KV_A},
    {"attn_kv_a_norm", LP_ROLE_ATTN_KV_A_NORM},
    {"attn_kv_b", LP_ROLE_ATTN_KV_B},
    {"attn_k_b", LP_ROLE_ATTN_K_B},
    {"attn_v_b", LP_ROLE_ATTN_V_B},
    {"attn_sinks", LP_ROLE_ATTN_SINKS},
    {"attn_rot_embd", LP_ROLE_ROPE_FREQS},
    {"ffn_norm", LP_ROLE_FFN_NORM},
    {"ffn_gate", LP_ROLE_FFN_GATE},
    {"ffn_up", LP_ROLE_FFN_UP},
    {"ffn_down", LP_ROLE_FFN_DOWN},
    {"post_ffw_norm", LP_ROLE_FFN_POST_NORM},
    {"ffn_gate_inp", LP_ROLE_ROUTER},
    {"exp_probs_b", LP_ROLE_ROUTER_BIAS},
    /* all experts of a layer in one 3-D tensor [n_experts, rows, cols]: expert stays -1 */
    {"ffn_gate_exps", LP_ROLE_EXPERT_GATE},
    {"ffn_up_exps", LP_ROLE_EXPERT_UP},
    {"ffn_down_exps", LP_ROLE_EXPERT_DOWN},
    {"ffn_gate_up_exps", LP_ROLE_EXPERT_GATE_UP},
    {"ffn_gate_shexp", LP_ROLE_SHARED_GATE},
    {"ffn_up_shexp", LP_ROLE_SHARED_UP},
    {"ffn_down_shexp", LP_ROLE_SHARED_DOWN},
    {"ffn_gate_inp_shexp", LP_ROLE_SHARED_EXPERT_GATE},
    {NULL, LP_ROLE_UNKNOWN},
};

/* Legacy per-expert GGUF names: blk.N.ffn_gate.E */
static const name_role gguf_expert[] = {
    {"ffn_gate", LP_ROLE_EXPERT_GATE},
    {"ffn_up", LP_ROLE_EXPERT_UP},
    {"ffn_down", LP_ROLE_EXPERT_DOWN},
    {NULL, LP_ROLE_UNKNOWN},
};

/* ---- llama2.c (the names loupe gives its stacked tables, after run.c's struct fields) ------ */

static const name_role llama2c_global[] = {
    {"token_embedding_table", LP_ROLE_TOKEN_EMBD},
    {"rms_final_weight", LP_ROLE_OUTPUT_NORM},
    {"wcls", LP_ROLE_LM_HEAD},
    {"freq_cis_real", LP_ROLE_ROPE_FREQS},
    {"freq_cis_imag", LP_ROLE_ROPE_FREQS},
    {NULL, LP_ROLE_UNKNOWN},
};

static const name_role llama2c_layer[] = {
    {"rms_att_weight", LP_ROLE_ATTN_NORM}, {"wq", LP_ROLE_ATTN_Q},
    {"wk", LP_ROLE_ATTN_K},                {"wv", LP_ROLE_ATTN_V},
    {"wo", LP_ROLE_ATTN_O},                {"rms_ffn_weight", LP_ROLE_FFN_NORM},
    {"w1", LP_ROLE_FFN_GATE},              {"w2", LP_ROLE_FFN_DOWN},
    {"w3", LP_ROLE_FFN_UP},                {NULL, LP_ROLE_UNKNOWN},
};

/* ---- Hugging Face ---------------------------------------------------------------------------
 * Global names are matched on the path after the last known prefix ("model.", "transformer.",
 * "model.decoder.", ...); layer names on the part after "<layers|h|blocks>.N.". */

static const name_role hf_global[] = {
    {"embed_tokens", LP_ROLE_TOKEN_EMBD},      /* llama-style, opt */
    {"embed_in", LP_ROLE_TOKEN_EMBD},          /* gpt-neox */
    {"wte", LP_ROLE_TOKEN_EMBD},               /* gpt2 */
    {"word_embeddings", LP_ROLE_TOKEN_EMBD},   /* bloom, falcon */
    {"embed_positions", LP_ROLE_POS_EMBD},     /* opt */
    {"project_in", LP_ROLE_EMBD_PROJ_IN},      /* opt: word_embed_proj_dim -> hidden */
    {"project_out", LP_ROLE_EMBD_PROJ_OUT},    /* opt: hidden -> word_embed_proj_dim */
    {"wpe", LP_ROLE_POS_EMBD},                 /* gpt2 */
    {"word_embeddings_layernorm", LP_ROLE_EMBD_NORM}, /* bloom */
    {"norm", LP_ROLE_OUTPUT_NORM},             /* llama-style */
    {"ln_f", LP_ROLE_OUTPUT_NORM},             /* gpt2, bloom, falcon */
    {"final_layernorm", LP_ROLE_OUTPUT_NORM},  /* phi */
    {"final_layer_norm", LP_ROLE_OUTPUT_NORM}, /* opt (outside the layers) */
    {"norm_f", LP_ROLE_OUTPUT_NORM},           /* mpt */
    {"lm_head", LP_ROLE_LM_HEAD},
    {"embed_out", LP_ROLE_LM_HEAD},            /* gpt-neox */
    {NULL, LP_ROLE_UNKNOWN},
};

static const name_role hf_layer[] = {
    /* norms (post_attention_layernorm is handled by family, see below) */
    {"input_layernorm", LP_ROLE_ATTN_NORM},
    {"ln_1", LP_ROLE_ATTN_NORM},
    {"ln_2", LP_ROLE_FFN_NORM},
    {"ln_attn", LP_ROLE_ATTN_NORM},          /* falcon new_decoder_architecture */
    {"ln_mlp", LP_ROLE_FFN_NORM},
    {"norm_1", LP_ROLE_ATTN_NORM},           /* mpt */
    {"norm_2", LP_ROLE_FFN_NORM},
    {"self_attn_layer_norm", LP_ROLE_ATTN_NORM}, /* opt */
    {"final_layer_norm", LP_ROLE_FFN_NORM},  /* opt: inside a layer it is the FFN's norm */
    {"pre_feedforward_layernorm", LP_ROLE_FFN_NORM},       /* gemma 2/3 */
    {"post_feedforward_layernorm", LP_ROLE_FFN_POST_NORM}, /* gemma 2/3, olmo2 */
    /* attention */
    {"self_attn.q_proj", LP_ROLE_ATTN_Q},
    {"self_attn.k_proj", LP_ROLE_ATTN_K},
    {"self_attn.v_proj", LP_ROLE_ATTN_V},
    {"self_attn.o_proj", LP_ROLE_ATTN_O},
    {"self_attn.out_proj", LP_ROLE_ATTN_O},  /* opt */
    {"self_attn.dense", LP_ROLE_ATTN_O},     /* phi */
    {"self_attn.qkv_proj", LP_ROLE_ATTN_QKV}, /* phi3 */
    {"self_attn.q_norm", LP_ROLE_ATTN_Q_NORM},
    {"self_attn.k_norm", LP_ROLE_ATTN_K_NORM},
    {"self_attn.q_layernorm", LP_ROLE_ATTN_Q_NORM}, /* stablelm qk_layernorm, persimmon */
    {"self_attn.k_layernorm", LP_ROLE_ATTN_K_NORM},
    {"self_attn.q_a_proj", LP_ROLE_ATTN_Q_A}, /* deepseek MLA */
    {"self_attn.q_a_layernorm", LP_ROLE_ATTN_Q_A_NORM},
    {"self_attn.q_b_proj", LP_ROLE_ATTN_Q_B},
    {"self_attn.kv_a_proj_with_mqa", LP_ROLE_ATTN_KV_A},
    {"self_attn.kv_a_layernorm", LP_ROLE_ATTN_KV_A_NORM},
    {"self_attn.kv_b_proj", LP_ROLE_ATTN_KV_B},
    {"self_attn.sinks", LP_ROLE_ATTN_SINKS}, /* gpt-oss */
    {"self_attn.rotary_emb.inv_freq", LP_ROLE_ROPE_FREQS},
    {"attn.c_attn", LP_ROLE_ATTN_QKV},       /* gpt2 Conv1D */
    {"attn.c_proj", LP_ROLE_ATTN_O},
    {"attn.masked_bias", LP_ROLE_ATTN_MASK_BUFFER},
    {"self_attention.query_key_value", LP_ROLE_ATTN_QKV}, /* bloom, falcon */
    {"self_attention.dense", LP_ROLE_ATTN_O},
    {"attention.query_key_value", LP_ROLE_ATTN_QKV}, /* gpt-neox */
    {"attention.dense", LP_ROLE_ATTN_O},
    {"attention.rotary_emb.inv_freq", LP_ROLE_ROPE_FREQS},
    {"attention.masked_bias", LP_ROLE_ATTN_MASK_BUFFER},
    {"attn.q_proj", LP_ROLE_ATTN_Q},         /* gpt-j */
    {"attn.k_proj", LP_ROLE_ATTN_K},
    {"attn.v_proj", LP_ROLE_ATTN_V},
    {"attn.out_proj", LP_ROLE_ATTN_O},       /* gpt-j, mpt */
    {"attn.Wqkv", LP_ROLE_ATTN_QKV},         /* mpt: rows q | k | v */
    {"attn.q_ln", LP_ROLE_ATTN_Q_NORM},      /* mpt qk_ln: over the whole projection */
    {"attn.k_ln", LP_ROLE_ATTN_K_NORM},
    /* dense FFN */
    {"mlp.gate_proj", LP_ROLE_FFN_GATE},
    {"mlp.up_proj", LP_ROLE_FFN_UP},
    {"mlp.down_proj", LP_ROLE_FFN_DOWN},
    {"mlp.gate_up_proj", LP_ROLE_FFN_GATE_UP}, /* phi3 */
    {"mlp.fc1", LP_ROLE_FFN_UP},             /* phi */
    {"mlp.fc2", LP_ROLE_FFN_DOWN},
    {"fc1", LP_ROLE_FFN_UP},                 /* opt */
    {"fc2", LP_ROLE_FFN_DOWN},
    {"mlp.c_fc", LP_ROLE_FFN_UP},            /* gpt2 Conv1D */
    {"mlp.c_proj", LP_ROLE_FFN_DOWN},
    {"mlp.dense_h_to_4h", LP_ROLE_FFN_UP},   /* bloom, falcon */
    {"mlp.dense_4h_to_h", LP_ROLE_FFN_DOWN},
    {"mlp.fc_in", LP_ROLE_FFN_UP},           /* gpt-j */
    {"mlp.fc_out", LP_ROLE_FFN_DOWN},
    {"ffn.up_proj", LP_ROLE_FFN_UP},         /* mpt */
    {"ffn.down_proj", LP_ROLE_FFN_DOWN},
    /* MoE */
    {"block_sparse_moe.gate", LP_ROLE_ROUTER}, /* mixtral */
    {"mlp.gate", LP_ROLE_ROUTER},              /* qwen2_moe, qwen3_moe, deepseek */
    {"mlp.gate.e_score_correction_bias", LP_ROLE_ROUTER_BIAS}, /* deepseek v3 */
    {"mlp.shared_expert.gate_proj", LP_ROLE_SHARED_GATE},      /* qwen moe */
    {"mlp.shared_expert.up_proj", LP_ROLE_SHARED_UP},
    {"mlp.shared_expert.down_proj", LP_ROLE_SHARED_DOWN},
    {"mlp.shared_expert_gate", LP_ROLE_SHARED_EXPERT_GATE},
    {"mlp.shared_experts.gate_proj", LP_ROLE_SHARED_GATE},     /* deepseek */
    {"mlp.shared_experts.up_proj", LP_ROLE_SHARED_UP},
    {"mlp.shared_experts.down_proj", LP_ROLE_SHARED_DOWN},
    /* gpt-oss: every expert of the layer in one [n_experts, in, out] tensor, gate and up
     * interleaved in gate_up_proj's last dimension */
    {"mlp.router", LP_ROLE_ROUTER},
    {"mlp.experts.gate_up_proj", LP_ROLE_EXPERT_GATE_UP},
    {"mlp.experts.down_proj", LP_ROLE_EXPERT_DOWN},
    {NULL, LP_ROLE_UNKNOWN},
};

/* The part after "experts.E." (mixtral's w1/w2/w3, everyone else's *_proj). */
static const name_role hf_expert[] = {
    {"w1", LP_ROLE_EXPERT_GATE},        {"w3", LP_ROLE_EXPERT_UP},
    {"w2", LP_ROLE_EXPERT_DOWN},        {"gate_proj", LP_ROLE_EXPERT_GATE},
    {"up_proj", LP_ROLE_EXPERT_UP},     {"down_proj", LP_ROLE_EXPERT_DOWN},
    {"gate_up_proj", LP_ROLE_EXPERT_GATE_UP}, {NULL, LP_ROLE_UNKNOWN},
};

/* Families whose "post_attention_layernorm" normalizes the attention output (a post norm)
 * instead of being the FFN's input norm as in Llama. */
static bool post_attention_is_post_norm(const char *family)
{
    static const char *const families[] = {"gemma2", "gemma3", "gemma3_text", "olmo2", NULL};
    for (size_t i = 0; families[i]; i++)
        if (strcmp(family, families[i]) == 0)
            return true;
    return false;
}

/* Copy name into buf without its ".weight"/".bias" suffix; sets *is_bias. False if too long. */
static bool strip_suffix(const char *name, char *buf, size_t size, bool *is_bias)
{
    size_t len = strlen(name);
    if (len + 1 > size)
        return false;
    memcpy(buf, name, len + 1);
    *is_bias = false;
    if (len > 7 && strcmp(buf + len - 7, ".weight") == 0)
        buf[len - 7] = '\0';
    else if (len > 5 && strcmp(buf + len - 5, ".bias") == 0) {
        buf[len - 5] = '\0';
        *is_bias = true;
    } else if (len > 10 && strcmp(buf + len - 10, "_proj_bias") == 0) {
        buf[len - 5] = '\0'; /* gpt-oss's experts.gate_up_proj_bias, experts.down_proj_bias */
        *is_bias = true;
    }
    return true;
}

/* Find "<marker>.N." in base (marker one of the given words, at a component boundary); returns
 * the pointer just past it and sets *index, or NULL. */
static const char *find_indexed(const char *base, const char *const *markers, int *index)
{
    for (const char *p = base; *p; p++) {
        if (p != base && p[-1] != '.')
            continue;
        for (size_t m = 0; markers[m]; m++) {
            size_t ml = strlen(markers[m]);
            if (strncmp(p, markers[m], ml) != 0 || p[ml] != '.')
                continue;
            const char *digits = p + ml + 1;
            const char *end = strchr(digits, '.');
            size_t dl = end ? (size_t)(end - digits) : strlen(digits);
            int v = parse_index(digits, dl);
            if (v < 0)
                continue;
            *index = v;
            return end ? end + 1 : digits + dl;
        }
    }
    return NULL;
}

/* Names of the form "<marker>.N.rest" (a layer's tensor, rest looked up in `layer`) or anything
 * else (looked up whole in `global`); returns rest, or NULL for a global tensor. */
static const char *assign_indexed(lp_tensor *t, const char *base, const char *marker,
                                  const name_role *global, const name_role *layer)
{
    const char *const markers[] = {marker, NULL};
    const char *rest = find_indexed(base, markers, &t->layer);
    t->role = lookup(rest ? layer : global, rest ? rest : base);
    return rest;
}

static void assign_gguf(lp_tensor *t, const char *base, const char *family)
{
    const char *rest = assign_indexed(t, base, "blk", gguf_global, gguf_layer);
    /* llama.cpp's gpt-oss keeps Hugging Face's post_attention_layernorm, the FFN's input norm
     * there, under Gemma 2's name for a true post norm (its graph feeds it to the MoE) */
    if (rest && t->role == LP_ROLE_ATTN_POST_NORM && strcmp(family, "gpt_oss") == 0 &&
        strcmp(rest, "post_attention_norm") == 0)
        t->role = LP_ROLE_FFN_NORM;
    if (!rest || t->role != LP_ROLE_UNKNOWN)
        return;
    /* blk.N.ffn_gate.E: one expert per tensor (early Mixtral GGUFs) */
    const char *dot = strrchr(rest, '.');
    if (dot) {
        int e = parse_index(dot + 1, strlen(dot + 1));
        char head[64];
        size_t hl = (size_t)(dot - rest);
        if (e >= 0 && hl < sizeof head) {
            memcpy(head, rest, hl);
            head[hl] = '\0';
            t->role = lookup(gguf_expert, head);
            if (t->role != LP_ROLE_UNKNOWN)
                t->expert = e;
        }
    }
}

static void assign_hf(lp_tensor *t, const char *base, const char *family, bool is_bias)
{
    static const char *const layers[] = {"layers", "h", "blocks", "block", NULL};
    static const char *const experts[] = {"experts", NULL};
    int layer;
    const char *rest = find_indexed(base, layers, &layer);
    if (!rest) {
        /* global: the last component, whatever prefix ("model.", "transformer.", ...) */
        const char *last = strrchr(base, '.');
        t->role = lookup(hf_global, last ? last + 1 : base);
        return;
    }
    t->layer = layer;
    if (strcmp(rest, "post_attention_layernorm") == 0) {
        t->role = post_attention_is_post_norm(family) ? LP_ROLE_ATTN_POST_NORM : LP_ROLE_FFN_NORM;
        return;
    }
    if (is_bias && (strcmp(rest, "attn") == 0 || strcmp(rest, "attention") == 0)) {
        /* GPT-2's and GPT-J's "h.N.attn.bias", old GPT-NeoX checkpoints' "attention.bias": the
         * causal-mask buffer, not a bias of anything */
        t->role = LP_ROLE_ATTN_MASK_BUFFER;
        return;
    }
    t->role = lookup(hf_layer, rest);
    if (t->role != LP_ROLE_UNKNOWN)
        return;
    int expert;
    const char *erest = find_indexed(rest, experts, &expert);
    if (erest) {
        t->role = lookup(hf_expert, erest);
        if (t->role != LP_ROLE_UNKNOWN)
            t->expert = expert;
        return;
    }
    /* StableLM's per-head q/k LayerNorms, "self_attn.q_layernorm.norms.H": the head is given
     * as the expert index */
    const char *p = strstr(rest, ".norms.");
    size_t stem = p ? (size_t)(p - rest) : 0;
    int head = p ? parse_index(p + 7, strlen(p + 7)) : -1;
    char owner[64];
    if (head >= 0 && stem < sizeof owner) {
        memcpy(owner, rest, stem);
        owner[stem] = '\0';
        lp_role r = lookup(hf_layer, owner);
        if (r == LP_ROLE_ATTN_Q_NORM || r == LP_ROLE_ATTN_K_NORM) {
            t->role = r;
            t->expert = head;
        }
    }
}

void lp_role_assign(lp_tensor *tensor, const char *family, lp_weights_format format)
{
    tensor->role = LP_ROLE_UNKNOWN;
    tensor->layer = -1;
    tensor->expert = -1;
    tensor->is_bias = false;
    tensor->transposed = false;
    char base[512];
    bool is_bias = false;
    if (!tensor->name || !strip_suffix(tensor->name, base, sizeof base, &is_bias))
        return;
    if (!family)
        family = "";
    switch (format) {
    case LP_FORMAT_GGUF: assign_gguf(tensor, base, family); break;
    case LP_FORMAT_LLAMA2C:
        assign_indexed(tensor, base, "layers", llama2c_global, llama2c_layer);
        break;
    default: assign_hf(tensor, base, family, is_bias); break;
    }
    if (tensor->role == LP_ROLE_UNKNOWN) {
        tensor->layer = -1;
        tensor->expert = -1;
        return;
    }
    /* gpt2's attn.bias is a mask buffer, whatever its suffix says */
    tensor->is_bias = is_bias && !lp_role_is_buffer(tensor->role);
    /* GPT-2's Conv1D weights are stored [in, out] (HF only; GGUF transposes them back).
     * gpt_bigcode and starcoder2 reuse the c_attn/c_proj/c_fc names for ordinary Linear layers,
     * so only gpt2 (or weights without a config, whose names are all we have) count. */
    /* gpt-oss's stacked experts are [n_experts, in, out] (x @ W in transformers) */
    if (format == LP_FORMAT_SAFETENSORS && strcmp(family, "gpt_oss") == 0 && !tensor->is_bias &&
        (tensor->role == LP_ROLE_EXPERT_GATE_UP || tensor->role == LP_ROLE_EXPERT_DOWN))
        tensor->transposed = true;
    bool conv1d_family = family[0] == '\0' || strcmp(family, "gpt2") == 0;
    if (format == LP_FORMAT_SAFETENSORS && conv1d_family && !tensor->is_bias) {
        const char *p = strstr(base, ".c_attn");
        if (!p)
            p = strstr(base, ".c_proj");
        if (!p)
            p = strstr(base, ".c_fc");
        if (p && (tensor->role == LP_ROLE_ATTN_QKV || tensor->role == LP_ROLE_ATTN_O ||
                  tensor->role == LP_ROLE_FFN_UP || tensor->role == LP_ROLE_FFN_DOWN))
            tensor->transposed = true;
    }
}
