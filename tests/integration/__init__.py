"""Tests that use real parts: processes, torchrun over gloo, sshd nodes in network namespaces, Slurm, moto's server, the EC2 twin."""
