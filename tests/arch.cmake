# The model description (inspect/arch*.c, hf_config.c, yaml_card.c): unit cases need only the
# source tree; the golden ones read ../shared and skip without it.
lp_add_cmocka_test(NAME test_arch SOURCES test_arch.c LIBS lp_inspect LABELS unit)
lp_add_cmocka_test(NAME test_arch_golden SOURCES test_arch.c LIBS lp_inspect LABELS golden)
if(TARGET test_arch_golden)
  target_compile_definitions(test_arch_golden PRIVATE LP_ARCH_GOLDEN)
endif()
# Fuzz entry point for the config and card readers: a replay binary always (with its own
# deterministic mutations), a libFuzzer one with LOUPE_FUZZ=ON (clang).
add_executable(fuzz_arch test_arch.c)
target_compile_definitions(fuzz_arch PRIVATE LP_ARCH_FUZZ)
target_link_libraries(fuzz_arch PRIVATE lp_inspect lp_core m)
target_include_directories(fuzz_arch PRIVATE ${PROJECT_SOURCE_DIR})
if(LOUPE_FUZZ)
  add_executable(fuzz_arch_libfuzzer test_arch.c ${PROJECT_SOURCE_DIR}/inspect/arch.c
                 ${PROJECT_SOURCE_DIR}/inspect/hf_config.c ${PROJECT_SOURCE_DIR}/inspect/yaml_card.c
                 ${PROJECT_SOURCE_DIR}/inspect/arch_json.c)
  target_compile_definitions(fuzz_arch_libfuzzer PRIVATE LP_ARCH_FUZZ LP_FUZZ_LIBFUZZER)
  target_compile_options(fuzz_arch_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_arch_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_arch_libfuzzer PRIVATE lp_inspect lp_core m)
  target_include_directories(fuzz_arch_libfuzzer PRIVATE ${PROJECT_SOURCE_DIR})
endif()
file(GLOB lp_arch_fuzz_inputs ${PROJECT_SOURCE_DIR}/configs/*.yaml ${LOUPE_SHARED_DIR}/configs/*/config.json)
add_test(NAME fuzz_arch_replay COMMAND fuzz_arch ${lp_arch_fuzz_inputs})
set_tests_properties(fuzz_arch_replay PROPERTIES LABELS "fuzz")
# What users see: cards by name and by Hugging Face id, and one-line errors naming the problem.
set(lp_arch_cli_env "LOUPE_CONFIGS=${PROJECT_SOURCE_DIR}/configs")
add_test(NAME cli_arch_card_by_id COMMAND loupe estimate meta-llama/Meta-Llama-3-8B)
set_tests_properties(cli_arch_card_by_id PROPERTIES LABELS "cli" ENVIRONMENT "${lp_arch_cli_env}"
  PASS_REGULAR_EXPRESSION "from [^\n]*configs/llama-3-8b\\.yaml\\)[^$]*total +8,030,261,248")
add_test(NAME cli_arch_unknown_card COMMAND loupe estimate no-such-card)
set_tests_properties(cli_arch_unknown_card PROPERTIES LABELS "cli" ENVIRONMENT "${lp_arch_cli_env}"
  PASS_REGULAR_EXPRESSION "^loupe estimate: no-such-card: no such file, and no card no-such-card\\.yaml in [^\n]*\n$")
add_test(NAME cli_arch_bad_config COMMAND loupe estimate ${PROJECT_SOURCE_DIR}/configs/README.md)
set_tests_properties(cli_arch_bad_config PROPERTIES LABELS "cli" ENVIRONMENT "${lp_arch_cli_env}"
  PASS_REGULAR_EXPRESSION "^loupe estimate: [^\n]*README\\.md: this is text, not a llama2\\.c checkpoint\n$")
