"""PyTorch modules the comparison scripts share (imported by their PyTorch side, which
puts this folder on its path): the pre-LN transformer block that benches/training.rs and
benches/sequence.rs write in ferrograd."""
import torch
from torch import nn
import torch.nn.functional as F


class Explicit(nn.Module):
    """The pre-LN block with attention written out as matmuls and a softmax, or fused
    (`F.scaled_dot_product_attention`)."""

    def __init__(self, d=128, h=4, ff=512, fused=False):
        super().__init__()
        self.h, self.fused = h, fused
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.l1, self.l2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.h) ** 0.5, -1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(n, t, d))
        return x + self.l2(F.relu(self.l1(self.norm2(x))))
