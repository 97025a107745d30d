"""``--time-budget``: an alarm that stops a watched program wherever it is (its evaluation loop before the first
step, a data preparation), not only at a step's end.

A ``SIGALRM`` timer: only the main thread can set it, and a program that has a ``SIGALRM`` handler of its own
keeps it (the observer's step-end check and port's own deadline still stop that run). The handler calls
``on_spent`` (which raises, ending the program as ``sys.exit(0)`` would); timers are not inherited by forked
children (DataLoader workers).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


class Alarm:
    def __init__(self, on_spent: Callable[[], None]):
        self.on_spent = on_spent
        self.armed = False
        self._held = 0
        self._rang = False

    def _ring(self, signum, frame) -> None:
        if self.armed:
            if self._held:  # the tool's own work: it stops when that work is done (held)
                self._rang = True
                return
            self.armed = False
            self.on_spent()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The tool's own work (a model's first call: its source read with ``inspect``, which parses it): the alarm
        does not ring inside it but as it ends. An exception raised from a signal handler inside CPython's parser
        comes out as a SystemError (AST constructor recursion depth mismatch), not as ``on_spent``'s."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held and self._rang:
                self._rang = False
                if self.armed:
                    self.armed = False
                    self.on_spent()

    def arm(self, seconds: float) -> None:
        """Ring after ``seconds`` (again from now when it was armed before)."""
        self.disarm()
        if threading.current_thread() is not threading.main_thread():
            return
        handler = signal.getsignal(signal.SIGALRM)
        if handler not in (signal.SIG_DFL, None) and handler != self._ring:
            return  # the program's own alarm
        signal.signal(signal.SIGALRM, self._ring)
        signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))
        self.armed = True

    def disarm(self) -> None:
        self._rang = False
        if self.armed:
            self.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
