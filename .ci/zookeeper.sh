# shellcheck shell=bash
# Sourced by .ci scripts: a throwaway standalone ZooKeeper on loopback.
#   zk_start DIR   starts one with its data and log in DIR, waits until it
#                  answers, sets zk_pid and exports ZKLOCK_ZOOKEEPER
#   zk_stop        stops it (safe to call when none was started)
# Every wait is bounded; on failure zk_start prints the server's log and
# returns 1.

zk_pid=

zk_start() {
  local dir=$1 port='' candidate reply=''
  for candidate in $(seq 22181 22281); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then port=$candidate; break; fi
  done
  if [ -z "$port" ]; then
    echo "no free port in 22181-22281 for ZooKeeper" >&2
    return 1
  fi
  cat >"$dir/zoo.cfg" <<CFG
tickTime=200
minSessionTimeout=400
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
CFG
  java -Xmx128m -cp /usr/share/java/zookeeper.jar \
    org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$dir/zk.log" 2>&1 &
  zk_pid=$!
  # A probe sent while the server is still starting is sometimes never
  # answered, so each one gives up after a second and the next one tries again.
  for _ in $(seq 1 150); do
    reply=$(timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && echo ruok >&3 && cat <&3" 2>/dev/null || true)
    [ "$reply" = imok ] && break
    kill -0 "$zk_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$reply" != imok ]; then
    cat "$dir/zk.log" >&2
    echo "ZooKeeper did not start; its log is above" >&2
    return 1
  fi
  export ZKLOCK_ZOOKEEPER="127.0.0.1:$port"
}

zk_stop() {
  if [ -n "$zk_pid" ]; then
    kill "$zk_pid" 2>/dev/null || true
    # The JVM ends with 143 on SIGTERM; that is not the caller's status.
    wait "$zk_pid" 2>/dev/null || true
    zk_pid=
  fi
}
