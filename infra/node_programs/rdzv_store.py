"""A run's c10d rendezvous store, hosted on the head node apart from every torchrun agent.

torchrun's c10d rendezvous keeps its state in a ``TCPStore``. Hosted by the head node's agent
(``is_host=1``), the store ends when that agent does: agents still on their way out (the exit
barrier, closing the rendezvous) then print ``recvVector failed`` tracebacks on a run that
succeeded, and the run cannot outlive the head agent. ddpctl starts this program before the agents,
every agent joins it as a client (``is_host=0``), and ddpctl stops it once the last agent has left.

argv: HOST PORT [RDZV_ID]. HOST is the address the agents reach it at. It listens on PORT on every
address at once and prints ``LISTENING HOST:PORT``, then imports torch (seconds) and hands the
listening socket to the store (clients that connect meanwhile wait in its backlog), and prints
``READY HOST:PORT``. It then lives until SIGTERM or SIGINT, and exits 0. Given the rendezvous id
(torchrun's ``--rdzv-id``), it reads the rendezvous state every second meanwhile and, as it stops,
prints ``JOINED ADDR:PID ...``: every agent that was ever in the rendezvous (an agent whose join
timed out has removed itself by then), so the launcher can name a node that never joined. When it
cannot start (the port in use, no torch): one ``ERROR ...`` line, exit 1.

Runs with the head node's Python, the one its torchrun runs with: it imports torch.
"""

from __future__ import annotations

import pickle
import signal
import socket
import sys

STOP = {signal.SIGTERM, signal.SIGINT}


def listen(host: str, port: int) -> socket.socket:
    """PORT on every address of the family of HOST, as torch's own store would listen."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::" if family == socket.AF_INET6 else "", port))
    sock.listen(512)
    return sock


def serve(host: str, port: int, sock: socket.socket):
    """torch's TCPStore on the listening socket. Its libuv backend (the default) takes one over in
    the versions ddpctl installs, 2.9 and later (pytorch#150215); older ones get the classic
    backend, which always could."""
    from datetime import timedelta

    import torch
    from torch.distributed import TCPStore

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2] if p.isdigit())
    options = {"is_master": True, "wait_for_workers": False, "timeout": timedelta(seconds=60)}
    return TCPStore(host, port, master_listen_fd=sock.detach(), use_libuv=version >= (2, 9), **options)


def members(backend) -> set[str]:
    """``ADDR:PID`` of every agent in the rendezvous now (a participant, waiting or redundant), read
    as each agent reads it: through torch's c10d rendezvous backend on this store (``backend``)."""
    try:
        got = backend.get_state()  # (the pickled state, its token), None before the first agent
        if got is None:
            return set()
        state = pickle.loads(got[0])
        found = set(state.participants) | set(state.wait_list) | set(state.redundancy_list) | set(state.last_heartbeats)
        return {f"{node.addr}:{node.pid}" for node in found}
    except Exception:  # another torch's layout: nothing to add
        return set()


def rendezvous(store, rdzv_id: str):
    """torch's c10d rendezvous backend for ``rdzv_id`` on this store (what the agents use), or None."""
    try:
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

        return C10dRendezvousBackend(store, rdzv_id)
    except Exception:  # another torch's layout: no names, the run goes on
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    host, port = args[0], int(args[1])
    rdzv_id = args[2] if len(args) > 2 else ""
    # Blocked before torch starts the store's threads, which inherit the mask: a stop signal stays
    # pending (even one sent while torch is being imported) until sigwait below takes it.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP)
    try:
        sock = listen(host, port)
    except OSError as e:
        print(f"ERROR cannot listen on port {port}: {e.strerror or e}", flush=True)
        return 1
    print(f"LISTENING {host}:{port}", flush=True)
    try:
        store = serve(host, port, sock)
    except ImportError as e:
        print(f"ERROR {sys.executable} cannot import torch.distributed: {e}", flush=True)
        return 1
    except (RuntimeError, ValueError, TypeError) as e:  # DistNetworkError is a RuntimeError
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"ERROR the store did not start on port {port}: {reason}", flush=True)
        return 1
    print(f"READY {host}:{port}", flush=True)
    backend = rendezvous(store, rdzv_id) if rdzv_id else None
    joined: set[str] = set()
    while signal.sigtimedwait(STOP, 1.0) is None:
        if backend is not None:
            joined |= members(backend)
    if backend is not None:
        joined |= members(backend)
        print(f"JOINED {' '.join(sorted(joined))}".rstrip(), flush=True)
    del store  # the server stops: its clients are gone by now
    return 0


if __name__ == "__main__":
    sys.exit(main())
