#!/bin/sh
# Launches a 1-machine cluster the way ps-lite users do: roles and sizes from
# DMLC_* variables, `rkv node` for every process. Exits 0 only if every
# process exited 0. Usage: launch_env.sh RKV_BIN BASE_PORT
set -u
bin=$1
export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$2 DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2
export RKV_ROWS=300 RKV_ROUNDS=1 RKV_VALUE_BYTES=4096 RKV_TIMEOUT_MS=20000
DMLC_ROLE=server RKV_SERVER_ID=0 "$bin" node & s0=$!
DMLC_ROLE=server RKV_SERVER_ID=1 "$bin" node & s1=$!
DMLC_ROLE=worker "$bin" node & w0=$!
DMLC_ROLE=worker "$bin" node & w1=$!
rc=0
for p in $w0 $w1 $s0 $s1; do wait $p || rc=1; done
exit $rc
