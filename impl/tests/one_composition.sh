#!/bin/sh
# One file composes a real node (impl/store/node.c: the POSIX port and the
# NIC backend by name) and one the twin's (sim/twin/twin.c: the SimGrid port
# and NIC); every other file of the library, the harness and the CLI takes
# the port and NIC it is given. Backends name themselves (their ops
# tables), and tests compose their own. Usage: one_composition.sh SRCDIR
set -eu
cd "$1"
names='rkv_port_posix_create|rkv_nic_(tcp|verbs|sim)_ops|sim_port_create'
found=$(grep -rlE "\\b($names)\\b" --include='*.c' impl harness sim |
  grep -v -E '^(impl|harness|sim)/tests/' |
  grep -v -E '^(impl/store/node\.c|sim/twin/twin\.c|impl/port/port_posix\.c|impl/nic/nic_(tcp|verbs)\.c|sim/backend/(nic_sim|port_sim)\.c)$' || true)
if [ -n "$found" ]; then
  echo "one_composition: these files name a port or NIC backend; compose in impl/store/node.c:" >&2
  echo "$found" >&2
  exit 1
fi
echo "one_composition: backends are named only by impl/store/node.c and sim/twin/twin.c"
