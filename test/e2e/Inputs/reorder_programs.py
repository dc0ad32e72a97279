"""Moves a bundle plan's first program (field 2 of Plan) after the others,
reading the protobuf wire format by hand (no generated module here)."""
import sys


def varint(data, i):
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fields(data):
    i = 0
    while i < len(data):
        start = i
        key, i = varint(data, i)
        kind = key & 7
        if kind == 0:
            _, i = varint(data, i)
        elif kind == 2:
            n, i = varint(data, i)
            i += n
        elif kind == 5:
            i += 4
        elif kind == 1:
            i += 8
        else:
            raise SystemExit(f"wire type {kind}")
        yield key >> 3, data[start:i]


path = sys.argv[1]
data = open(path, "rb").read()
parts = list(fields(data))
programs = [raw for field, raw in parts if field == 2]
others = [raw for field, raw in parts if field != 2]
with open(path, "wb") as f:
    f.write(b"".join(others + programs[1:] + programs[:1]))
