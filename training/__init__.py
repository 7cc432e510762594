"""ddpctl's bundled DDP training jobs (run each with torchrun; see README.md)."""
