# GGUF reader and dequantizers (inspect/gguf.c, inspect/quant.c, inspect/gguf_arch.c).
lp_add_cmocka_test(NAME test_quant SOURCES test_quant.c LIBS lp_inspect LABELS unit)
lp_add_cmocka_test(NAME test_gguf SOURCES test_gguf.c LIBS lp_inspect LABELS unit)
# The same binary against the real stories260K files in ../shared (skips when absent).
if(TARGET test_gguf)
  add_test(NAME test_gguf_golden COMMAND test_gguf golden)
  set_tests_properties(test_gguf_golden PROPERTIES LABELS "golden" SKIP_RETURN_CODE 77
    ENVIRONMENT "LOUPE_SHARED=${LOUPE_SHARED_DIR};LOUPE_TEST_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp")
endif()
