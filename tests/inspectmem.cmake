# `loupe inspect` memory with many tensors (issue 7): the streamed --json document equals the
# dumped report tree byte for byte (test_inspect_stream), and a 300,000-tensor file stays under
# 6x its size in peak RSS for inspect, --json and --stats (cli_inspect_many).
lp_add_cmocka_test(NAME test_inspect_stream SOURCES test_inspect_stream.c LIBS lp_inspect PkgConfig::JANSSON LABELS unit golden)
lp_add_cli_test(NAME cli_inspect_many SCRIPT cli_inspect_many.sh LABELS cli slow)
