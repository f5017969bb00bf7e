#!/bin/sh
# Launches a cluster the way ps-lite users do: a scheduler, servers and
# workers, `rkv node` for each, told nothing but ps-lite's DMLC_* variables
# (no server id, no cluster file: the scheduler numbers the servers).
# Exits 0 only if every process exited 0; each process's output goes to
# OUT.<role><k>. Usage: launch_env.sh RKV_BIN ROOT_PORT [SERVERS [WORKERS [OUT]]]
# With NODE_HOSTS="h1 h2" the servers and workers are spread over those
# addresses (DMLC_NODE_HOST, round robin): one machine per address. Every
# process is bounded (timeout 120 s): a failed launch ends, its servers'
# segments are removed.
set -u
bin=$1
S=${3:-2} W=${4:-2} out=${5:-/dev/null}
export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$2 DMLC_NUM_SERVER=$S DMLC_NUM_WORKER=$W
export RKV_ROWS=300 RKV_ROUNDS=1 RKV_VALUE_BYTES=4096 RKV_TIMEOUT_MS=20000
hosts=${NODE_HOSTS:-}
nh=$(echo $hosts | wc -w)
host() { # the k-th node of a role gets the (k mod nh)-th address
  [ "$nh" -eq 0 ] || echo "DMLC_NODE_HOST=$(echo $hosts | cut -d' ' -f$(($1 % nh + 1)))"
}
o() { [ "$out" = /dev/null ] && echo /dev/null || echo "$out.$1"; }
pids=""
DMLC_ROLE=scheduler timeout 120 "$bin" node >"$(o scheduler)" 2>&1 & pids="$pids $!"
k=0
while [ $k -lt "$S" ]; do
  env DMLC_ROLE=server $(host $k) timeout 120 "$bin" node >"$(o server$k)" 2>&1 & pids="$pids $!"
  k=$((k + 1))
done
k=0
while [ $k -lt "$W" ]; do
  env DMLC_ROLE=worker $(host $k) timeout 120 "$bin" node >"$(o worker$k)" 2>&1 & pids="$pids $!"
  k=$((k + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
[ $rc -eq 0 ] || rm -f /dev/shm/rkv-$(($2 + 1))-*
exit $rc
