# `loupe leak` (trace/leak.h): mask tensors the tests write (npy and safetensors), the engine's
# masks cell by cell, each injected fault caught and named on stories260K, and the CLI.
lp_add_cmocka_test(NAME test_leak SOURCES test_leak.c ref_forward.c LIBS lp_trace lp_inspect LABELS unit golden)
lp_add_cli_test(NAME cli_leak SCRIPT cli_leak.sh LABELS cli golden)

# Fuzz entry point of the mask checker: a replay binary always, a libFuzzer one with LOUPE_FUZZ=ON.
add_executable(fuzz_leak_mask fuzz_leak_mask.c)
target_link_libraries(fuzz_leak_mask PRIVATE lp_trace lp_inspect lp_core m)
target_include_directories(fuzz_leak_mask PRIVATE ${PROJECT_SOURCE_DIR})
if(LOUPE_FUZZ)
  # The checker's own files are compiled in (instrumented, and without the kernels' dispatch,
  # which the target does not need).
  add_executable(fuzz_leak_mask_libfuzzer fuzz_leak_mask.c ${PROJECT_SOURCE_DIR}/trace/leak.c
                 ${PROJECT_SOURCE_DIR}/trace/leak_mask.c ${PROJECT_SOURCE_DIR}/trace/mask.c)
  target_compile_definitions(fuzz_leak_mask_libfuzzer PRIVATE LP_FUZZ_LIBFUZZER)
  target_compile_options(fuzz_leak_mask_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_leak_mask_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_leak_mask_libfuzzer PRIVATE lp_inspect lp_core PkgConfig::JANSSON m)
  target_include_directories(fuzz_leak_mask_libfuzzer PRIVATE ${PROJECT_SOURCE_DIR})
endif()
add_test(NAME fuzz_leak_mask_replay COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_leak_mask_replay.sh
         $<TARGET_FILE:fuzz_leak_mask>)
set_tests_properties(fuzz_leak_mask_replay PROPERTIES LABELS "fuzz"
  ENVIRONMENT "LOUPE_TEST_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp")
