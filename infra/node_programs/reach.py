"""One node's part of the reachability check: listen on the port, connect to every peer on it.

argv: PORT ME PEERS EXPECT SECONDS [strict]. Listens on ME:PORT (unless EXPECT is 0: before a
run, the other nodes only connect to the head's port, where the run's rendezvous store listens),
connects to each of PEERS (comma-separated) on PORT until it succeeds or SECONDS run out, and
stays until EXPECT peers have connected to it (or time runs out). Prints one line per peer,
``REACH ME PEER ok`` or ``REACH ME PEER error: REASON`` (``REACH ME ME error: ...`` when it cannot listen). Exits 0, or
with ``strict`` 1 when it could not listen or reach a peer.
"""

from __future__ import annotations

import socket
import sys
import threading
import time


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    port, me, expect, seconds = int(args[0]), args[1], int(args[3]), float(args[4])
    peers = [p for p in args[2].split(",") if p]
    strict, failed = args[5:] == ["strict"], []
    deadline = time.time() + seconds
    accepted = []
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        if expect:
            srv.bind((me, port))
            srv.listen(64)
            srv.settimeout(0.05)
    except OSError as e:
        print(f"REACH {me} {me} error: cannot listen on port {port}: {e}", flush=True)
        expect = 0
        failed.append(me)

    def serve() -> None:
        while len(accepted) < expect and time.time() < deadline:
            try:
                conn, _ = srv.accept()
                conn.close()
                accepted.append(1)
            except OSError:
                pass

    server = threading.Thread(target=serve)
    server.start()
    for peer in peers:
        error = "timed out"
        while time.time() < deadline:
            try:
                socket.create_connection((peer, port), timeout=1).close()
                error = None
                break
            except OSError as e:
                error = e.strerror or str(e)
                time.sleep(0.02)
        print(f"REACH {me} {peer} {'ok' if error is None else 'error: ' + error}", flush=True)
        if error is not None:
            failed.append(peer)
    server.join()
    srv.close()
    return 1 if strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
