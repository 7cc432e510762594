"""Character-level GPT job (run main.py with torchrun)."""
