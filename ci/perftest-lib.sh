# Shared by ci/softroce-selftest (sourced, with rxe0
# up): the GID index of RKV_HOST on $dev by content, and perftest
# client/server pairs with a listen check and bounded retries. Needs $dev,
# $work and a fail() function from the caller.
# GID index of the IPv4 address (index 0 is the link-local one): look it up by content.
ip_hex=$(printf '%02x%02x:%02x%02x' $(echo "${RKV_HOST:-10.77.0.1}" | tr . ' '))
gid_idx=""
for g in /sys/class/infiniband/$dev/ports/1/gids/*; do
  if [ "$(cat "$g" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$ip_hex" ]; then
    gid_idx=${g##*/}
    break
  fi
done
[ -n "$gid_idx" ] || fail "no GID for ${RKV_HOST:-10.77.0.1} on $dev"

# One client/server pair; the server must be listening before the client starts.
# pair NAME LISTEN_CHECK PERFTEST_ARGS...: sets $work/NAME-{server,client}.log
wait_tcp_listen() {   # PORT
  local hex; hex=$(printf '%04X' "$1")
  awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp
}
wait_cm_listen() {    # PORT
  rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN .*:$1 "
}
pair() {
  local name=$1 check=$2 port=$3 srv i
  shift 3
  timeout 60 "$@" -p "$port" >"$work/$name-server.log" 2>&1 &
  srv=$!
  for i in $(seq 200); do
    "$check" "$port" && break
    kill -0 $srv 2>/dev/null || { echo "$name server exited before listening"; return 1; }
    sleep 0.05
  done
  "$check" "$port" || { echo "$name server not listening on port $port after 10 s"; kill $srv; wait $srv; return 1; }
  sleep 0.5   # give a fresh listener a moment before the first connect
  # A client that is rejected right away (seen now and then with rdma_cm on rxe
  # just after boot) tries again against the same server, 3 attempts in all.
  local st=1 try
  for try in 1 2 3; do
    timeout 60 "$@" -p "$port" "${RKV_HOST:-10.77.0.1}" >"$work/$name-client.log" 2>&1 && { st=0; break; }
    st=$?
    echo "$name client attempt $try failed (status $st): $(grep -m1 -E 'REJECTED|rror|nable' "$work/$name-client.log" || true)"
    kill -0 $srv 2>/dev/null && grep -q REJECTED "$work/$name-client.log" || break
    sleep 1
  done
  [ $st = 0 ] || { kill $srv 2>/dev/null; wait $srv; return 1; }
  wait $srv || { echo "$name server failed (status $?)"; return 1; }
}
# At most one retry of a pair (the emulated RoCE stalls now and then under heavy host load).
pair_retry() {
  local name=$1
  pair "$@" && return 0
  for f in "$work/$name"-*.log; do echo "---- $f"; cat "$f"; done
  echo "$ME: RETRY: $name failed once; running the pair again"
  sleep 1
  pair "$@"
}

