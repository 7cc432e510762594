"""The EC2 twin: moto's EC2 API with a real host of the test cluster behind every instance.

    boto3 (ddpctl) --HTTP--> Twin (this proxy, 127.0.0.1:PORT) --HTTP--> moto_server

moto stays the EC2 API: every request goes to it unchanged, and nothing in boto3 or ddpctl is
patched (ddpctl only gets AWS_ENDPOINT_URL). The twin watches what passes:

- ``RunInstances``: for each instance moto launched, a bare node comes up, as an Ubuntu cloud image
  boots: network namespace ``ec2-K`` on the test cluster's bridge, interface ``ens5`` at the private
  address 10.77.0.(100+K) (inside ddpctl's VPC subnet 10.77.0.0/24), a "public" address
  10.78.0.(100+K) that only the controller uses (on the node's ``lo``, reached through a host route:
  the 1:1 NAT of an internet gateway), its own sshd with fresh host keys, user ``ubuntu`` with the
  key pair's public key and passwordless sudo, and its own /etc, /root (overlays on the host's),
  /home and /opt (a baked venv with the pinned PyTorch at /opt/ddpctl/venv, standing in for the
  download from PyTorch's index that the air-gapped nodes cannot make).
- every EC2 answer: moto's invented addresses (its random public IPs, its subnet IPs, and the DNS
  names built from them) are rewritten, per instance, to the node's: no test ever sends a packet to
  an address that is not a namespace node or loopback.
- ``GetConsoleOutput``: the node's boot console, with cloud-init's host-key block as Ubuntu prints it.
- for the nodes, on the bridge (10.77.0.1): the twin again, and an instance metadata service
  (``imds.py``: IMDSv2, an instance profile's role credentials from moto's STS), both named in each
  node's ``~/.aws/config`` (``endpoint_url``, ``ec2_metadata_service_endpoint``), as an image made
  for an account would have them: a node's botocore reaches EC2 and its role as on EC2, with no
  credential on the node.
- ``TerminateInstances`` / ``StopInstances``: the node goes down (terminate also deletes its disk);
  ``StartInstances``: it comes up again. A TerminateInstances that ddpctl did not send stands for
  EC2 taking a spot instance back (tests/integration/test_spot_twin.py): its processes are killed, its
  connections close, the instance is terminated; the next instance gets another address, as on
  EC2. ``POST /moto-api/reset``: every node goes down.
- a node that shuts itself down (``shutdown``, ``poweroff``, ``halt``: stand-ins in the node's own
  /usr/local/sbin, first on sudo's path, that leave a ``powered-off`` file in the node's dir): the
  twin asks moto to do what EC2 does with the instance's ``InstanceInitiatedShutdownBehavior``
  (``terminate``: TerminateInstances; else, EC2's default, StopInstances), with the credentials of
  the RunInstances call that made it, and the node goes down.

Not faithful (say so where it matters): security groups are recorded by moto but not enforced on
the bridge; placement groups and capacity are whatever moto does; instances are "running" at once
(moto) and the node is up before RunInstances answers; /tmp and the host's packages are shared.

Use: ``Twin.start(moto_url)`` in tests (tests/integration/test_aws_twin.py), or ``./dev twin up`` by hand
(``python tests/support/testbed/twin.py serve --moto URL --port P`` runs the proxy in the
foreground). Needs root and a test cluster bridge (tests/support/testbed/up.sh with NODES=0).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import http.client
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRIVATE_NET = "10.77.0"  # the test cluster's bridge network (host side 10.77.0.1)
BRIDGE = f"{PRIVATE_NET}.1"  # this machine on the bridge: the nodes reach the twin's services there
PUBLIC_NET = "10.78.0"  # the twin's "public" addresses, reached from the host only
FIRST_HOST = 100  # node K: .(100 + K)
MAX_NODES = 100
SSH_USER = "ubuntu"


def testbed_dir() -> Path:
    return Path(os.environ.get("TESTBED", "/tmp/ddpctl-tb"))


@dataclass
class Node:
    """One instance's host: where it is and what moto had said about it."""

    slot: int
    instance_id: str
    public: bool
    public_key: str
    moto_addresses: dict[str, str] = field(default_factory=dict)  # moto's address -> the twin's
    up: bool = False
    console: str = ""
    shutdown_behavior: str = "stop"  # RunInstances' InstanceInitiatedShutdownBehavior (EC2's default: stop)
    authorization: str = ""  # the RunInstances call's, to make the node's own stop or terminate call with

    @property
    def name(self) -> str:
        return f"ec2-{self.slot}"

    @property
    def private_ip(self) -> str:
        return f"{PRIVATE_NET}.{FIRST_HOST + self.slot}"

    @property
    def public_ip(self) -> str:
        return f"{PUBLIC_NET}.{FIRST_HOST + self.slot}"

    @property
    def hostname(self) -> str:
        return "ip-" + self.private_ip.replace(".", "-")

    @property
    def dir(self) -> Path:
        return testbed_dir() / "nodes" / self.name

    def rewrite(self, text: str) -> str:
        """``text`` with moto's addresses (dotted, and dashed as in DNS names) replaced by the node's."""
        if not self.moto_addresses or not text:
            return text
        table = dict(self.moto_addresses)
        table.update({k.replace(".", "-"): v.replace(".", "-") for k, v in self.moto_addresses.items()})
        alternatives = "|".join(re.escape(k) for k in sorted(table, key=len, reverse=True))
        # 10.77.0.4 alone (not 10.77.0.45), or dashed after a '-' as in ip-10-77-0-4.ec2.internal
        pattern = re.compile(r"(?:(?<![\d.])|(?<=-))(" + alternatives + r")(?![\d])")
        return pattern.sub(lambda m: table[m.group(1)], text)


def _run(*cmd: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _free_id(path: str, start: int = 1000) -> int:
    used = {int(line.split(":")[2]) for line in Path(path).read_text().splitlines() if line.count(":") >= 2}
    return next(i for i in range(start, 60000) if i not in used)


#: ``ansible-playbook`` as pip writes it into a venv
PLAYBOOK_MAIN = "import sys\nfrom ansible.cli.playbook import main\nsys.exit(main())\n"


def torch_site_packages() -> str:
    """Where this interpreter's torch lives: the baked venv on every node reads it through a .pth."""
    import sysconfig

    return sysconfig.get_paths()["purelib"]


class Hosts:
    """Brings nodes up and down on the test cluster's bridge (as root)."""

    def __init__(self, site_packages: str) -> None:
        self.site_packages = site_packages
        self.nodeexec = str(testbed_dir() / "bin" / "nodeexec")
        #: each node's ~/.aws/config: the twin's EC2 endpoint and metadata service on the bridge ("": none)
        self.aws_config = ""

    # ---- the node's disk -----------------------------------------------------------------------

    def _disk(self, node: Node) -> None:
        d = node.dir
        shutil.rmtree(d, ignore_errors=True)
        for sub in (
            "upper/etc/ssh",
            "upper/etc/sudoers.d",
            "upper/root",
            "work/etc",
            "work/root",
            "home",
            "opt",
            "sbin",
        ):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for name in ("shutdown", "poweroff", "halt"):  # the node's own: the twin stops or terminates it
            stand_in = d / "sbin" / name
            stand_in.write_text(
                "#!/bin/sh\n# the EC2 twin's stand-in: the instance shuts itself down (twin.py)\n"
                f'echo "$(basename "$0") $*" > {d}/powered-off\n'
            )
            os.chmod(stand_in, 0o755)
        etc = d / "upper" / "etc"
        (etc / "hostname").write_text(node.hostname + "\n")
        (etc / "hosts").write_text(
            f"127.0.0.1 localhost\n{node.private_ip} {node.hostname}\n\n"
            "# The following lines are desirable for IPv6 capable hosts\n::1 ip6-localhost ip6-loopback\n"
        )
        uid, gid = _free_id("/etc/passwd"), _free_id("/etc/group")
        (etc / "passwd").write_text(
            Path("/etc/passwd").read_text() + f"{SSH_USER}:x:{uid}:{gid}:Ubuntu:/home/{SSH_USER}:/bin/bash\n"
        )
        (etc / "group").write_text(Path("/etc/group").read_text() + f"{SSH_USER}:x:{gid}:\n")
        shadow = Path("/etc/shadow").read_text() if Path("/etc/shadow").exists() else ""
        (etc / "shadow").write_text(shadow + f"{SSH_USER}:*:20000:0:99999:7:::\n")
        os.chmod(etc / "shadow", 0o640)
        sudoers = etc / "sudoers.d" / "90-cloud-init-users"
        sudoers.write_text(
            f"# Created by cloud-init v. 24.4 on {dt.date.today():%a, %d %b %Y}\n\n"
            f"# User rules for {SSH_USER}\n{SSH_USER} ALL=(ALL) NOPASSWD:ALL\n"
        )
        os.chmod(sudoers, 0o440)
        ssh = etc / "ssh"
        for kind, bits in (("rsa", "3072"), ("ecdsa", "256"), ("ed25519", "256")):
            _run(
                "ssh-keygen",
                "-q",
                "-t",
                kind,
                "-b",
                bits,
                "-N",
                "",
                "-C",
                f"root@{node.hostname}",
                "-f",
                str(ssh / f"ssh_host_{kind}_key"),
            )
        (ssh / "sshd_config").write_text(
            "# An Ubuntu cloud image's sshd, as far as it matters here\n"
            "Port 22\n"
            "HostKey /etc/ssh/ssh_host_rsa_key\nHostKey /etc/ssh/ssh_host_ecdsa_key\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
            f"PidFile {d}/sshd.pid\n"
            "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nX11Forwarding no\nPrintMotd no\n"
            "AcceptEnv LANG LC_*\nSubsystem sftp /usr/lib/openssh/sftp-server\n"
            # not an image's: the nodes share this machine's cores, so each says it has one (nproc
            # honours it, and ddpctl gives each rank that many threads), as up.sh's nodes do
            "SetEnv OMP_NUM_THREADS=1\n"
        )
        home = d / "home" / SSH_USER
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "authorized_keys").write_text(node.public_key.strip() + "\n")
        os.chmod(home, 0o750)
        os.chmod(home / ".ssh", 0o700)
        os.chmod(home / ".ssh" / "authorized_keys", 0o600)
        for path in (home, home / ".ssh", home / ".ssh" / "authorized_keys"):
            os.chown(path, uid, gid)
        if self.aws_config:  # as an image made for this account would have it: AWS settings, no credentials
            (home / ".aws").mkdir(mode=0o700)
            (home / ".aws" / "config").write_text(self.aws_config)
            for path in (home / ".aws", home / ".aws" / "config"):
                os.chown(path, uid, gid)
        os.chmod(d / "home", 0o755)
        os.chmod(d / "opt", 0o755)
        venv = d / "opt" / "ddpctl" / "venv"
        _run("/usr/bin/python3", "-m", "venv", "--without-pip", str(venv))
        lib = next((venv / "lib").glob("python3*")) / "site-packages"
        (lib / "baked-pytorch.pth").write_text(self.site_packages + "\n")
        self._bake_controller(d / "opt" / "ddpctl" / "controller")
        (d / "mounts.sh").write_text(
            "# sourced by nodeexec inside the node's mount namespace: an instance's own disk\n"
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={d}/upper/etc,workdir={d}/work/etc /etc\n"
            f"mount -t overlay overlay -o lowerdir=/root,upperdir={d}/upper/root,workdir={d}/work/root /root\n"
            f"mount --bind {d}/home /home\n"
            f"mount --bind {d}/opt /opt\n"
            f"mount --bind {d}/sbin /usr/local/sbin\n"
            'hostname "$(cat /etc/hostname)"\n'
        )

    def _bake_controller(self, venv: Path) -> None:
        """The head_controller role's venv, baked as the PyTorch one is (the nodes cannot reach PyPI): it
        reads this interpreter's packages (boto3, Ansible, Fabric) through a .pth and has
        ``ansible-playbook`` as pip would install it; the role finds them and installs nothing."""
        _run("/usr/bin/python3", "-m", "venv", "--without-pip", str(venv))
        lib = next((venv / "lib").glob("python3*")) / "site-packages"
        (lib / "baked-controller.pth").write_text(self.site_packages + "\n")
        script = venv / "bin" / "ansible-playbook"
        script.write_text("#!/opt/ddpctl/controller/bin/python\n" + PLAYBOOK_MAIN)  # its path on the node
        script.chmod(0o755)

    def console(self, node: Node) -> str:
        """The boot console: kernel lines, then cloud-init's host key fingerprints and keys."""
        ssh = node.dir / "upper" / "etc" / "ssh"
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S +0000")
        prints, keys = [], []
        for kind in ("ecdsa", "ed25519", "rsa"):
            pub = ssh / f"ssh_host_{kind}_key.pub"
            fp = _run("ssh-keygen", "-l", "-f", str(pub)).stdout.split()
            prints.append(
                f"<14>{dt.datetime.now():%b %d %H:%M:%S} cloud-init: {fp[0]} {fp[1]} root@{node.hostname} {fp[-1]}"
            )
            keys.append(pub.read_text().strip())
        hashes = f"<14>{dt.datetime.now():%b %d %H:%M:%S} cloud-init: " + "#" * 61
        return "\n".join(
            [
                "[    0.000000] Linux version 6.8.0-1021-aws (buildd@lcy02-amd64-054) (x86_64-linux-gnu-gcc-12) #23-Ubuntu SMP",
                "[    0.000000] Command line: BOOT_IMAGE=/vmlinuz-6.8.0-1021-aws root=PARTUUID=1d4e0a5a-01 ro console=tty1 console=ttyS0",
                f"[   11.043567] cloud-init[612]: Cloud-init v. 24.4-0ubuntu1~22.04.1 running 'init' at {stamp}.",
                f"[   11.055310] cloud-init[612]: ci-info: | ens5 | True | {node.private_ip} | 255.255.255.0 | global |",
                "[   12.218012] cloud-init[612]: Generating public/private ed25519 key pair.",
                hashes,
                f"<14>{dt.datetime.now():%b %d %H:%M:%S} cloud-init: -----BEGIN SSH HOST KEY FINGERPRINTS-----",
                *prints,
                f"<14>{dt.datetime.now():%b %d %H:%M:%S} cloud-init: -----END SSH HOST KEY FINGERPRINTS-----",
                hashes,
                "-----BEGIN SSH HOST KEY KEYS-----",
                *keys,
                "-----END SSH HOST KEY KEYS-----",
                f"[   14.601228] cloud-init[1045]: Cloud-init v. 24.4-0ubuntu1~22.04.1 finished at {stamp}. Datasource "
                "DataSourceEc2Local.  Up 14.58 seconds",
                "",
            ]
        )

    # ---- up and down ---------------------------------------------------------------------------

    def boot(self, node: Node, fresh: bool) -> None:
        if fresh:
            self._disk(node)
        n, veth = node.name, f"v{node.name}"
        _run("ip", "netns", "add", n)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "ens5", "netns", n)
        _run("ip", "link", "set", veth, "master", "ddpbr0")
        _run("ip", "link", "set", veth, "up")
        _run("ip", "-n", n, "link", "set", "lo", "up")
        _run("ip", "-n", n, "addr", "add", f"{node.private_ip}/24", "dev", "ens5")
        _run("ip", "-n", n, "link", "set", "ens5", "up")
        if node.public:
            _run("ip", "-n", n, "addr", "add", f"{node.public_ip}/32", "dev", "lo")
            _run("ip", "route", "replace", f"{node.public_ip}/32", "via", node.private_ip, "dev", "ddpbr0")
        # sshd starts with a clean environment: nothing of the controller's (AWS credentials) reaches a node
        clean = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TESTBED": str(testbed_dir())}
        _run(
            self.nodeexec,
            n,
            "/usr/sbin/sshd",
            "-f",
            "/etc/ssh/sshd_config",
            "-E",
            str(node.dir / "sshd.log"),
            env=clean,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((node.private_ip, 22), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{n}: sshd did not come up ({(node.dir / 'sshd.log').read_text()[-500:]})"
                    ) from None
                time.sleep(0.05)
        node.console = self.console(node)
        node.up = True

    def halt(self, node: Node, delete_disk: bool) -> None:
        n = node.name
        for _ in range(2):
            pids = _run("ip", "netns", "pids", n, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            if not pids:
                break
            time.sleep(0.2)
        if node.public:
            _run("ip", "route", "del", f"{node.public_ip}/32", check=False)
        _run("ip", "link", "del", f"v{n}", check=False)
        _run("ip", "netns", "del", n, check=False)
        node.up = False
        if delete_disk:
            shutil.rmtree(node.dir, ignore_errors=True)


class Twin:
    """The instances behind moto: which node is which instance, and what to do on each EC2 call."""

    def __init__(self, moto_url: str, hosts: Hosts) -> None:
        self.moto = urllib.parse.urlsplit(moto_url)
        self.hosts = hosts
        self.nodes: dict[str, Node] = {}
        self.public_keys: dict[str, str] = {}  # key pair name -> public key (ImportKeyPair)
        #: slots of terminated instances: taken again only when no other is free, so that a new
        #: instance gets a new address, as on EC2 (a replaced node's address differs from the old one's)
        self.freed: set[int] = set()
        self.lock = threading.Lock()

    # ---- forwarding ----------------------------------------------------------------------------

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.moto.hostname, self.moto.port, timeout=300)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if method == "POST" and path.rstrip("/") == "/moto-api/reset":
            self.reset()
            return self.forward(method, path, headers, body)
        if "/ec2/aws4_request" not in headers.get("Authorization", headers.get("authorization", "")):
            return self.forward(method, path, headers, body)
        params = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        action = params.get("Action", [""])[0]
        ids = [v[0] for k, v in sorted(params.items()) if re.fullmatch(r"InstanceId(\.\d+)?", k)]
        if action == "ImportKeyPair":
            key = base64.b64decode(params.get("PublicKeyMaterial", [""])[0]).decode()
            self.public_keys[params.get("KeyName", [""])[0]] = key
        if action in ("TerminateInstances", "StopInstances"):
            self.halt(ids, delete=action == "TerminateInstances")
        status, out_headers, out = self.forward(method, path, headers, body)
        if status == 200:
            if action == "RunInstances":
                self.launched(params, out, headers.get("Authorization", headers.get("authorization", "")))
            elif action == "StartInstances":
                self.start(ids)
            elif action == "ModifyInstanceAttribute":  # what the instance does when it shuts itself down
                behavior = params.get("InstanceInitiatedShutdownBehavior.Value", [""])[0]
                with self.lock:
                    for node in (self.nodes.get(iid) for iid in ids):
                        if node is not None and behavior:
                            node.shutdown_behavior = behavior
            out = self.rewrite(action, out)
        return status, out_headers, out

    # ---- what the calls do to nodes ------------------------------------------------------------

    def launched(self, params: dict[str, list[str]], body: bytes, authorization: str) -> None:
        key_name = params.get("KeyName", [""])[0]
        behavior = params.get("InstanceInitiatedShutdownBehavior", ["stop"])[0]
        public_key = self.public_keys.get(key_name, "")
        root = ET.fromstring(body)
        new = []
        with self.lock:
            used = {n.slot for n in self.nodes.values()}
            order = [s for s in range(MAX_NODES) if s not in self.freed] + sorted(self.freed)
            for item in root.iter():
                iid = _text(item, "instanceId")
                if _local(item.tag) != "item" or not iid or iid in self.nodes or _child(item, "instanceState") is None:
                    continue
                slot = next(s for s in order if s not in used)
                used.add(slot)
                public_ip = _text(item, "ipAddress")
                node = Node(
                    slot=slot,
                    instance_id=iid,
                    public=bool(public_ip),
                    public_key=public_key,
                    shutdown_behavior=behavior,
                    authorization=authorization,
                )
                node.moto_addresses[_text(item, "privateIpAddress")] = node.private_ip
                if public_ip:
                    node.moto_addresses[public_ip] = node.public_ip
                node.moto_addresses.pop("", None)
                self.nodes[iid] = node
                new.append(node)
        errors: list[str] = []

        def boot(node: Node) -> None:
            try:
                self.hosts.boot(node, fresh=True)
            except Exception as exc:
                errors.append(f"{node.instance_id}: {exc}")

        threads = [threading.Thread(target=boot, args=(n,)) for n in new]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            sys.stderr.write("twin: nodes did not boot: " + "; ".join(errors) + "\n")

    def instance_at(self, address: str) -> str:
        """The instance whose node has this private address ("" for none): the metadata service's caller."""
        with self.lock:
            return next((n.instance_id for n in self.nodes.values() if n.up and n.private_ip == address), "")

    def halt(self, ids: list[str], delete: bool) -> None:
        for iid in ids:
            node = self.nodes.get(iid)
            if node is None:
                continue
            self.hosts.halt(node, delete_disk=delete)
            if delete:
                with self.lock:
                    self.nodes.pop(iid, None)
                    self.freed.add(node.slot)

    def start(self, ids: list[str]) -> None:
        for iid in ids:
            node = self.nodes.get(iid)
            if node is not None and not node.up:
                self.hosts.boot(node, fresh=False)

    def watch_shutdowns(self, stop: threading.Event) -> None:
        """Nodes that shut themselves down: what EC2 does with their instance, asked of moto."""
        while not stop.wait(0.2):
            with self.lock:
                gone = [n for n in self.nodes.values() if n.up and (n.dir / "powered-off").exists()]
            for node in gone:
                terminate = node.shutdown_behavior == "terminate"
                action = "TerminateInstances" if terminate else "StopInstances"
                self.halt([node.instance_id], delete=terminate)
                (node.dir / "powered-off").unlink(missing_ok=True)
                form = urllib.parse.urlencode(
                    {"Action": action, "Version": "2016-11-15", "InstanceId.1": node.instance_id}
                )
                headers = {
                    "Authorization": node.authorization,
                    "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
                    "X-Amz-Date": dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
                }
                status, _, out = self.forward("POST", "/", headers, form.encode())
                if status != 200:
                    sys.stderr.write(f"twin: {action} of {node.instance_id} (it shut down): {status} {out[:300]!r}\n")

    def reset(self) -> None:
        self.halt(list(self.nodes), delete=True)
        self.public_keys.clear()
        self.freed.clear()

    def rewrite(self, action: str, body: bytes) -> bytes:
        """Each instance's addresses as the twin's, in every element that belongs to one instance."""
        if not self.nodes or b"<" not in body:
            return body
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return body
        changed = False

        def owner(el: ET.Element) -> Node | None:
            attachment = _child(el, "attachment")
            iid = _text(el, "instanceId") or (_text(attachment, "instanceId") if attachment is not None else "")
            return self.nodes.get(iid)

        def walk(el: ET.Element, node: Node | None) -> None:
            nonlocal changed
            node = owner(el) or node
            if node is not None:
                if action == "GetConsoleOutput" and _local(el.tag) == "output" and node.up:
                    el.text = base64.b64encode(node.console.encode()).decode()
                    changed = True
                elif el.text and el.text.strip():
                    new = node.rewrite(el.text)
                    if new != el.text:
                        el.text, changed = new, True
            for child in el:
                walk(child, node)

        def learn(el: ET.Element, node: Node | None) -> None:
            """A public address moto gave an instance since (a stopped one started again gets another,
            as on EC2): the node's own public address, from now on."""
            node = owner(el) or node
            if node is not None and node.public and _local(el.tag) == "ipAddress" and el.text:
                address = el.text.strip()
                if address and address not in node.moto_addresses and address != node.public_ip:
                    node.moto_addresses[address] = node.public_ip
            for child in el:
                learn(child, node)

        learn(root, None)
        walk(root, None)
        if not changed:
            return body
        if root.tag.startswith("{"):
            ET.register_namespace("", root.tag[1:].split("}", 1)[0])
        return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(el: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in el if _local(c.tag) == name), None)


def _text(el: ET.Element, name: str) -> str:
    child = _child(el, name)
    return (child.text or "").strip() if child is not None else ""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    twin: Twin

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        status, out_headers, out = self.twin.handle(self.command, self.path, headers, body)
        self.send_response(status)
        for k, v in out_headers:
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _any

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(moto_url: str, port: int, site_packages: str, ready: Path | None = None) -> None:
    """The twin on loopback for ddpctl here; on the bridge, for the nodes, the same twin and its metadata
    service (``imds.py``), named in each node's ``~/.aws/config``."""
    try:
        from tests.support.testbed import imds
    except ImportError:  # run as a script (TwinProcess, ./dev twin): its own folder is first on sys.path
        import imds  # type: ignore[no-redef]

    twin = Twin(moto_url, Hosts(site_packages))
    handler = type("Handler", (_Handler,), {"twin": twin})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    servers = [server]
    try:
        for_nodes = ThreadingHTTPServer((BRIDGE, 0), handler)
        metadata = imds.server(imds.Imds(twin.instance_at, moto_url), BRIDGE)
    except OSError as exc:  # no bridge (the test cluster is not up): the nodes get neither
        sys.stderr.write(f"twin: nothing on the bridge for the nodes ({exc})\n")
    else:
        for_nodes.daemon_threads = True
        servers += [for_nodes, metadata]
        twin.hosts.aws_config = (
            "[default]\n"
            f"endpoint_url = http://{BRIDGE}:{for_nodes.server_address[1]}\n"
            f"ec2_metadata_service_endpoint = http://{BRIDGE}:{metadata.server_address[1]}/\n"
            # the nodes share this machine's cores with the tests: more than botocore's 1 s, 1 attempt
            "metadata_service_timeout = 10\nmetadata_service_num_attempts = 3\n"
        )
        for each in servers[1:]:
            threading.Thread(target=each.serve_forever, daemon=True).start()

    def stop(*_: object) -> None:
        for each in servers:
            threading.Thread(target=each.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    done = threading.Event()
    threading.Thread(target=twin.watch_shutdowns, args=(done,), daemon=True).start()
    if ready is not None:
        ready.write_text(f"http://127.0.0.1:{server.server_address[1]}\n")
    try:
        server.serve_forever()
    finally:
        done.set()
        twin.reset()  # every node down with the twin


# ---- for tests and ./dev: the twin as a child process ------------------------------------------


class TwinProcess:
    """A running twin (``serve`` in its own process) in front of a moto server."""

    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url

    @classmethod
    def start(cls, moto_url: str, log: Path, port: int = 0) -> TwinProcess:
        ready = log.with_suffix(".url")
        ready.unlink(missing_ok=True)
        out = open(log, "ab")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__)),
                "serve",
                "--moto",
                moto_url,
                "--port",
                str(port),
                "--ready",
                str(ready),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # serve() handles SIGTERM and SIGINT itself, whatever it inherited
        )
        out.close()
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the EC2 twin did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        return cls(proc, ready.read_text().strip())

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    @staticmethod
    def nodes() -> list[str]:
        """The twin's nodes that exist now (network namespaces ec2-K)."""
        out = _run("ip", "netns", "list", check=False).stdout
        return sorted(line.split()[0] for line in out.splitlines() if re.match(r"ec2-\d+\b", line))


def in_test_range(address: str) -> bool:
    """An address of the test cluster (private or the twin's public range): never one outside this machine."""
    ip = ipaddress.ip_address(address)
    return ip in ipaddress.ip_network(f"{PRIVATE_NET}.0/24") or ip in ipaddress.ip_network(f"{PUBLIC_NET}.0/24")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the twin's proxy in the foreground")
    s.add_argument("--moto", required=True, help="the moto server's URL")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--site-packages", default=torch_site_packages(), help="where the baked venv finds torch")
    s.add_argument("--ready", type=Path, help="write the twin's URL here once it listens")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("the EC2 twin needs root (network namespaces, sshd)")
    serve(args.moto, args.port, args.site_packages, args.ready)
    return 0


if __name__ == "__main__":
    sys.exit(main())
