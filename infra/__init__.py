"""ddpctl's library: specs, state, providers and launchers. Nothing here imports torch, boto3 or
ansible at module level; the CLI (``ddpctl.main``) is a thin layer over it."""
