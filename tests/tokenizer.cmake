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
