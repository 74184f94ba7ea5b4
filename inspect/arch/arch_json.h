/* The normalized model description as JSON (jansson), for `--json` output and the trace store.
 *
 *   json_t *j = lp_arch_to_json(&arch);   // new reference; caller json_decref()s
 */
#ifndef LP_INSPECT_ARCH_JSON_H
#define LP_INSPECT_ARCH_JSON_H

#include <jansson.h>

#include "inspect/inspect.h"

json_t *lp_arch_to_json(const lp_arch *arch);

#endif
