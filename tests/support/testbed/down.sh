#!/bin/bash
# Tear the test cluster down: daemons from our pid files, every process inside our namespaces,
# the namespaces, veths and bridge, and the runtime dirs up.sh created. Idempotent.
TB=${TESTBED:-/tmp/ddpctl-tb}
alive() {   # running and not a zombie (reparented daemons are reaped late)
  local st; st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; case "$st" in Z*) return 1;; esac
}
stop_pidfile() {
  local f=$1 p; [ -s "$f" ] || return 0; p=$(cat "$f")
  if alive "$p"; then
    kill -TERM "$p"
    for _ in $(seq 50); do alive "$p" || break; sleep 0.1; done
    alive "$p" && kill -KILL "$p"
  fi
  rm -f "$f"
}
if [ -s "$TB/slurm/slurmctld.pid" ] && alive "$(cat "$TB/slurm/slurmctld.pid")"; then
  SLURM_CONF=$TB/slurm/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null | xargs -r env SLURM_CONF=$TB/slurm/slurm.conf timeout 5 scancel 2>/dev/null
fi
for f in "$TB"/nodes/*/slurmd.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
stop_pidfile "$TB/slurm/slurmctld.pid"
for f in "$TB"/nodes/*/sshd.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
stop_pidfile "$TB/munge/munged.pid"
rm -f "$TB/munge/munge.socket" "$TB/munge/munge.socket.lock"
for s in "$TB"/ansible-cp/*; do [ -S "$s" ] && ssh -o ControlPath="$s" -O exit dummy 2>/dev/null; done
for ns in $(ip netns list 2>/dev/null | awk '/^(node|ec2-)[0-9]+/{print $1}'); do
  pids=$(ip netns pids "$ns"); [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
done
sleep 0.3
for ns in $(ip netns list 2>/dev/null | awk '/^(node|ec2-)[0-9]+/{print $1}'); do
  pids=$(ip netns pids "$ns"); [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns del "$ns"
done
for l in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^(vnode|vec2-)[0-9]+$'); do
  ip link del "$l" 2>/dev/null
done
ip link show ddpbr0 >/dev/null 2>&1 && ip link del ddpbr0
if [ -f "$TB/state/created-dirs" ]; then
  while read -r d; do
    case "$d" in
      /run/netns) [ -z "$(ls -A /run/netns 2>/dev/null)" ] && { umount /run/netns 2>/dev/null; rmdir /run/netns 2>/dev/null; } ;;
      /run/sshd|/run/mount) rmdir "$d" 2>/dev/null ;;
    esac
  done < "$TB/state/created-dirs"
  rm -f "$TB/state/created-dirs"
fi
exit 0
