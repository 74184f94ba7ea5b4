# Tokenizers (issue 4): unit tests, golden tests against ../shared/tokenizers and stories260K,
# and the `loupe tokenize` CLI.
lp_add_cmocka_test(NAME test_tokenizer SOURCES test_tokenizer.c LIBS lp_inspect PkgConfig::JANSSON LABELS unit)
if(TARGET test_tokenizer)
  add_test(NAME test_tokenizer_golden COMMAND test_tokenizer golden)
  set_tests_properties(test_tokenizer_golden PROPERTIES LABELS "golden" SKIP_RETURN_CODE 77
    ENVIRONMENT "LOUPE_SHARED=${LOUPE_SHARED_DIR};LOUPE_TEST_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp")
endif()
lp_add_cli_test(NAME cli_tokenize SCRIPT cli_tokenize.sh LABELS cli)
if(TARGET test_tokenizer)
  add_test(NAME test_tokenizer_unicode COMMAND test_tokenizer unicode)
  set_tests_properties(test_tokenizer_unicode PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77)
endif()
# Fuzz entry point (tests/fuzz_tokenizer.c): a replay/mutation binary always, a libFuzzer one
# with LOUPE_FUZZ=ON (clang).
add_executable(fuzz_tokenizer fuzz_tokenizer.c)
target_link_libraries(fuzz_tokenizer PRIVATE lp_inspect lp_core m)
target_include_directories(fuzz_tokenizer PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME fuzz_tokenizer_mutate COMMAND fuzz_tokenizer --mutate 3000
         ${LOUPE_SHARED_DIR}/models/stories260K/tok512.bin
         ${LOUPE_SHARED_DIR}/models/stories260K/stories260K.gguf)
if(NOT EXISTS ${LOUPE_SHARED_DIR}/models/stories260K/tok512.bin)
  set_tests_properties(fuzz_tokenizer_mutate PROPERTIES DISABLED TRUE)
endif()
set_tests_properties(fuzz_tokenizer_mutate PROPERTIES LABELS "fuzz")
if(LOUPE_FUZZ)
  add_executable(fuzz_tokenizer_libfuzzer fuzz_tokenizer.c)
  target_compile_definitions(fuzz_tokenizer_libfuzzer PRIVATE LP_FUZZ_LIBFUZZER)
  target_compile_options(fuzz_tokenizer_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_tokenizer_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_tokenizer_libfuzzer PRIVATE lp_inspect lp_core m)
  target_include_directories(fuzz_tokenizer_libfuzzer PRIVATE ${PROJECT_SOURCE_DIR})
endif()
