# The forward pass, the trace store and `loupe trace` (trace/trace.h).
lp_add_cmocka_test(NAME test_forward SOURCES test_forward.c ref_forward.c
                   LIBS lp_trace lp_inspect LABELS unit golden)
lp_add_cmocka_test(NAME test_store SOURCES test_store.c ref_forward.c
                   LIBS lp_trace lp_inspect LABELS unit golden)
lp_add_cli_test(NAME cli_trace SCRIPT cli_trace.sh LABELS cli golden)
