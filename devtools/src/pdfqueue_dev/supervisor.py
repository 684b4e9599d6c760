"""The demo's children: no signal strands one, and every way out of the demo stops them all."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType, TracebackType

from pdfqueue_dev.processes import Child, stop_all

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Ctrl-C; `kill`, `timeout` or uv passing a signal on; a closing terminal."""


class Supervisor:
    """Start children with `start`; leaving the `with` block, however, stops them all: SIGTERM,
    then SIGKILL of each child's process group after `grace_s`.

    In the block, each of STOP_SIGNALS raises KeyboardInterrupt (by default SIGTERM and SIGHUP
    would end this process alone). A signal that arrives while a child is being started waits
    until the child is on the list, so none is left out of the stop; one that arrives while
    stopping does not interrupt the stop, it cuts the grace short. A SIGKILLed supervisor
    takes its children along too: the kernel kills them (`Child` asks it to).
    """

    def __init__(self, log_dir: Path, grace_s: float = 5.0) -> None:
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.children: list[Child] = []
        self._hurry = False
        self._previous: dict[signal.Signals, signal._HANDLER] = {}

    def __enter__(self) -> Supervisor:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # No signal raises in here (`_on_signal` looks for this frame), not even one handled
        # before this method's first line: flags set there would come too late.
        try:
            stop_all(self.children, self.grace_s, hurry=lambda: self._hurry)
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        """Start a child and put it on the list, with the stop signals held back meanwhile."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:  # the child starts with no signal blocked: `Child` clears its mask before exec
            child = Child(name, argv, env, self.log_dir)
            self.children.append(child)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one held meanwhile arrives now
        return child

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        while frame is not None:
            if frame.f_code is Supervisor.__exit__.__code__:
                self._hurry = True  # already stopping: SIGKILL what is left now
                return
            frame = frame.f_back
        raise KeyboardInterrupt
