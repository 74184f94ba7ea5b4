/* What the viewer's files share: the page template (render/viewer/, embedded by CMake) and the
 * JSON description of a run that viewer_data.c builds. */
#ifndef LP_RENDER_VIEWER_INTERNAL_H
#define LP_RENDER_VIEWER_INTERNAL_H

#include <jansson.h>

#include "render/render.h"

/* render/viewer/template.html, viewer.css and viewer.js as NUL-terminated UTF-8 bytes (generated
 * into the build folder as viewer_assets.c; unsigned, so bytes above 127 need no casts there). */
extern const unsigned char lp_viewer_template_html[];
extern const unsigned char lp_viewer_css[];
extern const unsigned char lp_viewer_js[];

/* Everything but the maps into root: "format", "run", "title", "tokens", "options", "colormaps"
 * and "sections" (the optional data: each present only when the run has it). */
lp_status lp_viewer_describe_run(lp_store *db, const lp_store_run *run,
                                 const lp_render_options *opt, const lp_viewer_options *vopt,
                                 json_t *root, lp_error *err);

#endif
