#!/bin/bash
# Bring up a test cluster of NODES "nodes" on this machine (root): network namespaces node0..N-1
# on bridge ddpbr0 (10.77.0.1/24, no uplink, no NAT: the nodes reach nothing outside), each with
# interface ddp0 at 10.77.0.(10+i) and its own sshd (key only, strict host keys).
# After ../shared/testbed.md. Tear down with down.sh (idempotent).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TB=${TESTBED:-/tmp/ddpctl-tb}; export TESTBED=$TB
NODES=${NODES:-3}
ip link show ddpbr0 >/dev/null 2>&1 && { echo "ddpbr0 exists: run $HERE/down.sh first" >&2; exit 1; }
mkdir -p "$TB/state" "$TB/etc" "$TB/bin"
install -m 755 "$HERE/nodeexec" "$TB/bin/nodeexec"
: > "$TB/state/created-dirs"
for d in /run/netns /run/sshd /run/mount; do [ -e "$d" ] || echo "$d" >> "$TB/state/created-dirs"; done

# ---- network ---------------------------------------------------------------
ip link add ddpbr0 type bridge
ip addr add 10.77.0.1/24 dev ddpbr0
ip link set ddpbr0 up
{ echo "127.0.0.1 localhost"; echo "10.77.0.1 testbed-host"; } > "$TB/etc/hosts"
for i in $(seq 0 $((NODES-1))); do
  n=node$i; ip=10.77.0.$((10+i))
  ip netns add $n
  ip link add vnode$i type veth peer name ddp0 netns $n
  ip link set vnode$i master ddpbr0
  ip link set vnode$i up
  ip -n $n link set lo up
  ip -n $n addr add $ip/24 dev ddp0
  ip -n $n link set ddp0 up
  echo "$ip $n" >> "$TB/etc/hosts"
  mkdir -p "$TB/nodes/$n/home"
done

# ---- ssh (the user's key and known_hosts, as on a real cluster's login) -----
mkdir -p "$TB/ssh" /run/sshd; chmod 700 "$TB/ssh"
[ -f "$TB/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C testbed -f "$TB/ssh/id_ed25519"
install -m 600 "$TB/ssh/id_ed25519.pub" "$TB/ssh/authorized_keys"
: > "$TB/ssh/known_hosts"; : > "$TB/ssh/ssh_config"
for i in $(seq 0 $((NODES-1))); do
  n=node$i; ip=10.77.0.$((10+i)); d=$TB/nodes/$n
  [ -f "$d/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C "$n" -f "$d/ssh_host_ed25519_key"
  cat > "$d/sshd_config" <<EOC
ListenAddress $ip:22
HostKey $d/ssh_host_ed25519_key
PidFile $d/sshd.pid
AuthorizedKeysFile $TB/ssh/authorized_keys $d/home/.ssh/authorized_keys
# StrictModes yes rejects keys under /tmp ("bad ownership or modes for directory /tmp")
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
SetEnv TESTBED_NODE=$n TESTBED_NODE_DIR=$d
Subsystem sftp /usr/lib/openssh/sftp-server
EOC
  echo "$n,$ip $(cut -d' ' -f1,2 "$d/ssh_host_ed25519_key.pub")" >> "$TB/ssh/known_hosts"
  printf 'Host %s %s\n  HostName %s\n' "$n" "$ip" "$ip" >> "$TB/ssh/ssh_config"
  /usr/sbin/sshd -t -f "$d/sshd_config"
  "$TB/bin/nodeexec" $n /usr/sbin/sshd -f "$d/sshd_config" -E "$d/sshd.log"
done
cat >> "$TB/ssh/ssh_config" <<EOC
Host *
  User root
  IdentityFile $TB/ssh/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $TB/ssh/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
EOC
for i in $(seq 0 $((NODES-1))); do
  for _ in $(seq 50); do ssh -F "$TB/ssh/ssh_config" node$i true 2>/dev/null && break; sleep 0.1; done
  ssh -F "$TB/ssh/ssh_config" node$i true
done
echo "test cluster up: $NODES node(s) under $TB"
