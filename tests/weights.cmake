# Tensor catalogue, .npy reader and `loupe inspect` (inspect/weights.c, safetensors.c, llama2c.c,
# roles.c, npy.c, cmd_inspect.c). Golden cases skip themselves when ../shared is absent.
lp_add_cmocka_test(NAME test_weights SOURCES test_weights.c ref_forward.c LIBS lp_inspect PkgConfig::JANSSON LABELS unit golden)
lp_add_cmocka_test(NAME test_npy SOURCES test_npy.c LIBS lp_inspect LABELS unit golden)
lp_add_cli_test(NAME cli_inspect SCRIPT cli_inspect.sh LABELS cli golden)
# Fuzz entry point for the safetensors and .npy readers: a replay/mutation binary always, a
# libFuzzer one with LOUPE_FUZZ=ON (clang).
add_executable(fuzz_weights fuzz_weights.c)
target_link_libraries(fuzz_weights PRIVATE lp_inspect lp_core PkgConfig::JANSSON m)
target_include_directories(fuzz_weights PRIVATE ${PROJECT_SOURCE_DIR})
# Seeds: two built-in images, plus ../shared's real files when it is there.
set(lp_fuzz_weights_seeds "")
foreach(seed models/stories260K/hf/model.safetensors models/stories260K/reference/cat_mat/tokens.npy)
  if(EXISTS ${LOUPE_SHARED_DIR}/${seed})
    list(APPEND lp_fuzz_weights_seeds ${LOUPE_SHARED_DIR}/${seed})
  endif()
endforeach()
add_test(NAME fuzz_weights_mutate COMMAND fuzz_weights --mutate 2000 ${lp_fuzz_weights_seeds})
set_tests_properties(fuzz_weights_mutate PROPERTIES LABELS "fuzz")
if(LOUPE_FUZZ)
  add_executable(fuzz_weights_libfuzzer fuzz_weights.c ${PROJECT_SOURCE_DIR}/inspect/safetensors.c
                 ${PROJECT_SOURCE_DIR}/inspect/weights.c ${PROJECT_SOURCE_DIR}/inspect/npy.c)
  target_compile_definitions(fuzz_weights_libfuzzer PRIVATE LP_FUZZ_LIBFUZZER)
  target_compile_options(fuzz_weights_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_weights_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_weights_libfuzzer PRIVATE lp_inspect lp_core PkgConfig::JANSSON m)
  target_include_directories(fuzz_weights_libfuzzer PRIVATE ${PROJECT_SOURCE_DIR})
endif()
