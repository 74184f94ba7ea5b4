# The safetensors header scanner (inspect/safetensors.c): JSON syntax, strict entries, and the
# peak memory of opening a 300,000-tensor header (issue 7; fails above 6x the file).
lp_add_cmocka_test(NAME test_safetensors_json SOURCES test_safetensors_json.c LIBS lp_inspect LABELS unit)
