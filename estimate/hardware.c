/* Hardware and link figures: the presets, custom "FLOPS,BYTES_PER_S[,MEMORY]" figures, links. */
#include "estimate/estimate.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/text.h"

#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * MiB)

/* Published peaks (dense bf16 tensor throughput without sparsity, memory bandwidth) and the
 * memory the driver reports: NVML's totals as Modal publishes them for H100 80GB (81,559 MiB),
 * H200 (143,771 MiB) and A100 (81,920 and 40,960 MiB); the nominal 24 GiB and 192 GiB for the
 * RTX 4090 and MI300X, whose reported totals loupe has not seen. vLLM sizes its budget from
 * that total, so a preset's memory is what --gpu-memory-utilization multiplies. */
static const lp_est_hw presets[] = {
    {"h100-sxm", "NVIDIA H100 SXM5 80GB datasheet: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3",
     989e12, 3.35e12, (uint64_t)(81559 * MiB)},
    {"h100-pcie", "NVIDIA H100 PCIe 80GB datasheet: 756 TFLOP/s bf16 dense, 2.0 TB/s HBM2e",
     756e12, 2.0e12, (uint64_t)(81559 * MiB)},
    {"h200", "NVIDIA H200 SXM datasheet: 989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e", 989e12,
     4.8e12, (uint64_t)(143771 * MiB)},
    {"a100-80gb", "NVIDIA A100 80GB SXM datasheet: 312 TFLOP/s bf16 dense, 2.039 TB/s HBM2e",
     312e12, 2.039e12, (uint64_t)(81920 * MiB)},
    {"a100-40gb", "NVIDIA A100 40GB datasheet: 312 TFLOP/s bf16 dense, 1.555 TB/s HBM2", 312e12,
     1.555e12, (uint64_t)(40960 * MiB)},
    {"rtx-4090",
     "NVIDIA Ada whitepaper, RTX 4090: 165.2 TFLOP/s bf16 dense (fp32 accumulate), 1.008 TB/s "
     "GDDR6X",
     165.2e12, 1.008e12, (uint64_t)(24 * GiB)},
    {"mi300x", "AMD Instinct MI300X datasheet: 1307.4 TFLOP/s bf16 dense, 5.3 TB/s HBM3",
     1307.4e12, 5.3e12, (uint64_t)(192 * GiB)},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

const lp_est_hw *lp_est_hw_preset(int index)
{
    return index >= 0 && index < N_PRESETS ? &presets[index] : NULL;
}

/* A positive number with an optional k/M/G/T/P suffix. */
static bool parse_rate(const char *text, size_t len, double *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *end;
    double v = strtod(buf, &end);
    if (end == buf || !isfinite(v) || v <= 0)
        return false;
    static const char suffixes[] = "kMGTP";
    static const double scales[] = {1e3, 1e6, 1e9, 1e12, 1e15};
    if (*end) {
        const char *s = strchr(suffixes, *end);
        if (!s || end[1] != '\0')
            return false;
        v *= scales[s - suffixes];
    }
    *out = v;
    return true;
}

bool lp_est_hw_parse(const char *text, lp_est_hw *out)
{
    memset(out, 0, sizeof *out);
    if (!text)
        return false;
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcasecmp(text, presets[i].name) == 0) {
            *out = presets[i];
            return true;
        }
    }
    const char *comma = strchr(text, ',');
    if (!comma)
        return false;
    const char *second = strchr(comma + 1, ',');
    size_t bw_len = second ? (size_t)(second - comma - 1) : strlen(comma + 1);
    if (!parse_rate(text, (size_t)(comma - text), &out->flops_per_s) ||
        !parse_rate(comma + 1, bw_len, &out->bytes_per_s))
        return false;
    if (second && (!lp_parse_size(second + 1, &out->memory_bytes) || out->memory_bytes == 0))
        return false;
    snprintf(out->name, sizeof out->name, "custom");
    snprintf(out->label, sizeof out->label, "user figures: %g FLOP/s, %g B/s", out->flops_per_s,
             out->bytes_per_s);
    return true;
}

/* One direction of a device's links: NVLink 4 (H100 SXM) is 900 GB/s both ways over 18 links,
 * NVLink 3 (A100 SXM) 600 GB/s both ways; PCIe x16 Gen5 carries 64 GB/s each way, Gen4 32. */
static const lp_est_link links[] = {
    {"NVLink4", 450e9},
    {"NVLink3", 300e9},
    {"PCIe5", 64e9},
    {"PCIe4", 32e9},
};

bool lp_est_link_parse(const char *text, lp_est_link *out)
{
    memset(out, 0, sizeof *out);
    if (!text)
        return false;
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
        if (strcasecmp(text, links[i].name) == 0) {
            *out = links[i];
            return true;
        }
    double gbps;
    if (!lp_parse_f64(text, &gbps) || !isfinite(gbps) || !(gbps > 0))
        return false;
    snprintf(out->name, sizeof out->name, "%g GB/s", gbps);
    out->bytes_per_s = gbps * 1e9;
    return true;
}

const char *lp_est_bound_name(lp_est_bound bound)
{
    static const char *const names[LP_EST_BOUND_COUNT] = {"compute", "memory", "link"};
    return (unsigned)bound < LP_EST_BOUND_COUNT ? names[bound] : "invalid";
}
