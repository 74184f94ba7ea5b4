/* What loupe asks of the machine it runs on.
 *
 *   int n = lp_cpu_count();
 *   char card[4096];
 *   snprintf(card, sizeof card, "%s/llama-3-8b.yaml", lp_configs_dir());
 */
#ifndef LP_CORE_PLATFORM_H
#define LP_CORE_PLATFORM_H

/* Number of online CPUs (at least 1). */
int lp_cpu_count(void);

/* Folder of the shipped YAML cards, the first of:
 *   1. $LOUPE_CONFIGS, when set and not empty;
 *   2. the install layout relative to the running binary: <prefix>/bin/loupe ->
 *      <prefix>/share/loupe/configs (a relative path, so a moved prefix keeps working);
 *   3. share/loupe/configs beside the binary: a build tree (CMake links it to the source tree's
 *      configs/) or an unpacked folder with the binary at its top.
 * When none exists, the path of 2 (so a message can say where the cards were looked for), or
 * "configs" when the binary's own path cannot be read. Found paths are resolved (realpath).
 * Borrowed: static storage, valid for the process; thread-safe. */
const char *lp_configs_dir(void);

#endif
