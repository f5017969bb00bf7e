#!/bin/sh
# A layer's include path reaches the layers below it and no other (the
# top-level CMakeLists.txt, "Layers"): each header after ok: must compile
# when included by a file of the layer, and each after no: must fail for
# want of the file, not for a slip in the probe.
# Usage: layer_include.sh CC SRCDIR "INCDIR;INCDIR..." ok:HEADER... no:HEADER...
set -eu
cc=$1 src=$2 dirs=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
incs=$(printf '%s' "$dirs" | tr ';' '\n' | sed '/^$/d; s/^/-I/')
bad=0
for c in "$@"; do
  want=${c%%:*} h=${c#*:}
  # A header that does not exist would fail for the wrong reason.
  if [ ! -e "$src/impl/$h" ] && [ ! -e "$src/$h" ]; then
    echo "layer_include: $h is not in the tree" >&2
    exit 2
  fi
  printf '#include "%s"\nint layer_probe;\n' "$h" >"$tmp/probe.c"
  # shellcheck disable=SC2086 # one -I per word
  if "$cc" -std=c11 -D_GNU_SOURCE -fsyntax-only $incs "$tmp/probe.c" 2>"$tmp/err"; then
    got=ok
  elif grep -q -e "$h: No such file" -e "'$h' file not found" "$tmp/err"; then
    got=no
  else
    got=error
  fi
  if [ "$got" != "$want" ]; then
    echo "layer_include: #include \"$h\": want $want, got $got" >&2
    sed 's/^/  /' "$tmp/err" >&2
    bad=1
  else
    echo "#include \"$h\": $got"
  fi
done
exit $bad
