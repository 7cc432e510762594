"""What tests/unit/test_fast_path.py and tests/integration/test_fast_path.py share."""

import importlib.util

import torch

from tests.support import TRAINING


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(f"ddpctl_fast_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


trainer = load_module("trainer", TRAINING / "trainer.py")
gpt = load_module("mingpt_model", TRAINING / "mingpt" / "model.py")
chars = load_module("char_dataset", TRAINING / "mingpt" / "char_dataset.py")
CPU = torch.device("cpu")


def tiny_gpt(vocab_size, attention="sdpa"):
    torch.manual_seed(0)
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, dropout=0.0, attention=attention)
    return gpt.GPT(cfg, vocab_size)
