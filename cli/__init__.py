"""ddpctl: multi-node PyTorch DDP on your own AWS account or your own machines."""

__version__ = "0.1.0"
