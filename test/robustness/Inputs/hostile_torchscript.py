"""Writes malformed TorchScript archives into OUT_DIR, for the catalogue.

torch.jit.save's zip is rewritten with one file of its code edited, the way
a careless hand or a hostile one would: libtorch's own reader must answer
each with an exception, which cleave words as one error line.
"""
import os
import struct
import sys
import zipfile

import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.l(x)


class Expanded(torch.nn.Module):
    """A 2 KB archive whose buffer is one float repeated 200 million times
    (stride 0): made dense it is 800 MB (8 GB via doubles in memory)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("big", torch.zeros(1).expand(200_000_000))
        self.l = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.l(x) + self.big[:3]


def edited(src, dst, edit):
    """dst: src's archive with edit(text) applied to the top-level code."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for name in z.namelist():
            data = z.read(name)
            if name.endswith("/code/__torch__.py"):
                data = edit(data.decode()).encode()
            out.writestr(name, data)


def claimed_size(src, dst, record, size):
    """dst: src with the central directory giving record's uncompressed size
    as size (what libtorch allocates before it reads the record)."""
    data = bytearray(open(src, "rb").read())
    with zipfile.ZipFile(src) as z:
        name = next(n for n in z.namelist() if n.endswith(record)).encode()
    for at in range(len(data) - 46):
        if data[at:at + 4] == b"PK\x01\x02" and data[at + 46:at + 46 + len(name)] == name:
            data[at + 24:at + 28] = struct.pack("<I", size)
            break
    else:
        raise SystemExit(f"no directory entry for {record}")
    open(dst, "wb").write(data)


def repacked(src, dst, method):
    """dst: src's records rewritten with another zip compression method."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", method) as out:
        for name in z.namelist():
            out.writestr(name, z.read(name))


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
    # A fuzzer's finding: a weights record that claims 3.7 GB (libtorch
    # allocates a record's declared size before reading it).
    claimed_size(good, os.path.join(out, "record-3gb.pt"), "data/0", 0xDE760100)
    # Records compressed with a method libtorch's reader does not know, and
    # with deflate, which it reads (a repacked archive, not torch's own).
    repacked(good, os.path.join(out, "bzip2.pt"), zipfile.ZIP_BZIP2)
    repacked(good, os.path.join(out, "deflated.pt"), zipfile.ZIP_DEFLATED)
    # A fuzzer's finding (CI smoke: 4.3 GB, 11 s): a saved view that repeats
    # a tiny storage into gigabytes when made dense.
    torch.jit.save(torch.jit.script(Expanded()), os.path.join(out, "expanded.pt"))


if __name__ == "__main__":
    main()
