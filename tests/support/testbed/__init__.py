"""The test cluster (``cluster.py``, with ``up.sh``, ``down.sh`` and ``nodeexec``) and the EC2 twin (``twin.py``)."""
