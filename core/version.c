/* The version and git revision compiled into the library, for run-time checks and --version. */
#include "core/version.h"

#include "core/version_revision.h" /* generated at build time: LP_VERSION_REVISION */

const char *lp_version(void) { return LP_VERSION; }

const char *lp_version_revision(void) { return LP_VERSION_REVISION; }
