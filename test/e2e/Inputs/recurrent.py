#!/usr/bin/python3
"""Issue 16: recurrent layers (ONNX LSTM, GRU and RNN, which the importer
unrolls into the dialect's ops), trained against PyTorch.

  recurrent.py OUT_DIR CLEAVE [--tp N]

A sequence model through a two-layer bidirectional LSTM (batch_first, with
initial states), a GRU and a ReLU RNN, as torch.onnx (1.13) exports them at
opset 17 (the weights reordered into ONNX's gate order by Slice and Concat
of the PyTorch parameters); one SGD step's loss and every gradient are
compared with PyTorch's in float64, as activations.py does.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from activations import check  # noqa: E402


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True,
                            bidirectional=True)
        self.gru = nn.GRU(16, 7)
        self.rnn = nn.RNN(7, 5, nonlinearity="relu", bidirectional=True)
        self.h0 = nn.Parameter(0.1 * torch.randn(4, 3, 8))
        self.c0 = nn.Parameter(0.1 * torch.randn(4, 3, 8))
        self.head = nn.Linear(10, 5)

    def forward(self, x):                                 # [3, 5, 6]
        y, _ = self.lstm(x, (self.h0, self.c0))           # [3, 5, 16]
        y, _ = self.gru(y.transpose(0, 1))                # [5, 3, 7]
        y, h = self.rnn(y)                                # [5, 3, 10]
        return self.head(y.mean(0)) + h.sum(0).sum(-1, keepdim=True)


def main():
    out, cleave = sys.argv[1], sys.argv[2]
    tp = int(sys.argv[sys.argv.index("--tp") + 1]) if "--tp" in sys.argv else 1
    return 1 if check(os.path.join(out, "recurrent"), cleave, tp, "recurrent",
                      Recurrent, input_shape=(3, 5, 6)) else 0


if __name__ == "__main__":
    sys.exit(main())
