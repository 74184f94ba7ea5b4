/* Colormaps, value scales, option defaults and the names users type for them. */
#include "render/render.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/names.h"
#include "render/render_internal.h"

const lp_rgb lp_render_leak_rgb = {0xe8, 0x11, 0x2d};
const lp_rgb lp_render_bad_rgb = {0xff, 0x00, 0xff};

void lp_render_options_default(lp_render_options *opt)
{
    /* everything not named is 0: vmax and cell automatic, leak threshold 0, default thumbs,
     * the colormap's own masked colour */
    *opt = (lp_render_options){.colormap = LP_COLORMAP_VIRIDIS, .scale = LP_SCALE_LINEAR,
                               .gamma = 0.5, .log_floor = 1e-4, .size = 800, .zoom = 1};
}

/* "grey" is read as gray but never printed: the first row of a value is its word */
static const lp_name_entry colormap_names[] = {
    {LP_COLORMAP_VIRIDIS, "viridis"},
    {LP_COLORMAP_MAGMA, "magma"},
    {LP_COLORMAP_GRAY, "gray"},
    {LP_COLORMAP_GRAY, "grey"},
};
static const lp_name_entry scale_names[] = {
    {LP_SCALE_LINEAR, "linear"},
    {LP_SCALE_LOG, "log"},
    {LP_SCALE_POWER, "power"},
};

LP_NAMES_DEFINE(lp_colormap_name, lp_colormap_from_name, lp_colormap, colormap_names, "?", true,
                LP_COLORMAP_COUNT)
LP_NAMES_DEFINE(lp_scale_name, lp_scale_from_name, lp_scale, scale_names, "?", true, LP_SCALE_COUNT)

lp_image_format lp_image_format_from_path(const char *path)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash))
        return LP_IMAGE_COUNT;
    static const lp_name_entry image_suffixes[] = {
        {LP_IMAGE_PNG, ".png"},
        {LP_IMAGE_SVG, ".svg"},
        {LP_IMAGE_PDF, ".pdf"},
    };
    int format;
    if (lp_names_value(image_suffixes, LP_NAMES_LEN(image_suffixes), dot, true, &format))
        return (lp_image_format)format;
    return LP_IMAGE_COUNT;
}

static uint8_t channel(float x) { return (uint8_t)lrintf(x * 255.0f); }

lp_rgb lp_colormap_rgb(lp_colormap cmap, double t)
{
    if (!(t > 0)) /* also catches NaN */
        t = 0;
    if (t > 1)
        t = 1;
    int idx = (int)(t * 256.0);
    if (idx > 255)
        idx = 255;
    lp_rgb out;
    switch (cmap) {
    case LP_COLORMAP_MAGMA:
        out.r = channel(lp_render_magma_table[idx][0]);
        out.g = channel(lp_render_magma_table[idx][1]);
        out.b = channel(lp_render_magma_table[idx][2]);
        break;
    case LP_COLORMAP_GRAY:
        out.r = out.g = out.b = (uint8_t)idx;
        break;
    case LP_COLORMAP_VIRIDIS:
    default:
        out.r = channel(lp_render_viridis_table[idx][0]);
        out.g = channel(lp_render_viridis_table[idx][1]);
        out.b = channel(lp_render_viridis_table[idx][2]);
        break;
    }
    return out;
}

double lp_scale_apply(const lp_render_options *opt, double vmax, double value)
{
    if (!(value > 0) || !(vmax > 0))
        return 0;
    double t;
    switch (opt->scale) {
    case LP_SCALE_LOG: {
        double floor_v = opt->log_floor > 0 ? opt->log_floor : 1e-4;
        if (vmax <= floor_v)
            return value >= vmax ? 1 : 0;
        double v = value < floor_v ? floor_v : value;
        t = log(v / floor_v) / log(vmax / floor_v);
        break;
    }
    case LP_SCALE_POWER:
        t = pow(value / vmax, opt->gamma > 0 ? opt->gamma : 0.5);
        break;
    case LP_SCALE_LINEAR:
    default:
        t = value / vmax;
        break;
    }
    return t < 0 ? 0 : (t > 1 ? 1 : t);
}

lp_rgb lp_render_masked_rgb(const lp_render_options *opt)
{
    if (opt->masked_rgb_set)
        return opt->masked_rgb;
    /* #d9d9d9 is itself a step of the gray ramp, so the gray map gets a pale sand instead. */
    if (opt->colormap == LP_COLORMAP_GRAY)
        return (lp_rgb){0xf2, 0xe6, 0xd0};
    return (lp_rgb){0xd9, 0xd9, 0xd9};
}

double lp_render_vmax(const lp_render_options *opt, double max_value)
{
    if (opt->vmax > 0)
        return opt->vmax;
    if (max_value > 0 && isfinite(max_value))
        return max_value;
    return 1.0; /* an all-zero map: any positive top draws it as the bottom colour */
}

/* t in [-1, 1] -> blue (#2166ac) .. white .. red (#b2182b), linear in each half. */
lp_rgb lp_diverging_rgb(double t)
{
    if (!(t == t))
        t = 0;
    t = t < -1 ? -1 : (t > 1 ? 1 : t);
    const double lo[3] = {0x21, 0x66, 0xac}, hi[3] = {0xb2, 0x18, 0x2b};
    const double *end = t < 0 ? lo : hi;
    double a = fabs(t), c[3];
    for (int i = 0; i < 3; i++)
        c[i] = 255.0 + (end[i] - 255.0) * a;
    return (lp_rgb){(uint8_t)lround(c[0]), (uint8_t)lround(c[1]), (uint8_t)lround(c[2])};
}
