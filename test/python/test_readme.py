"""The README's Python example and examples/train_gpt.py run as written."""

import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_readme_python_example_runs(tmp_path):
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## From Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    # The block assumes the repository as the working directory; it runs in
    # a scratch one, with zoo/ found where the block says.
    code = code.replace('sys.path.insert(0, "zoo")',
                        f'sys.path.insert(0, {os.path.join(ROOT, "zoo")!r})')
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "sharding" in run.stdout
    assert (tmp_path / "trained.onnx").stat().st_size > 0


def test_train_gpt_example(tmp_path):
    out = tmp_path / "state.pt"
    run = subprocess.run([sys.executable,
                          os.path.join(ROOT, "examples", "train_gpt.py"),
                          "--steps", "30", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)",
                                       run.stdout).groups())
    assert last < first
    import torch
    sys.path.insert(0, os.path.join(ROOT, "zoo"))
    from make_zoo import GPT2
    GPT2(vocab=256, ctx=64).load_state_dict(torch.load(out))
