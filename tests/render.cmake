# render/: pictures of planted maps read back pixel by pixel; the CLI's exit codes and gallery.
lp_add_cmocka_test(NAME test_render SOURCES test_render.c LIBS lp_render LABELS unit)
lp_add_cli_test(NAME cli_render SCRIPT cli_render.sh LABELS cli)
# Under LOUPE_SANITIZE, LeakSanitizer would report the font libraries' process-wide caches.
if(TARGET test_render)
  set_property(TEST test_render APPEND PROPERTY ENVIRONMENT
    "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/render.lsan.supp:print_suppressions=0")
endif()
set_property(TEST cli_render APPEND PROPERTY ENVIRONMENT
  "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/render.lsan.supp:print_suppressions=0")
