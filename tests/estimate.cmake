# loupe estimate: unit tests on hand-built lp_arch, golden counts on ../shared/configs, CLI.
lp_add_cmocka_test(NAME test_estimate SOURCES test_estimate.c LIBS lp_estimate lp_inspect LABELS unit)
lp_add_cmocka_test(NAME test_estimate_golden SOURCES test_estimate.c LIBS lp_estimate lp_inspect LABELS golden)
if(TARGET test_estimate_golden)
  target_compile_definitions(test_estimate_golden PRIVATE LP_EST_GOLDEN=1)
endif()
lp_add_cli_test(NAME cli_estimate SCRIPT cli_estimate.sh LABELS cli)
