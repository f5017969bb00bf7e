#!/bin/sh
# The program under README.md's "Using it" compiles as written (with
# warnings as errors) against rkv.h and librkv.so, and works: run on
# loopback, its two machines' addresses changed to 127.0.0.1 and free
# ports, 4 servers and 4 workers exit 0.
# Usage: readme_snippet.sh README.md INCLUDE_DIR LIBRKV_SO [CC]
# CFLAGS: what the library was built with that its users need too
# (-fsanitize=... in the ASan build: the runtime must come first).
set -eu
CFLAGS=${CFLAGS:-}
readme=$1 inc=$2 lib=$3 cc=${4:-cc}
tmp=$(mktemp -d)
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# The first ```c block after the "## Using it" heading.
awk '/^## Using it/ {u = 1} u && /^```c$/ {c = 1; next} c && /^```$/ {exit} c' "$readme" >"$tmp/app.c"
[ -s "$tmp/app.c" ] || { echo "readme_snippet: no C block under '## Using it' in $readme"; exit 1; }
libdir=$(dirname "$lib")
"$cc" $CFLAGS -std=c11 -Wall -Wextra -Werror -I"$inc" "$tmp/app.c" -o "$tmp/app" -L"$libdir" -lrkv \
  -Wl,-rpath,"$libdir" || { echo "readme_snippet: README.md's program does not compile"; exit 1; }
# The same program on this host: both machines on loopback, distinct ports
# and its own shared-memory names.
port=$((26000 + ($$ % 400) * 5))
grep -q '{"10.0.0.1", 29500, 2}, {"10.0.0.2", 29500, 2}' "$tmp/app.c" ||
  { echo "readme_snippet: the machines line changed; update this test"; exit 1; }
sed -e "s/{\"10.0.0.1\", 29500, 2}, {\"10.0.0.2\", 29500, 2}/{\"127.0.0.1\", $port, 2}, {\"127.0.0.1\", $((port + 2)), 2}/" \
  -e "s/cfg.n_machines = 2;/cfg.n_machines = 2; strcpy(cfg.shm_prefix, \"rkv-readme-$$\");/" \
  "$tmp/app.c" >"$tmp/local.c"
"$cc" $CFLAGS -std=c11 -I"$inc" "$tmp/local.c" -o "$tmp/local" -L"$libdir" -lrkv -Wl,-rpath,"$libdir"
for m in 0 1; do
  for l in 0 1; do
    "$tmp/local" server $m $l & pids="$pids $!"
  done
done
workers=""
for m in 0 0 1 1; do
  "$tmp/local" worker $m & workers="$workers $!"
done
rc=0
for p in $workers; do wait "$p" || rc=1; done
for p in $pids; do wait "$p" || rc=1; done
pids=""
[ "$rc" -eq 0 ] || { echo "readme_snippet: a process of README.md's program failed"; exit 1; }
echo "readme_snippet: README.md's program compiles and runs (4 servers, 4 workers)"
