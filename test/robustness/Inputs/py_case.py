#!/usr/bin/python3
"""One scenario of the Python package on bad input, for the catalogue
(issue 33): it runs SCENARIO and words the cleave.Error it raises as the CLI
would (`cleave: error: ...` on stderr, exit 1), so that the catalogue checks
it as it checks a command: one line, no crash, no file changed or left.

Usage: py_case.py FIXTURES SCRATCH SCENARIO

FIXTURES holds what `py_case.py FIXTURES - make` wrote: a checkpoint of a
small MLP (ckpt/), which the catalogue copies into SCRATCH and edits before
a resume scenario. A scenario that must leave
the model usable after its refusal checks that too (a step and state_dict()
after the refused call); if it is not, a second line says so, and the
catalogue fails the case.
"""
import os
import sys

import torch

import cleave


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 3))


def batch():
    g = torch.Generator().manual_seed(1)
    return {"input": torch.randn(5, 4, generator=g),
            "labels": torch.tensor([0, 1, 2, 0, 1])}


def model(**kw):
    return cleave.tensor_parallel(mlp(), batch(), tp=2, loss="cross_entropy",
                                  **kw)


def usable(m):
    """Raises unless the model still trains and gives its state."""
    before = {k: v.clone() for k, v in m.state_dict().items()}
    m.step(batch())
    after = m.state_dict()
    assert set(before) == set(after)
    assert any(not torch.equal(before[k], after[k]) for k in before), \
        "the step changed nothing"


def refused_then_usable(m, call, kind=cleave.Error):
    try:
        call()
    except cleave.Error as e:
        if not isinstance(e, kind):
            raise AssertionError("%s is not a %s" % (type(e).__name__,
                                                     kind.__name__))
        usable(m)
        raise
    raise AssertionError("the call was not refused")


def scenarios(fx, w):
    """Each runs one call on what the catalogue prepared in w (a copy of
    the checkpoint in w/ckpt, edited; the user's folder w/user)."""
    ckpt = os.path.join(w, "ckpt")

    def resume():
        cleave.Model.resume(ckpt)

    def save_over_user_folder():
        m = model()
        refused_then_usable(m, lambda: m.save_checkpoint(
            os.path.join(w, "user")), cleave.FileError)

    def save_onto_file():
        m = model()
        refused_then_usable(m, lambda: m.save_checkpoint(
            os.path.join(w, "notes.txt")), OSError)

    def save_on_full_disk():
        # w/disk is a full disk holding an earlier checkpoint: it stays.
        m = model()
        refused_then_usable(m, lambda: m.save_checkpoint(
            os.path.join(w, "disk", "ckpt")), cleave.FileError)

    def load_state_dict_wrong_shape():
        m = model()
        state = m.state_dict()
        state["0.weight"] = torch.zeros(3, 3)
        refused_then_usable(m, lambda: m.load_state_dict(state), ValueError)

    def load_state_dict_second_bad():
        # The first tensor is good, the second not: nothing is written.
        m = model()
        state = m.state_dict()
        first = state["0.weight"].clone()
        state["0.weight"] = torch.ones_like(first)
        state["2.weight"] = torch.zeros(1)
        try:
            m.load_state_dict(state)
        except cleave.Error:
            if not torch.equal(m.state_dict()["0.weight"], first):
                raise AssertionError("a refused load_state_dict wrote")
            usable(m)
            raise

    def load_state_dict_unexpected():
        m = model()
        state = dict(m.state_dict(), extra=torch.zeros(1))
        refused_then_usable(m, lambda: m.load_state_dict(state))

    def step_wrong_shape():
        m = model()
        b = dict(batch(), input=torch.zeros(6, 4))
        refused_then_usable(m, lambda: m.step(b))

    def example_inputs_list():
        try:
            cleave.tensor_parallel(mlp(), [torch.zeros(5, 4)], tp=2)
        except TypeError as e:
            assert isinstance(e, cleave.Error)
            raise

    def zero_word():
        try:
            model(zero="one")
        except ValueError as e:
            assert isinstance(e, cleave.Error)
            raise

    def seed_word():
        try:
            cleave.tensor_parallel(mlp(), batch(), tp=2,
                                   loss="cross_entropy", seed="abc")
        except ValueError as e:
            assert isinstance(e, cleave.Error)
            raise

    def timeout_negative():
        model(timeout=-1)

    def freeze_string():
        model(freeze="0.weight")

    return {f.__name__: f for f in (
        resume, save_over_user_folder, save_onto_file, save_on_full_disk,
        load_state_dict_wrong_shape, load_state_dict_second_bad,
        load_state_dict_unexpected, step_wrong_shape, example_inputs_list,
        zero_word, seed_word, timeout_negative, freeze_string)}


def make(fx):
    m = model()
    m.step(batch())
    m.save_checkpoint(os.path.join(fx, "ckpt"))


def main():
    fx, w, name = sys.argv[1:4]
    if name == "make":
        make(fx)
        return
    try:
        scenarios(fx, w)[name]()
    except cleave.Error as e:
        print("cleave: error: %s" % e, file=sys.stderr)
        sys.exit(1)
    print("py_case: %s was not refused" % name, file=sys.stderr)
    sys.exit(3)


if __name__ == "__main__":
    main()
