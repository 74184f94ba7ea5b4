# `loupe leak` (trace/leak.h): mask tensors the tests write (npy and safetensors), the engine's
# masks cell by cell, each injected fault caught and named on stories260K, and the CLI.
lp_add_cmocka_test(NAME test_leak SOURCES test_leak.c ref_forward.c LIBS lp_trace lp_inspect LABELS unit golden)
lp_add_cli_test(NAME cli_leak SCRIPT cli_leak.sh LABELS cli golden)
