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
# loupe inspect on generated corrupt files and the real quantized ones.
if(TARGET test_gguf)
  add_test(NAME cli_gguf COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli_gguf.sh $<TARGET_FILE:test_gguf>)
  set_tests_properties(cli_gguf PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77
    ENVIRONMENT "LOUPE_SHARED=${LOUPE_SHARED_DIR};LOUPE_BIN=$<TARGET_FILE:loupe>;LOUPE_TEST_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp;LOUPE_SOURCE=${PROJECT_SOURCE_DIR}")
endif()
# Fuzz entry point: a plain replay binary always, a libFuzzer one with LOUPE_FUZZ=ON (clang).
add_executable(fuzz_gguf fuzz_gguf.c)
target_link_libraries(fuzz_gguf PRIVATE lp_inspect lp_core m)
target_include_directories(fuzz_gguf PRIVATE ${PROJECT_SOURCE_DIR})
if(LOUPE_FUZZ)
  # The reader's own files are compiled in so that libFuzzer's coverage instrumentation sees them.
  add_executable(fuzz_gguf_libfuzzer fuzz_gguf.c ${PROJECT_SOURCE_DIR}/inspect/gguf.c
                 ${PROJECT_SOURCE_DIR}/inspect/quant.c ${PROJECT_SOURCE_DIR}/inspect/gguf_arch.c)
  target_compile_definitions(fuzz_gguf_libfuzzer PRIVATE LP_FUZZ_LIBFUZZER)
  target_compile_options(fuzz_gguf_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_gguf_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_gguf_libfuzzer PRIVATE lp_inspect lp_core m)
  target_include_directories(fuzz_gguf_libfuzzer PRIVATE ${PROJECT_SOURCE_DIR})
endif()
if(TARGET test_gguf)
  add_test(NAME fuzz_gguf_replay COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_gguf_replay.sh
           $<TARGET_FILE:test_gguf> $<TARGET_FILE:fuzz_gguf>)
  set_tests_properties(fuzz_gguf_replay PROPERTIES LABELS "fuzz"
    ENVIRONMENT "LOUPE_SHARED=${LOUPE_SHARED_DIR};LOUPE_TEST_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp")
endif()
