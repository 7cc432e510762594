"""Print the network interface this node reaches ADDRESS through (an IP address or a name).

    python3 route_ifname.py ADDRESS

Needs nothing but Python's standard library and the kernel (no iproute2, no awk or getent): on a
node image without iproute2, Ansible's network facts are empty too (they come from `ip`).
Where ADDRESS is one of this node's own (on the rendezvous node itself, where it routes via lo),
the interface that holds it; otherwise the interface holding the source address the kernel picks
for ADDRESS (a UDP socket "connected" to it sends nothing), which is the one `ip route get`
names. IPv4 addresses per interface from SIOCGIFCONF, IPv6 from /proc/net/if_inet6.
"""

import array
import fcntl
import ipaddress
import socket
import struct
import sys

SIOCGIFCONF = 0x8912


def ipv4_addresses():
    """(interface, address) for every IPv4 address, aliases included (what ifconfig lists)."""
    size = 40 if struct.calcsize("P") == 8 else 32  # struct ifreq
    count = 64
    while True:
        buf = array.array("B", b"\0" * size * count)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            ifconf = struct.pack("iL", len(buf), buf.buffer_info()[0])
            used = struct.unpack("iL", fcntl.ioctl(sock.fileno(), SIOCGIFCONF, ifconf))[0]
        if used < len(buf):
            break
        count *= 2
    data = buf.tobytes()
    for off in range(0, used, size):
        name = data[off : off + 16].split(b"\0", 1)[0].decode()
        yield name.split(":", 1)[0], socket.inet_ntoa(data[off + 20 : off + 24])  # eth0:1 is eth0


def ipv6_addresses():
    try:
        with open("/proc/net/if_inet6") as lines:
            for line in lines:
                fields = line.split()
                yield fields[5], str(ipaddress.ip_address(bytes.fromhex(fields[0])))
    except OSError:
        return


def holder(address):
    ip = ipaddress.ip_address(address)
    found = ipv4_addresses() if ip.version == 4 else ipv6_addresses()
    return next((name for name, addr in found if ipaddress.ip_address(addr) == ip), "")


def main(target):
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(target, None, 0, socket.SOCK_DGRAM)[0]
    except socket.gaierror as exc:
        sys.exit(f"cannot resolve {target}: {exc.strerror}")
    address = sockaddr[0].split("%", 1)[0]
    name = holder(address)
    if not name:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect((address, 9))
            except OSError as exc:
                sys.exit(f"no route to {address}: {exc.strerror}")
            source = sock.getsockname()[0].split("%", 1)[0]
        name = holder(source)
        if not name:
            sys.exit(f"no interface holds {source}, the source address toward {address}")
    print(name)


if __name__ == "__main__":
    main(sys.argv[1])
