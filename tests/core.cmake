lp_add_cmocka_test(NAME test_core SOURCES test_core.c LABELS unit)
lp_add_cli_test(NAME cli_main SCRIPT cli_main.sh LABELS cli)
lp_add_cli_test(NAME cli_readme SCRIPT cli_readme.sh LABELS cli)
