# `loupe synth` (render/synth.h): the model loads, its tokenizer gives whole words, the forward
# pass finds every planted head (and fails to on deliberately broken plantings); the CLI.
lp_add_cmocka_test(NAME test_synth SOURCES test_synth.c LIBS lp_render lp_trace lp_inspect LABELS unit)
lp_add_cli_test(NAME cli_synth SCRIPT cli_synth.sh LABELS cli)
