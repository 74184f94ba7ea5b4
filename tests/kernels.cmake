# Kernels: every ISA against ref, lp_linear on every dtype, attention, thread determinism; and the
# bench command's CLI (bad flags, a tiny run; no timing assertions anywhere).
lp_add_cmocka_test(NAME test_kernels SOURCES test_kernels.c LIBS lp_trace lp_inspect LABELS unit kernels)
lp_add_cli_test(NAME cli_bench SCRIPT cli_bench.sh LABELS cli kernels)
lp_add_cli_test(NAME cli_bench_prefill SCRIPT cli_bench_prefill.sh LABELS cli kernels slow)
