/* Exact parameter counts of the families whose configs loupe once read with Llama's rules, from
 * their real config.json, each with its count derived from the family's modeling code; and the
 * warning (or the --strict refusal) for a model_type loupe does not know. */
#include "test_util.h"

#include <unistd.h>

#include "estimate/estimate.h"
#include "inspect/inspect.h"

/* One family: its config.json as published and the count derived beside it. */
typedef struct family_case {
    const char *name;
    const char *config;
    int64_t total;
    int64_t llama_rules_total; /* what Llama's rules gave (the figure); 0 = not checked */
} family_case;

/* ChatGLM2-6B (THUDM/chatglm2-6b; modeling_chatglm.py, remote code). h 4096, 28 layers, 32 heads
 * of kv_channels 128, multi_query_group_num 2, ffn 13696, padded vocab 65024, untied.
 *   word_embeddings 65024 x 4096                                     =   266,338,304
 *   per layer: query_key_value 4096 x (4096 + 2 x 2 x 128) = 4096 x 4608 = 18,874,368
 *              + its bias (add_qkv_bias) 4608; dense 4096 x 4096 = 16,777,216 (no bias);
 *              dense_h_to_4h 4096 x 2 x 13696 = 112,197,632; dense_4h_to_h 13696 x 4096
 *              = 56,098,816; input_layernorm + post_attention_layernorm (RMSNorm) 8,192
 *              = 203,960,832; x 28                                   = 5,710,903,296
 *   final_layernorm 4096; output_layer 65024 x 4096                  =   266,342,400
 *   total 6,243,584,000 (matches the published 6.24B). Llama's rules (32 kv heads, 3 x 4096 x
 *   13696 FFN, no biases) gave 7,124,258,816. */
static const char CHATGLM2[] =
    "{\"_name_or_path\": \"THUDM/chatglm2-6b\", \"model_type\": \"chatglm\", \"architectures\": "
    "[\"ChatGLMModel\"], \"add_bias_linear\": false, \"add_qkv_bias\": true, "
    "\"apply_query_key_layer_scaling\": true, \"apply_residual_connection_post_layernorm\": false, "
    "\"attention_dropout\": 0.0, \"attention_softmax_in_fp32\": true, \"bias_dropout_fusion\": "
    "true, \"ffn_hidden_size\": 13696, \"fp32_residual_connection\": false, \"hidden_dropout\": "
    "0.0, \"hidden_size\": 4096, \"kv_channels\": 128, \"layernorm_epsilon\": 1e-05, "
    "\"multi_query_attention\": true, \"multi_query_group_num\": 2, \"num_attention_heads\": 32, "
    "\"num_layers\": 28, \"original_rope\": true, \"padded_vocab_size\": 65024, "
    "\"post_layer_norm\": true, \"rmsnorm\": true, \"seq_length\": 32768, \"use_cache\": true, "
    "\"torch_dtype\": \"float16\", \"transformers_version\": \"4.27.1\", \"tie_word_embeddings\": "
    "false, \"eos_token_id\": 2, \"pad_token_id\": 0}";

/* Qwen-1.8B (Qwen/Qwen-1_8B; modeling_qwen.py, remote code). h 2048, 24 layers, 16 heads of 128,
 * intermediate_size 11008 = twice the MLP width (QWenMLP: w1, w2 = Linear(h, 11008 // 2)).
 *   wte 151936 x 2048                                                =   311,164,928
 *   per layer: c_attn 2048 x 6144 = 12,582,912 + bias 6,144 (always); c_proj 2048 x 2048
 *              = 4,194,304 (no_bias); w1, w2 2 x 2048 x 5504 = 22,544,384; mlp.c_proj 5504 x
 *              2048 = 11,272,192; ln_1, ln_2 (RMSNorm) 4,096 = 50,604,032; x 24 = 1,214,496,768
 *   ln_f 2048; lm_head 151936 x 2048                                 =   311,166,976
 *   total 1,836,828,672. Llama's rules (SwiGLU of 11008, no bias) gave 2,648,279,040. */
static const char QWEN_1_8B[] =
    "{\"architectures\": [\"QWenLMHeadModel\"], \"attn_dropout_prob\": 0.0, \"bf16\": false, "
    "\"emb_dropout_prob\": 0.0, \"fp16\": false, \"fp32\": false, \"hidden_size\": 2048, "
    "\"initializer_range\": 0.02, \"intermediate_size\": 11008, \"kv_channels\": 128, "
    "\"layer_norm_epsilon\": 1e-06, \"max_position_embeddings\": 8192, \"model_type\": \"qwen\", "
    "\"no_bias\": true, \"num_attention_heads\": 16, \"num_hidden_layers\": 24, \"onnx_safe\": "
    "null, \"rotary_emb_base\": 10000, \"rotary_pct\": 1.0, \"scale_attn_weights\": true, "
    "\"seq_length\": 8192, \"tie_word_embeddings\": false, \"tokenizer_class\": "
    "\"QWenTokenizer\", \"transformers_version\": \"4.32.0\", \"use_cache\": true, "
    "\"use_dynamic_ntk\": true, \"use_flash_attn\": \"auto\", \"use_logn_attn\": true, "
    "\"vocab_size\": 151936}";

/* Aya-23-8B (CohereForAI/aya-23-8B; transformers' modeling_cohere.py). h 4096, 32 layers, 32
 * heads / 8 kv heads of 128, SwiGLU 14336, tied (CohereConfig's default), one weight-only
 * CohereLayerNorm per layer feeding attention and MLP in parallel, use_qk_norm false.
 *   embed_tokens 256000 x 4096                                       = 1,048,576,000
 *   per layer: q, o 2 x 16,777,216 + k, v 2 x 4,194,304 = 41,943,040; MLP 3 x 4096 x 14336
 *              = 176,160,768; input_layernorm 4,096 = 218,107,904; x 32 = 6,979,452,928
 *   norm 4096; lm_head tied                                          =         4,096
 *   total 8,028,033,024. Llama's rules (untied, two norms) gave 9,076,740,096. */
static const char AYA_23_8B[] =
    "{\"architectures\": [\"CohereForCausalLM\"], \"attention_bias\": false, "
    "\"attention_dropout\": 0.0, \"bos_token_id\": 5, \"eos_token_id\": 255001, \"hidden_act\": "
    "\"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336, "
    "\"layer_norm_eps\": 1e-05, \"logit_scale\": 0.0625, \"max_position_embeddings\": 8192, "
    "\"model_type\": \"cohere\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32, "
    "\"num_key_value_heads\": 8, \"pad_token_id\": 0, \"rope_theta\": 10000, \"torch_dtype\": "
    "\"float16\", \"transformers_version\": \"4.40.0.dev0\", \"use_cache\": true, "
    "\"use_qk_norm\": false, \"vocab_size\": 256000}";

/* SantaCoder (bigcode/gpt_bigcode-santacoder; transformers' modeling_gpt_bigcode.py). h 2048,
 * 24 layers, 16 heads of 128 with one shared k/v head (multi_query), n_inner 8192, learned
 * positions 2048, LayerNorm with bias, biases everywhere, tied.
 *   wte 49280 x 2048 = 100,925,440; wpe 2048 x 2048                  =   105,119,744
 *   per layer: ln_1 4,096; c_attn 2048 x (2048 + 2 x 128) = 4,718,592 + 2,304; c_proj
 *              4,194,304 + 2,048; ln_2 4,096; c_fc 2048 x 8192 = 16,777,216 + 8,192; mlp.c_proj
 *              16,777,216 + 2,048 = 42,490,112; x 24                 = 1,019,762,688
 *   ln_f 4,096                                                       =         4,096
 *   total 1,124,886,528. Llama's rules (SwiGLU, untied, no biases) gave 1,623,820,288. */
static const char SANTACODER[] =
    "{\"activation_function\": \"gelu_fast\", \"architectures\": [\"GPTBigCodeForCausalLM\"], "
    "\"attention_softmax_in_fp32\": true, \"multi_query\": true, \"attn_pdrop\": 0.1, "
    "\"bos_token_id\": 49152, \"embd_pdrop\": 0.1, \"eos_token_id\": 49152, "
    "\"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": "
    "\"gpt_bigcode\", \"n_embd\": 2048, \"n_head\": 16, \"n_inner\": 8192, \"n_layer\": 24, "
    "\"n_positions\": 2048, \"resid_pdrop\": 0.1, \"scale_attn_weights\": true, "
    "\"scale_attention_softmax_in_fp32\": true, \"summary_activation\": null, "
    "\"summary_first_dropout\": 0.1, \"summary_proj_to_labels\": true, \"summary_type\": "
    "\"cls_index\", \"summary_use_proj\": true, \"torch_dtype\": \"float32\", "
    "\"transformers_version\": \"4.28.0.dev0\", \"use_cache\": true, \"vocab_size\": 49280}";

/* BERT-base (google-bert/bert-base-uncased; modeling_bert.py), counted as BertModel (what
 * AutoModel loads, pooler included). h 768, 12 layers, 12 heads, intermediate 3072.
 *   embeddings: word 30522 x 768 = 23,440,896; position 512 x 768 = 393,216; token_type 2 x 768
 *               = 1,536; LayerNorm 1,536                             =    23,837,184
 *   per layer: query, key, value, attention.output.dense 4 x (768 x 768 + 768) = 2,362,368;
 *              attention.output.LayerNorm 1,536; intermediate 768 x 3072 + 3072 = 2,362,368;
 *              output.dense 3072 x 768 + 768 = 2,360,064; output.LayerNorm 1,536
 *              = 7,087,872; x 12                                     =    85,054,464
 *   pooler.dense 768 x 768 + 768                                     =       590,592
 *   total 109,482,240. Llama's rules (SwiGLU decoder, untied head) gave 160,147,200. */
static const char BERT_BASE[] =
    "{\"architectures\": [\"BertForMaskedLM\"], \"attention_probs_dropout_prob\": 0.1, "
    "\"gradient_checkpointing\": false, \"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1, "
    "\"hidden_size\": 768, \"initializer_range\": 0.02, \"intermediate_size\": 3072, "
    "\"layer_norm_eps\": 1e-12, \"max_position_embeddings\": 512, \"model_type\": \"bert\", "
    "\"num_attention_heads\": 12, \"num_hidden_layers\": 12, \"pad_token_id\": 0, "
    "\"position_embedding_type\": \"absolute\", \"transformers_version\": \"4.6.0.dev0\", "
    "\"type_vocab_size\": 2, \"use_cache\": true, \"vocab_size\": 30522}";

/* RoBERTa-base (FacebookAI/roberta-base; modeling_roberta.py), as RobertaModel: BERT's layout
 * with 514 position rows (positions start at padding_idx + 1 = 2) and 1 token type.
 *   embeddings 50265 x 768 + 514 x 768 + 1 x 768 + LayerNorm 1,536 = 39,000,576; 12 layers as
 *   BERT's 85,054,464; pooler 590,592: total 124,645,632. */
static const char ROBERTA_BASE[] =
    "{\"architectures\": [\"RobertaForMaskedLM\"], \"attention_probs_dropout_prob\": 0.1, "
    "\"bos_token_id\": 0, \"eos_token_id\": 2, \"hidden_act\": \"gelu\", \"hidden_dropout_prob\": "
    "0.1, \"hidden_size\": 768, \"initializer_range\": 0.02, \"intermediate_size\": 3072, "
    "\"layer_norm_eps\": 1e-05, \"max_position_embeddings\": 514, \"model_type\": \"roberta\", "
    "\"num_attention_heads\": 12, \"num_hidden_layers\": 12, \"pad_token_id\": 1, "
    "\"type_vocab_size\": 1, \"vocab_size\": 50265}";

/* InternLM-7B (internlm/internlm-7b; modeling_internlm.py, remote code): Llama's layout with
 * q/k/v/o biases (config.bias true). h 4096, 32 layers, 32 heads, SwiGLU 11008, vocab 103168.
 *   embed_tokens + lm_head 2 x 103168 x 4096                         =   845,152,256
 *   per layer: q, k, v, o 4 x 16,777,216 + 4 x 4,096 biases = 67,125,248; MLP 3 x 4096 x 11008
 *              = 135,266,304; 2 RMSNorms 8,192 = 202,399,744; x 32   = 6,476,791,808
 *   norm 4,096: total 7,321,948,160 (Llama's rules lacked the 32 x 16,384 = 524,288 biases). */
static const char INTERNLM_7B[] =
    "{\"architectures\": [\"InternLMForCausalLM\"], \"bias\": true, \"bos_token_id\": 1, "
    "\"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": "
    "0.02, \"intermediate_size\": 11008, \"max_position_embeddings\": 2048, \"model_type\": "
    "\"internlm\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"pad_token_id\": 0, "
    "\"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false, \"torch_dtype\": \"float16\", "
    "\"transformers_version\": \"4.29.2\", \"use_cache\": true, \"vocab_size\": 103168}";

/* InternLM2-7B (internlm/internlm2-7b; modeling_internlm2.py, remote code): fused wqkv
 * [(32 + 2 x 8) x 128, 4096] and wo, bias false; SwiGLU 14336; vocab 92544; untied.
 *   tok_embeddings + output 2 x 92544 x 4096                         =   758,120,448
 *   per layer: wqkv 4096 x 6144 = 25,165,824; wo 16,777,216; w1, w3, w2 3 x 4096 x 14336
 *              = 176,160,768; attention_norm, ffn_norm 8,192 = 218,112,000; x 32
 *                                                                    = 6,979,584,000
 *   norm 4,096: total 7,737,708,544 (Llama's rules happen to agree: bias is false). */
static const char INTERNLM2_7B[] =
    "{\"architectures\": [\"InternLM2ForCausalLM\"], \"attn_implementation\": \"eager\", "
    "\"bias\": false, \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\", "
    "\"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336, "
    "\"max_position_embeddings\": 32768, \"model_type\": \"internlm2\", \"num_attention_heads\": "
    "32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"pad_token_id\": 2, "
    "\"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 2.0, \"type\": \"dynamic\"}, "
    "\"rope_theta\": 1000000, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.33.2\", \"use_cache\": true, \"vocab_size\": 92544}";

/* Baichuan2-13B-Chat (baichuan-inc/Baichuan2-13B-Chat; modeling_baichuan.py, remote code):
 * W_pack [3 x 5120, 5120] and o_proj without bias, SwiGLU 13696, RMSNorm, NormHead lm_head of
 * the embedding's shape, ALiBi (no position parameters); context as model_max_length.
 *   embed_tokens + lm_head 2 x 125696 x 5120                         = 1,287,127,040
 *   per layer: W_pack + o_proj 4 x 26,214,400 = 104,857,600; MLP 3 x 5120 x 13696
 *              = 210,370,560; 2 RMSNorms 10,240 = 315,238,400; x 40  = 12,609,536,000
 *   norm 5,120: total 13,896,668,160. */
static const char BAICHUAN2_13B[] =
    "{\"architectures\": [\"BaichuanForCausalLM\"], \"tokenizer_class\": \"BaichuanTokenizer\", "
    "\"bos_token_id\": 1, \"eos_token_id\": 2, \"gradient_checkpointing\": false, "
    "\"hidden_act\": \"silu\", \"hidden_size\": 5120, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 13696, \"model_max_length\": 4096, \"model_type\": \"baichuan\", "
    "\"num_attention_heads\": 40, \"num_hidden_layers\": 40, \"pad_token_id\": 0, "
    "\"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.29.2\", \"use_cache\": true, \"vocab_size\": 125696, "
    "\"z_loss_weight\": 0}";

/* Phi-1.5 as first released (microsoft/phi-1_5, model_type phi-msft, modeling_phi.py remote
 * code: ParallelBlock of one LayerNorm, MHA Wqkv/out_proj and MLP fc1/fc2 with biases,
 * CausalLMHead = LayerNorm + biased linear). No intermediate_size: n_inner null = 4 x 2048.
 *   wte 51200 x 2048 = 104,857,600
 *   per layer: ln 4,096; Wqkv 2048 x 6144 + 6144 = 12,589,056; out_proj 4,196,352; fc1 2048 x
 *              8192 + 8192 = 16,785,408; fc2 8192 x 2048 + 2048 = 16,779,264 = 50,354,176;
 *              x 24 = 1,208,500,224
 *   lm_head.ln 4,096; lm_head.linear 51200 x 2048 + 51200 = 104,908,800
 *   total 1,418,270,720, the count of the transformers-format config (cli_estimate.sh). */
static const char PHI_1_5_MSFT[] =
    "{\"_name_or_path\": \"microsoft/phi-1_5\", \"activation_function\": \"gelu_new\", "
    "\"architectures\": [\"PhiForCausalLM\"], \"attn_pdrop\": 0.0, \"embd_pdrop\": 0.0, "
    "\"flash_attn\": false, \"flash_rotary\": false, \"fused_dense\": false, \"img_processor\": "
    "null, \"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": "
    "\"phi-msft\", \"n_embd\": 2048, \"n_head\": 32, \"n_head_kv\": null, \"n_inner\": null, "
    "\"n_layer\": 24, \"n_positions\": 2048, \"resid_pdrop\": 0.0, \"rotary_dim\": 32, "
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"float16\", \"transformers_version\": "
    "\"4.34.1\", \"vocab_size\": 51200}";

/* Phi-2 as first released (microsoft/phi-2, phi-msft): the same layout at h 2560, 32 layers.
 *   wte 51200 x 2560 = 131,072,000; per layer 2 x 2560 + (2560 x 7680 + 7680) + (2560^2 + 2560)
 *   + (2560 x 10240 + 10240) + (10240 x 2560 + 2560) = 78,671,360, x 32 = 2,517,483,520;
 *   head 5,120 + 51200 x 2560 + 51200 = 131,128,320: total 2,779,683,840 (published 2.78B). */
static const char PHI_2_MSFT[] =
    "{\"_name_or_path\": \"microsoft/phi-2\", \"activation_function\": \"gelu_new\", "
    "\"architectures\": [\"PhiForCausalLM\"], \"attn_pdrop\": 0.0, \"embd_pdrop\": 0.0, "
    "\"flash_attn\": false, \"flash_rotary\": false, \"fused_dense\": false, \"img_processor\": "
    "null, \"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": "
    "\"phi-msft\", \"n_embd\": 2560, \"n_head\": 32, \"n_head_kv\": null, \"n_inner\": null, "
    "\"n_layer\": 32, \"n_positions\": 2048, \"resid_pdrop\": 0.1, \"rotary_dim\": 32, "
    "\"tie_word_embeddings\": false, \"torch_dtype\": \"float16\", \"transformers_version\": "
    "\"4.35.2\", \"vocab_size\": 51200}";

/* MPT-7B (mosaicml/mpt-7b; transformers' modeling_mpt.py, llm-foundry's MPT). d_model 4096, 32
 * layers, 32 heads, expansion_ratio 4, vocab 50432, no_bias (no bias anywhere, LayerNorms
 * weight-only), ALiBi (no position table), wte tied to the LM head.
 *   wte 50432 x 4096                                                 =   206,569,472
 *   per layer: Wqkv 4096 x 12288 = 50,331,648; out_proj 4096 x 4096 = 16,777,216; up_proj and
 *              down_proj 2 x 4096 x 16384 = 134,217,728; norm_1, norm_2 8,192
 *              = 201,334,784; x 32                                   = 6,442,713,088
 *   norm_f 4096                                                      =         4,096
 *   total 6,649,286,656 (the published 6.65B). Llama's rules (SwiGLU, no intermediate_size)
 *   do not read it. */
static const char MPT_7B[] =
    "{\"architectures\":[\"MPTForCausalLM\"],\"attn_config\":{\"alibi\":true,\"alibi_bias_max"
    "\":8,\"attn_impl\":\"torch\",\"attn_pdrop\":0,\"attn_type\":\"multihead_attention\",\"at"
    "tn_uses_sequence_id\":false,\"clip_qkv\":null,\"prefix_lm\":false,\"qk_ln\":false,\"soft"
    "max_scale\":null},\"auto_map\":{\"AutoConfig\":\"configuration_mpt.MPTConfig\",\"AutoMod"
    "elForCausalLM\":\"modeling_mpt.MPTForCausalLM\"},\"d_model\":4096,\"emb_pdrop\":0,\"embe"
    "dding_fraction\":1.0,\"expansion_ratio\":4,\"init_config\":{\"emb_init_std\":null,\"emb_"
    "init_uniform_lim\":null,\"fan_mode\":\"fan_in\",\"init_div_is_residual\":true,\"init_gai"
    "n\":0,\"init_nonlinearity\":\"relu\",\"init_std\":0.02,\"name\":\"kaiming_normal_\",\"ve"
    "rbose\":0},\"init_device\":\"cpu\",\"learned_pos_emb\":true,\"logit_scale\":null,\"max_s"
    "eq_len\":2048,\"model_type\":\"mpt\",\"n_heads\":32,\"n_layers\":32,\"no_bias\":true,\"n"
    "orm_type\":\"low_precision_layernorm\",\"resid_pdrop\":0,\"tokenizer_name\":\"EleutherAI"
    "/gpt-neox-20b\",\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.28.1\",\"use_c"
    "ache\":false,\"verbose\":0,\"vocab_size\":50432}";

static const family_case CASES[] = {
    {"chatglm2-6b", CHATGLM2, 6243584000, 7124258816},
    {"qwen-1.8b", QWEN_1_8B, 1836828672, 2648279040},
    {"aya-23-8b", AYA_23_8B, 8028033024, 9076740096},
    {"santacoder", SANTACODER, 1124886528, 1623820288},
    {"bert-base-uncased", BERT_BASE, 109482240, 160147200},
    {"roberta-base", ROBERTA_BASE, 124645632, 0},
    {"internlm-7b", INTERNLM_7B, 7321948160, 7321948160 - 524288},
    {"internlm2-7b", INTERNLM2_7B, 7737708544, 7737708544},
    {"baichuan2-13b-chat", BAICHUAN2_13B, 13896668160, 0},
    {"phi-1_5 (phi-msft)", PHI_1_5_MSFT, 1418270720, 0},
    {"phi-2 (phi-msft)", PHI_2_MSFT, 2779683840, 0},
    {"mpt-7b", MPT_7B, 6649286656, 0},
};

/* Write text to a scratch config.json and read it. */
static lp_status load_config(const char *tag, const char *text, lp_arch *arch, lp_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/families_%d_%s.json", lp_test_tmp_dir(), (int)getpid(), tag);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    lp_status st = lp_arch_from_hf_config(path, arch, err);
    unlink(path);
    return st;
}

/* The same config with its model_type replaced, read with Llama's rules (assumed). */
static int64_t llama_rules_total(const family_case *c, lp_arch *arch, lp_est_params *p)
{
    const char *key = strstr(c->config, "\"model_type\": \"");
    assert_non_null(key);
    const char *value = key + strlen("\"model_type\": \"");
    const char *end = strchr(value, '"');
    char text[4096];
    snprintf(text, sizeof text, "%.*s\"model_type\": \"not_a_known_type%s", (int)(key - c->config),
             c->config, end);
    lp_error err = {0};
    if (load_config("llama", text, arch, &err) != LP_OK ||
        lp_est_count_params(arch, p, &err) != LP_OK)
        return -1; /* Phi's originals do not even read as Llama (no intermediate_size) */
    return p->total;
}

static void test_family_counts(void **state)
{
    (void)state;
    lp_arch *arch = malloc(sizeof *arch);
    lp_est_params *p = malloc(sizeof *p);
    assert_non_null(arch);
    assert_non_null(p);
    int failures = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const family_case *c = &CASES[i];
        lp_error err = {0};
        if (load_config(c->name, c->config, arch, &err) != LP_OK ||
            lp_est_count_params(arch, p, &err) != LP_OK) {
            printf("%s: %s\n", c->name, err.msg);
            failures++;
            continue;
        }
        if (p->total != c->total || arch->assumed_family[0]) {
            printf("%s: total %lld, want %lld (assumed family '%s')\n", c->name,
                   (long long)p->total, (long long)c->total, arch->assumed_family);
            failures++;
        }
        int64_t as_llama = c->llama_rules_total ? llama_rules_total(c, arch, p) : 0;
        if (as_llama != c->llama_rules_total) {
            printf("%s: read with Llama's rules %lld, the issue measured %lld\n", c->name,
                   (long long)as_llama, (long long)c->llama_rules_total);
            failures++;
        }
    }
    free(arch);
    free(p);
    assert_int_equal(failures, 0);
}

/* What the families' readers decide beyond the count: kv heads, rotary width and layout,
 * positions, the encoder's missing cache and head. */
static void test_family_shapes(void **state)
{
    (void)state;
    lp_arch *a = malloc(sizeof *a);
    assert_non_null(a);
    lp_error err = {0};
    assert_int_equal(load_config("glm", CHATGLM2, a, &err), LP_OK);
    assert_int_equal(a->n_kv_heads, 2);
    assert_int_equal(a->rope_dim, 64); /* half of each 128-wide head, adjacent pairs */
    assert_int_equal(a->rope_layout, LP_ROPE_ADJACENT);
    assert_int_equal(a->n_ctx, 32768);
    assert_int_equal(load_config("baichuan", BAICHUAN2_13B, a, &err), LP_OK);
    assert_int_equal(a->pos_kind, LP_POS_ALIBI); /* hidden 5120: the 13B layout */
    assert_int_equal(a->n_ctx, 4096);
    assert_int_equal(load_config("bigcode", SANTACODER, a, &err), LP_OK);
    assert_int_equal(a->n_kv_heads, 1);
    assert_int_equal(a->pos_table_rows, 2048);
    assert_int_equal(load_config("roberta", ROBERTA_BASE, a, &err), LP_OK);
    assert_int_equal(a->pos_table_rows, 514);
    assert_int_equal(a->n_ctx, 512);
    assert_true(a->encoder_only && a->pooler);
    /* an encoder caches nothing and decodes nothing */
    lp_est_options o;
    lp_est_options_init(&o);
    o.batch = 4;
    lp_est_report *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    assert_int_equal(lp_estimate(a, &o, rep, &err), LP_OK);
    assert_int_equal(rep->kv.bytes, 0);
    assert_true(rep->flops.decode_per_token == 0.0 && rep->flops.prefill_lm_head == 0.0);
    /* bidirectional: 512 x 512 query-key pairs per layer, not 512 x 513 / 2 */
    assert_true(rep->flops.prefill_attn_scores_causal == rep->flops.prefill_attn_scores_dense);
    assert_int_equal(load_config("phi", PHI_1_5_MSFT, a, &err), LP_OK);
    assert_string_equal(a->family, "phi");
    assert_int_equal(a->rope_dim, 32);
    /* ChatGLM-6B's first layout is refused by name, not miscounted */
    assert_int_equal(load_config("glm1",
                                 "{\"model_type\": \"chatglm\", \"hidden_size\": 4096, "
                                 "\"inner_hidden_size\": 16384, \"num_layers\": 28, "
                                 "\"num_attention_heads\": 32, \"vocab_size\": 130528}",
                                 a, &err),
                     LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "inner_hidden_size"));
    free(rep);
    free(a);
}

/* An unknown model_type: counted with Llama's rules, and said so in a warning and in JSON; with
 * strict, refused. */
static void test_unknown_model_type(void **state)
{
    (void)state;
    lp_arch *a = malloc(sizeof *a);
    lp_est_report *rep = malloc(sizeof *rep);
    assert_non_null(a);
    assert_non_null(rep);
    lp_error err = {0};
    assert_int_equal(load_config("mystery",
                                 "{\"model_type\": \"mysterylm\", \"vocab_size\": 1000, "
                                 "\"hidden_size\": 64, \"num_hidden_layers\": 2, "
                                 "\"num_attention_heads\": 4, \"intermediate_size\": 128}",
                                 a, &err),
                     LP_OK);
    assert_string_equal(a->assumed_family, "llama");
    lp_est_options o;
    lp_est_options_init(&o);
    assert_int_equal(lp_estimate(a, &o, rep, &err), LP_OK);
    bool warned = false;
    for (int i = 0; i < rep->n_warnings; i++)
        warned |= strcmp(rep->warnings[i].code, "unknown_model_type") == 0 &&
                  strstr(rep->warnings[i].msg, "mysterylm") != NULL;
    assert_true(warned);
    json_t *doc = lp_est_to_json(a, rep, 0);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "assumed_family")), "llama");
    json_decref(doc);
    o.strict = true;
    assert_int_equal(lp_estimate(a, &o, rep, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "mysterylm"));
    /* a known family carries neither */
    assert_int_equal(load_config("known", INTERNLM2_7B, a, &err), LP_OK);
    assert_int_equal(lp_estimate(a, &o, rep, &err), LP_OK);
    doc = lp_est_to_json(a, rep, 0);
    assert_non_null(doc);
    assert_true(json_is_null(json_object_get(doc, "assumed_family")));
    json_decref(doc);
    free(rep);
    free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_counts),
        cmocka_unit_test(test_family_shapes),
        cmocka_unit_test(test_unknown_model_type),
    };
    return cmocka_run_group_tests_name("estimate families", tests, NULL, NULL);
}
