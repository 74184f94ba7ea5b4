# Hardening (issue 7) beyond fuzzing: what a killed trace leaves in the database, readers during a
# write, schema versions (cli_db_safety.sh), and refusals of absurd sizes (cli_bounds.sh).
lp_add_cli_test(NAME cli_db_safety SCRIPT cli_db_safety.sh LABELS cli)
lp_add_cli_test(NAME cli_bounds SCRIPT cli_bounds.sh LABELS cli)
