#!/bin/sh
# The CLI parses arguments, reads settings and prints; it composes a node
# through store/node.h and the modules' public headers, never through a
# module's internals (a header named *_int.h). Usage: cli_no_internals.sh SRCDIR
set -eu
cd "$1"
found=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]*_int\.h"' impl/cli/*.c impl/cli/*.h || true)
if [ -n "$found" ]; then
  echo "cli_no_internals: impl/cli includes a module's internals; use store/node.h or a public header:" >&2
  echo "$found" >&2
  exit 1
fi
echo "cli_no_internals: impl/cli includes no *_int.h header"
