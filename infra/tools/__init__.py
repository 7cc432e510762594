"""Small tools about this machine's processes and ddpctl itself: processes found by their run's
marker, the SSH connection trace, how ddpctl was installed. May import ``model/``.
"""
