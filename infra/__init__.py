"""ddpctl's library, in floors; a floor imports only from the floors below it (tests/unit/test_layers.py
walks the imports so this stays true), and nothing here imports torch, boto3 or ansible at module level:

- ``model/`` and ``tools/``: typed values (specs, state, records, errors) and small system tools; no floor below.
- ``node_programs/``: stdlib programs sent to nodes as text; imports nothing of ddpctl.
- ``hosts/``: reaching nodes (inventories, OpenSSH's view of a host, SSH connections, Ansible plays).
- ``launch/``: launch plans (pure) and the executors that carry them out (local, SSH, sbatch).
- ``providers/``: one package per provider behind ``providers/base.py``.
- ``lifecycle/``: a cluster's up, configure and down through its provider.
- ``runs/``: a run from its job to its record, and what reads runs back (logs, metrics, check).

The CLI (``ddpctl.main``) is a thin layer over ``lifecycle/`` and ``runs/``.
"""
