"""Writes malformed TorchScript archives into OUT_DIR, for the catalogue.

torch.jit.save's zip is rewritten with one file of its code edited, the way
a careless hand or a hostile one would: libtorch's own reader must answer
each with an exception, which cleave words as one error line.
"""
import os
import sys
import zipfile

import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.l(x)


def edited(src, dst, edit):
    """dst: src's archive with edit(text) applied to the top-level code."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for name in z.namelist():
            data = z.read(name)
            if name.endswith("/code/__torch__.py"):
                data = edit(data.decode()).encode()
            out.writestr(name, data)


def class_line(line):
    def edit(text):
        at = text.index("  __parameters__")
        return text[:at] + line + "\n" + text[at:]
    return edit


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    good = os.path.join(out, "tiny.pt")
    torch.jit.save(torch.jit.trace(Tiny(), torch.randn(2, 4)), good)
    # A class constant without its Final[...] type.
    edited(good, os.path.join(out, "constant-untyped.pt"), class_line("  k : Final = 3"))
    # A class constant whose value does not have its declared type.
    edited(good, os.path.join(out, "constant-mistyped.pt"),
           class_line("  k : Final[int] = [3]"))
    # forward's code cut mid-expression.
    edited(good, os.path.join(out, "code-cut.pt"),
           lambda text: text[:text.index("return") + len("return (l")])


if __name__ == "__main__":
    main()
