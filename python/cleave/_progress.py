"""A progress bar: tqdm's (a terminal or a notebook) when it is installed
and the output is watched; nothing otherwise."""

import contextlib
import sys


class _Bar:
    def __init__(self, bar):
        self._bar = bar

    def update(self, loss: float) -> None:
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self._bar.update(1)


@contextlib.contextmanager
def progress_bar(total, enabled: bool):
    bar = None
    if enabled:
        try:
            from tqdm.auto import tqdm
            # A notebook draws a widget; elsewhere only a terminal gets a
            # bar (disable=None: off when stderr is not a TTY).
            notebook = "ipykernel" in sys.modules
            bar = tqdm(total=total, unit="step",
                       disable=False if notebook else None)
        except ImportError:
            bar = None
    try:
        yield _Bar(bar)
    finally:
        if bar is not None:
            bar.close()
