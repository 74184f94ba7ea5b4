# Hardening (issue 7) beyond fuzzing: what a killed trace leaves in the database, readers during a
# write, schema versions (cli_db_safety.sh), and refusals of absurd sizes (cli_bounds.sh).
lp_add_cli_test(NAME cli_db_safety SCRIPT cli_db_safety.sh LABELS cli)
lp_add_cli_test(NAME cli_bounds SCRIPT cli_bounds.sh LABELS cli)
# cli_db_safety runs loupe render: pango/fontconfig's process-wide caches are not leaks.
set_property(TEST cli_db_safety APPEND PROPERTY ENVIRONMENT
  "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/render.lsan.supp:print_suppressions=0")
