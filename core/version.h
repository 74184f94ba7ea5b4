/* loupe's version: the one place it is written. */
#ifndef LP_CORE_VERSION_H
#define LP_CORE_VERSION_H

#define LP_VERSION "0.1.0"

#endif
