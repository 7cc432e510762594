#!/bin/bash
# Bring up a test cluster of NODES "nodes" on this machine (root): network namespaces node0..N-1
# on bridge ddpbr0 (10.77.0.1/24, no uplink, no NAT: the nodes reach nothing outside), each with
# interface ddp0 at 10.77.0.(10+i) and its own sshd (key only, strict host keys); with
# SLURM_NODES=K > 0 also munged, slurmctld on node0 and slurmd on node0..K-1.
# After ../shared/testbed.md. Tear down with down.sh (idempotent).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TB=${TESTBED:-/tmp/ddpctl-tb}; export TESTBED=$TB
NODES=${NODES:-3}
SLURM_NODES=${SLURM_NODES:-0}
ip link show ddpbr0 >/dev/null 2>&1 && { echo "ddpbr0 exists: run $HERE/down.sh first" >&2; exit 1; }
rm -rf "$TB/nodes"   # every run starts from bare nodes: nothing a previous run configured or left
# no Slurm but the one this run asks for: nodeexec mounts $TB/slurm over a node's /etc/slurm when it
# exists as the node's sshd starts (its slurm.conf is written later, below)
rm -rf "$TB/slurm"; if [ "$SLURM_NODES" -gt 0 ]; then mkdir -p "$TB/slurm"; fi
mkdir -p "$TB/state" "$TB/etc" "$TB/bin"
install -m 755 "$HERE/nodeexec" "$TB/bin/nodeexec"
: > "$TB/state/created-dirs"
for d in /run/netns /run/sshd /run/mount; do [ -e "$d" ] || echo "$d" >> "$TB/state/created-dirs"; done

# ---- network ---------------------------------------------------------------
ip link add ddpbr0 type bridge
ip addr add 10.77.0.1/24 dev ddpbr0
ip link set ddpbr0 up
{ echo "127.0.0.1 localhost"; echo "10.77.0.1 testbed-host"; } > "$TB/etc/hosts"
# a node's root has a plain ~/.bashrc, not this machine's: sshd runs every command through bash,
# which reads ~/.bashrc when started by sshd, and this machine's (pyenv init on the CI image) costs
# 0.1 CPU-s per SSH session, a third of a no-op site.yml run's CPU (nodeexec mounts this over it)
echo "# a test node's ~/.bashrc (tests/support/testbed/up.sh)" > "$TB/etc/bashrc"
# a node's own bin/ first on its PATH (sshd's SetEnv names the node's dir): a test's stand-in
# tools, e.g. an nvidia-smi that lists GPUs the node does not have
# shellcheck disable=SC2016
echo '[ -z "${TESTBED_NODE_DIR:-}" ] || PATH="$TESTBED_NODE_DIR/bin:$PATH"' >> "$TB/etc/bashrc"
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
  # each node its own /etc/hosts (nodeexec mounts it), as real nodes have: the common role edits it
  # on every node at once, and one shared file lost its localhost line to those concurrent writes
  cp "$TB/etc/hosts" "$d/hosts"
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
# SetEnv OMP_NUM_THREADS=1: every node shares this machine's cores, so each says it has one processing
# unit (nproc, which ddpctl asks, honours it): ranks get one thread each, not all cores each
# (3 ranks with 2 threads each on 2 cores took twice the CPU of 1 thread each, spinning).
SetEnv TESTBED_NODE=$n TESTBED_NODE_DIR=$d OMP_NUM_THREADS=1
Subsystem sftp /usr/lib/openssh/sftp-server
# a user other than root (tests/integration/test_without_root.py) has its keys where OpenSSH keeps them
Match User *,!root
  AuthorizedKeysFile .ssh/authorized_keys
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
if [ "$SLURM_NODES" -gt 0 ]; then
  # ---- munge (one daemon; its socket is reached through the shared filesystem) ----
  mkdir -p "$TB/munge"; chmod 755 "$TB/munge"
  [ -f "$TB/munge/munge.key" ] || mungekey --create --keyfile="$TB/munge/munge.key"
  chmod 600 "$TB/munge/munge.key"
  munged --key-file="$TB/munge/munge.key" --socket="$TB/munge/munge.socket" \
    --pid-file="$TB/munge/munged.pid" --log-file="$TB/munge/munged.log" --seed-file="$TB/munge/munged.seed"
  # ---- slurm: no cgroups inside namespaces (see ../shared/testbed.md pitfalls 1-2) ----
  S=$TB/slurm; rm -rf "$S/ctld-state"; mkdir -p "$S/ctld-state"
  HW=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ RealMemory=.*//')
  cat > "$S/slurm.conf" <<EOC
ClusterName=ddpctltest
SlurmctldHost=node0(10.77.0.10)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$TB/munge/munge.socket
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$S/ctld-state
SlurmctldPidFile=$S/slurmctld.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdSpoolDir=$TB/nodes/%n/slurmd-spool
SlurmdPidFile=$TB/nodes/%n/slurmd.pid
SlurmdLogFile=$TB/nodes/%n/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
EOC
  for i in $(seq 0 $((SLURM_NODES-1))); do
    echo "NodeName=node$i NodeHostname=node$i NodeAddr=10.77.0.$((10+i)) $HW RealMemory=1000 State=UNKNOWN" >> "$S/slurm.conf"
    mkdir -p "$TB/nodes/node$i/slurmd-spool"
  done
  echo "PartitionName=debug Nodes=node[0-$((SLURM_NODES-1))] Default=YES MaxTime=INFINITE State=UP" >> "$S/slurm.conf"
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' > "$S/cgroup.conf"
  "$TB/bin/nodeexec" node0 slurmctld -f "$S/slurm.conf"
  for i in $(seq 0 $((SLURM_NODES-1))); do
    "$TB/bin/nodeexec" node$i slurmd -f "$S/slurm.conf" -N node$i
  done
  for _ in $(seq 150); do
    [ "$(SLURM_CONF=$S/slurm.conf sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" = "$SLURM_NODES" ] && break; sleep 0.2
  done
  SLURM_CONF=$S/slurm.conf sinfo -h -N -o '%N %T'
fi
echo "test cluster up: $NODES node(s), $SLURM_NODES with Slurm, under $TB"
