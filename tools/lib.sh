# Process helpers shared by tools/services.sh and tools/kube.sh (sourced; each defines `say`).

# proc_alive PID: running and not a zombie.
proc_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st="$(ps -o stat= -p "$1" 2>/dev/null || true)"
  [ -n "$st" ] && [ "${st#Z}" = "$st" ]
}

# pid_alive PIDFILE: the process it names is alive.
pid_alive() { [ -f "$1" ] && proc_alive "$(cat "$1" 2>/dev/null)"; }

# stop_pidfile NAME PIDFILE: SIGTERM, wait up to 15 s, then SIGKILL; removes the pidfile.
stop_pidfile() {
  local name=$1 pf=$2 pid i
  if pid_alive "$pf"; then
    pid="$(cat "$pf")"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 150); do proc_alive "$pid" || break; sleep 0.1; done
    if proc_alive "$pid"; then
      say "$name (pid $pid) did not stop on SIGTERM; killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    say "$name stopped"
  else
    say "$name not running"
  fi
  rm -f "$pf"
}
