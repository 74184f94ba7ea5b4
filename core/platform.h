/* What loupe asks of the machine it runs on. */
#ifndef LP_CORE_PLATFORM_H
#define LP_CORE_PLATFORM_H

/* Number of online CPUs (at least 1). */
int lp_cpu_count(void);

/* Folder of the shipped YAML cards: $LOUPE_CONFIGS if set, else the source tree's configs/. */
const char *lp_configs_dir(void);

#endif
