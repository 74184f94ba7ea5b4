# render/: pictures of planted maps read back pixel by pixel; the CLI's exit codes and gallery.
lp_add_cmocka_test(NAME test_render SOURCES test_render.c LIBS lp_render LABELS unit)
lp_add_cli_test(NAME cli_render SCRIPT cli_render.sh LABELS cli)
