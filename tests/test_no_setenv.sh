#!/bin/sh
# test_no_setenv.sh - library code never changes the process environment: no
# setenv, putenv, unsetenv or clearenv calls and no assignment to environ
# under libcore/, memtier/ or models/ (the programs make their process
# settings themselves: apps/procsetup.c; tests/test_threads checks environ at
# run time).
set -u
: "${SRCDIR:?}"
echo "1..1"
hits=$(cd "$SRCDIR" && grep -rnE '(^|[^A-Za-z0-9_])(setenv|putenv|unsetenv|clearenv)[[:space:]]*\(|(^|[^A-Za-z0-9_])environ[[:space:]]*=[^=]' \
    --include='*.c' --include='*.h' --include='*.cu' libcore memtier models)
if [ -z "$hits" ]; then
    echo "ok 1 - no setenv/putenv/unsetenv/clearenv or environ assignment in libcore/, memtier/, models/"
else
    echo "not ok 1 - the libraries change the process environment:"
    echo "$hits" | sed 's/^/#   /'
    exit 1
fi
