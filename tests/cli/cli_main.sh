#!/usr/bin/env bash
# CLI: top-level help, version, unknown commands and flags.
source "$(dirname "$0")/cli_lib.sh"

expect_status 0 "$LOUPE" --help
expect_stdout_contains "commands:" "$LOUPE" --help
expect_status 0 "$LOUPE" --version
expect_stdout_contains "loupe 0." "$LOUPE" --version
expect_status 2 "$LOUPE"
expect_status 2 "$LOUPE" frobnicate
expect_stderr_contains "unknown command 'frobnicate'" "$LOUPE" frobnicate
expect_status 2 "$LOUPE" --frobnicate
expect_stderr_contains "unknown option '--frobnicate'" "$LOUPE" --frobnicate
for cmd in inspect estimate tokenize trace leak render synth demo bench; do
  expect_status 0 "$LOUPE" help "$cmd"
  expect_stdout_contains "loupe $cmd" "$LOUPE" help "$cmd"
done
expect_status 2 "$LOUPE" help nosuchcommand
finish
