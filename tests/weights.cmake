# Tensor catalogue, .npy reader and `loupe inspect` (inspect/weights.c, safetensors.c, llama2c.c,
# roles.c, npy.c, cmd_inspect.c). Golden cases skip themselves when ../shared is absent.
lp_add_cmocka_test(NAME test_weights SOURCES test_weights.c ref_forward.c LIBS lp_inspect PkgConfig::JANSSON LABELS unit golden)
lp_add_cmocka_test(NAME test_npy SOURCES test_npy.c LIBS lp_inspect LABELS unit golden)
lp_add_cli_test(NAME cli_inspect SCRIPT cli_inspect.sh LABELS cli golden)
