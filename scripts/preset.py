"""Prints one field of a preset in CMakePresets.json, so that the Makefile
reads the sanitized build's targets and tests from the one place that
holds them.

Usage: preset.py build|test|configure NAME FIELD[.SUBFIELD...]
A list prints space-separated.
"""
import json
import os
import sys


def main():
    kind, name, field = sys.argv[1:4]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "CMakePresets.json")) as f:
        presets = json.load(f)[kind + "Presets"]
    value = next(p for p in presets if p["name"] == name)
    for key in field.split("."):
        value = value[key]
    print(" ".join(value) if isinstance(value, list) else value)


if __name__ == "__main__":
    main()
