#!/bin/sh
# The shared library exports exactly the functions rkv.h declares: nothing
# internal (it is built with -fvisibility=hidden), and nothing of the header
# missing (a declaration without RKV_API). And the static library defines
# no global symbol outside rkv_: a static link puts every one of them beside
# the user's own (cmd_get_u64 and port_hostmem_left clashed with a user's
# helpers of those names, an outside tester).
# Usage: check_exports.sh LIBRKV_SO RKV_H [CC [LIBRKV_A]]
set -eu
lib=$1 hdr=$2 cc=${3:-cc} archive=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Declarations, from the preprocessed header (comments gone): every
# identifier rkv_* directly followed by '(' (the handler typedef's name is
# followed by ')').
"$cc" -E -P -x c "$hdr" | grep -o '\brkv_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*($//' |
  sort -u >"$tmp/header"
# Defined dynamic symbols, less the linker's own and those a coverage or
# sanitizer build adds (libgcov exports mangle_path).
nm -D --defined-only "$lib" | awk '{print $NF}' |
  grep -v -E '^(_init|_fini|_edata|_end|__bss_start|mangle_path|__gcov_.*|__asan_.*|__ubsan_.*|__sanitizer_.*|__llvm_.*)$' |
  sort -u >"$tmp/lib"
if ! cmp -s "$tmp/header" "$tmp/lib"; then
  echo "exported by $lib but not declared in $hdr:"
  comm -13 "$tmp/header" "$tmp/lib" | sed 's/^/  /'
  echo "declared in $hdr but not exported:"
  comm -23 "$tmp/header" "$tmp/lib" | sed 's/^/  /'
  exit 1
fi
echo "check_exports: $(wc -l <"$tmp/lib") symbols, exactly the functions of $(basename "$hdr")"
# The header as the users' compilers take it: strict ISO C from C89 (a
# trailing comma in an enum broke -std=c89 -pedantic-errors, an outside
# tester) and, where there is one, C++.
printf '#include "%s"\nint rkv_header_only;\n' "$hdr" >"$tmp/h.c"
for std in c89 c99 c11; do
  "$cc" -std=$std -pedantic-errors -Wall -Wextra -Werror -fsyntax-only "$tmp/h.c" ||
    { echo "$(basename "$hdr") does not compile with -std=$std -pedantic-errors"; exit 1; }
done
if command -v c++ >/dev/null 2>&1; then
  cp "$tmp/h.c" "$tmp/h.cc"
  c++ -std=c++11 -pedantic-errors -Wall -Wextra -Werror -fsyntax-only "$tmp/h.cc" ||
    { echo "$(basename "$hdr") does not compile as C++11"; exit 1; }
fi
echo "check_exports: $(basename "$hdr") compiles as ISO C89, C99, C11$(command -v c++ >/dev/null 2>&1 && echo ' and C++11')"
if [ -n "$archive" ]; then
  # nm's failure (an unreadable archive) must not pass as "nothing outside".
  nm -g --defined-only "$archive" >"$tmp/archive"
  awk 'NF == 3 { print $3 }' "$tmp/archive" |
    grep -v -E '^(rkv_.*|mangle_path|__gcov_.*|__asan_.*|__odr_asan[._].*|__ubsan_.*|__tsan_.*|__sanitizer_.*|__llvm_.*|__prof[cdnv]_.*)$' |
    sort -u >"$tmp/outside" || true
  [ -s "$tmp/archive" ] || { echo "nm listed nothing in $archive"; exit 1; }
  if [ -s "$tmp/outside" ]; then
    echo "defined globally by $archive without the rkv_ prefix:"
    sed 's/^/  /' "$tmp/outside"
    exit 1
  fi
  echo "check_exports: $(basename "$archive") defines no global outside rkv_"
fi
