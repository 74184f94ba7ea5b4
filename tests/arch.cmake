# The model description (inspect/arch*.c, hf_config.c, yaml_card.c): unit cases need only the
# source tree; the golden ones read ../shared and skip without it.
lp_add_cmocka_test(NAME test_arch SOURCES test_arch.c LIBS lp_inspect LABELS unit)
lp_add_cmocka_test(NAME test_arch_golden SOURCES test_arch.c LIBS lp_inspect LABELS unit golden)
if(TARGET test_arch_golden)
  target_compile_definitions(test_arch_golden PRIVATE LP_ARCH_GOLDEN)
endif()
