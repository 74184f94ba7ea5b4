# Hardening (issue 7): the fuzz targets not owned by a reader's engineer (llama2.c checkpoint,
# prompt encoding with the real tokenizers), and replay tests of every target's corpus and
# regression inputs under tests/fuzz/<target>/. The replays run in every build (label fuzz); under
# LOUPE_SANITIZE=ON (.ci/sanitize) they are the corrupt-file checks under ASan/UBSan.
# .ci/fuzz-smoke builds the *_libfuzzer binaries with clang and runs each for a bounded time.
set(lp_fuzz_dir ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(lp_fuzz_env "LOUPE_SHARED=${LOUPE_SHARED_DIR};LOUPE_TEST_TMP=${CMAKE_CURRENT_BINARY_DIR}/tmp")

# lp_add_fuzz_target(NAME fuzz_x SOURCE fuzz_x.c LIBS ... INSTRUMENT reader.c ...):
# the replay binary NAME always; NAME_libfuzzer with LOUPE_FUZZ=ON, with the INSTRUMENT sources
# compiled in so that libFuzzer's coverage sees the reader itself, not just the harness.
function(lp_add_fuzz_target)
  cmake_parse_arguments(F "" "NAME;SOURCE" "LIBS;INSTRUMENT" ${ARGN})
  add_executable(${F_NAME} ${F_SOURCE})
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS} lp_core m)
  target_include_directories(${F_NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  if(LOUPE_FUZZ)
    list(TRANSFORM F_INSTRUMENT PREPEND ${PROJECT_SOURCE_DIR}/)
    add_executable(${F_NAME}_libfuzzer ${F_SOURCE} ${F_INSTRUMENT})
    target_compile_definitions(${F_NAME}_libfuzzer PRIVATE LP_FUZZ_LIBFUZZER)
    target_compile_options(${F_NAME}_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${F_NAME}_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${F_NAME}_libfuzzer PRIVATE ${F_LIBS} lp_core m)
    target_include_directories(${F_NAME}_libfuzzer PRIVATE ${PROJECT_SOURCE_DIR}
                               ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
endfunction()

lp_add_fuzz_target(NAME fuzz_llama2c SOURCE fuzz_llama2c.c LIBS lp_inspect PkgConfig::JANSSON
                   INSTRUMENT inspect/llama2c.c inspect/arch_load.c inspect/weights.c)
lp_add_fuzz_target(NAME fuzz_encode SOURCE fuzz_encode.c LIBS lp_inspect
                   INSTRUMENT inspect/tokenizer.c inspect/tokenizer_json.c inspect/unicode.c)
lp_add_fuzz_target(NAME fuzz_st_index SOURCE fuzz_st_index.c LIBS lp_inspect PkgConfig::JANSSON
                   INSTRUMENT inspect/weights.c inspect/safetensors.c)

# Replays: seeds + regressions of the new targets, with ../shared's real files when present.
set(lp_llama2c_inputs ${lp_fuzz_dir}/llama2c ${lp_fuzz_dir}/llama2c/regress)
foreach(seed models/stories260K/stories260K.bin models/stories260K/tok512.bin)
  if(EXISTS ${LOUPE_SHARED_DIR}/${seed})
    list(APPEND lp_llama2c_inputs ${LOUPE_SHARED_DIR}/${seed})
  endif()
endforeach()
add_test(NAME fuzz_llama2c_replay COMMAND fuzz_llama2c ${lp_llama2c_inputs})
add_test(NAME fuzz_encode_replay COMMAND fuzz_encode ${lp_fuzz_dir}/encode ${lp_fuzz_dir}/encode/regress)
add_test(NAME fuzz_st_index_replay COMMAND fuzz_st_index ${lp_fuzz_dir}/st_index ${lp_fuzz_dir}/st_index/regress)
set_tests_properties(fuzz_llama2c_replay fuzz_encode_replay fuzz_st_index_replay PROPERTIES LABELS "fuzz"
  ENVIRONMENT "${lp_fuzz_env}")

# The owners' targets replay files, not folders: hand them this folder's seeds and regressions.
# Deferred to the end of tests/ because their fragments are included after this one.
function(lp_add_fuzz_corpus_tests)
  foreach(target weights tokenizer gguf arch leak_mask)
    file(GLOB corpus_files CONFIGURE_DEPENDS ${lp_fuzz_dir}/${target}/*.* ${lp_fuzz_dir}/${target}/regress/*)
    list(FILTER corpus_files EXCLUDE REGEX "/\\.gitkeep$")
    if(corpus_files AND TARGET fuzz_${target})
      add_test(NAME fuzz_${target}_corpus COMMAND fuzz_${target} ${corpus_files})
      set_tests_properties(fuzz_${target}_corpus PROPERTIES LABELS "fuzz" ENVIRONMENT "${lp_fuzz_env}")
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL lp_add_fuzz_corpus_tests)
