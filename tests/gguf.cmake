# GGUF reader, dequantizers and GGUF metadata -> lp_arch (inspect/gguf.c, quant.c, gguf_arch.c).
lp_add_cmocka_test(NAME test_quant SOURCES test_quant.c LIBS lp_inspect LABELS unit)
lp_add_cmocka_test(NAME test_gguf SOURCES test_gguf.c LIBS lp_inspect LABELS unit)
lp_add_cmocka_test(NAME test_gguf_arch SOURCES test_gguf_arch.c LIBS lp_inspect LABELS unit)
# The same binaries against the real stories260K files in ../shared (they skip when it is absent).
foreach(name test_gguf test_gguf_arch)
  if(TARGET ${name})
    add_test(NAME ${name}_golden COMMAND ${name} golden)
    set_tests_properties(${name}_golden PROPERTIES LABELS "golden" SKIP_RETURN_CODE 77
      ENVIRONMENT "LOUPE_SHARED=${LOUPE_SHARED_DIR};LOUPE_TEST_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp")
  endif()
endforeach()
