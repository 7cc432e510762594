"""Character-level dataset: every block_size-long window of a text file, paired with the same
window shifted one character to the right (the next character at every position)."""

import copy

import torch
from torch.utils.data import Dataset


class CharDataset(Dataset):
    def __init__(self, path, block_size, fraction=1.0):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        text = text[: int(len(text) * fraction)]
        if len(text) <= block_size:
            raise ValueError(f"{path}: need more than block_size={block_size} characters, got {len(text)}")
        self.block_size = block_size
        self.itos = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}
        self.vocab_size = len(self.itos)
        self.data = torch.tensor(self.encode(text), dtype=torch.long)

    def encode(self, text):
        return [self.stoi[ch] for ch in text if ch in self.stoi]

    def decode(self, ids):
        return "".join(self.itos[i] for i in ids)

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, i):
        chunk = self.data[i : i + self.block_size + 1]
        return chunk[:-1], chunk[1:]

    # Batches built where the data lives (the Trainer's DeviceBatches): one gather, no per-window Python.
    @property
    def nbytes(self):
        return self.data.nbytes

    def to(self, device):
        """A copy of this dataset with its text on device."""
        other = copy.copy(self)
        other.data = self.data.to(device)
        return other

    def gather(self, idx):
        """The (x, y) batch of the windows that start at idx (a 1-D index tensor on the data's device)."""
        rows = self.data[idx.unsqueeze(1) + torch.arange(self.block_size + 1, device=idx.device)]
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
