#!/bin/bash
source "$(dirname "$0")/cli_lib.sh"
finish
