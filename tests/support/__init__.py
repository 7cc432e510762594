"""What the tests and the benchmarks share (never test modules, never conftest.py):

- ``tests.support.cli``: the ``ddpctl`` command in a subprocess, in the foreground or the background,
  and a running command's ``Output``;
- ``tests.support.processes``: ``spawn`` (every child a test or a benchmark may signal), and a
  local run's processes found by their marker;
- ``tests.support.moto``: a moto server on a loopback port, the images it is seeded with, and the
  constants of the AWS tests;
- ``tests.support.testbed``: the test cluster (network namespaces with a real sshd each) and the
  EC2 twin; ``tests.support.twin_env``: ddpctl against the twin; ``tests.support.aws_env``: ddpctl
  against moto's server;
- ``tests.support.specs``: cluster specs planned as ``up`` plans them; ``tests.support.progress``: a
  progress callback that records; ``tests.support.scripts``: training scripts the tests run;
- ``REPO``, ``TRAINING``, ``GOLDEN``: where things are, wherever a test module lives.

Import them from the repository's root (pytest puts it on ``sys.path``; the benchmarks run as
``python -m bench.NAME`` from there).
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parents[2]
#: The bundled training scripts.
TRAINING = REPO / "training"
#: Documents the tests compare with or read (recorded outputs, an AWS price list).
GOLDEN = REPO / "tests" / "golden"
