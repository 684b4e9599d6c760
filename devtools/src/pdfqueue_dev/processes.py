"""Child processes for the tests, the benchmarks and the demo: ports, waiting, start and stop."""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import TypeVar, cast

import httpx

T = TypeVar("T")
PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a process gets when the thread that started it ends."""
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (held together while chosen, so never the same)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def wait_until(
    check: Callable[[], T | None],
    what: str,
    timeout_s: float = 30,
    *,
    interval_s: float = 0.2,
    diagnostics: Callable[[], str] | None = None,
) -> T:
    """Call `check` until it answers (returns anything but None or False, so 0 and [] count)
    and return the answer; TimeoutError naming `what`, the last result and the `diagnostics`
    after `timeout_s`. `check` may raise to give up early (a process that died, say)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if _answered(result):
            return cast(T, result)
        if time.monotonic() >= deadline:
            raise TimeoutError(_late(what, timeout_s, result, diagnostics))
        time.sleep(interval_s)


async def wait_until_async(
    check: Callable[[], Awaitable[T | None] | T | None],
    what: str,
    timeout_s: float = 30,
    *,
    interval_s: float = 0.2,
    diagnostics: Callable[[], str] | None = None,
) -> T:
    """`wait_until` on the event loop: `check` may be a coroutine function or a plain one (the
    state of another task, which offers no event to wait on)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if _answered(result):
            return cast(T, result)
        if time.monotonic() >= deadline:
            raise TimeoutError(_late(what, timeout_s, result, diagnostics))
        await asyncio.sleep(interval_s)


def _answered(result: object) -> bool:
    return result is not None and result is not False


def _late(what: str, timeout_s: float, last: object, diagnostics: Callable[[], str] | None) -> str:
    extra = f"\n{diagnostics()}" if diagnostics else ""
    return f"{what}: not within {timeout_s:g}s (last: {last!r}){extra}"


class ChildExited(RuntimeError):
    """A child process ended while it was expected to run."""


def _die_with(parent: int) -> Callable[[], None]:
    """What a child runs before exec: SIGKILL it when `parent` ends, however it ends.

    A child in a session of its own gets no Ctrl-C from the terminal and nothing tells it that
    the process that started it was killed: without this, a SIGKILLed demo or test left its
    API and workers running for good. The kernel signals the child when the *thread* that
    forked it ends, so spawn from a thread that lives as long as the child (the main one)."""

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, ())  # none held back, whatever the parent's
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent ended before prctl took effect
            os._exit(1)

    return preexec


class Child:
    """A child process in its own session (a pod's process group), its output in a log file,
    killed by the kernel if the process that started it ends first (`_die_with`)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None,
        log_dir: Path,
        *,
        launcher: bool = False,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.launcher = launcher
        """`uv run` is a launcher: the process doing the work is its child, not itself."""
        self.log_path = log_dir / f"{name}.log"
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with(os.getpid()),  # noqa: PLW1509 (main thread; see _die_with)
            )
        self._main: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def main_pid(self) -> int | None:
        """The process doing the work: a launcher starts it as its only child."""
        if self.proc.poll() is not None:
            return None
        if not self.launcher:
            return self.proc.pid
        if self._main is None:  # found once: scanning /proc on every call costs CPU
            stats = proc_stats().items()
            kids = [pid for pid, (_, fields) in stats if int(fields[1]) == self.proc.pid]
            self._main = min(kids) if kids else None
        return self._main

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        """ChildExited, with the end of the log, if the child has ended."""
        if self.proc.poll() is not None:
            msg = f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail(40)}"
            raise ChildExited(msg)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the child's whole process group (its pool's processes included)."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):  # ended meanwhile
                os.killpg(self.proc.pid, sig)

    def kill9(self) -> None:
        """SIGKILL the group at once, as an OOM kill of a pod does, and reap the child."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 35.0) -> None:
        """SIGTERM the child (a launcher forwards it), then SIGKILL its group (see `stop_all`)."""
        stop_all([self], timeout_s)

    def ended(self) -> bool:
        """Whether the child has exited, leaving it unreaped: while it is a zombie its process
        group id stays its own, so the group can still be signalled safely."""
        if self.proc.returncode is not None:
            return True
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        try:
            return os.waitid(os.P_PID, self.proc.pid, flags) is not None
        except ChildProcessError:  # reaped elsewhere
            return True


def stop_all(
    children: Iterable[Child], timeout_s: float = 35.0, *, hurry: Callable[[], bool] | None = None
) -> None:
    """SIGTERM every child at once (they drain at the same time), wait for all of them until
    one deadline `timeout_s` away (or until `hurry()` says not to wait), then SIGKILL every
    child's whole group, stragglers of a child that exited included, and reap them all. A child
    reaped before (its group id may be another's by now) is only reaped, never signalled."""
    children = [c for c in children if c.proc.returncode is None]
    for child in children:
        if not child.ended():  # os.kill, not send_signal: that reaps an exited child first
            os.kill(child.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while not all(c.ended() for c in children) and time.monotonic() < deadline:
        if hurry is not None and hurry():
            break
        time.sleep(0.05)
    for child in children:
        with suppress(ProcessLookupError, PermissionError):  # a group with no member left
            os.killpg(child.proc.pid, signal.SIGKILL)
    for child in children:
        child.proc.wait()


def wait_http(
    url: str, children: Iterable[Child] = (), *, timeout_s: float = 60, status: int = 200
) -> None:
    """Wait until `url` answers `status`; ChildExited as soon as one of `children` ends."""
    watched = list(children)

    def answers() -> bool | None:
        for child in watched:
            child.check_alive()
        try:
            return httpx.get(url, timeout=2).status_code == status or None
        except httpx.HTTPError:
            return None

    diagnostics = (
        (lambda: "\n".join(f"--- {c.name}\n{c.log_tail()}" for c in watched)) if watched else None
    )
    wait_until(
        answers, timeout_s=timeout_s, what=f"{url} answering {status}", diagnostics=diagnostics
    )


def proc_stats() -> dict[int, tuple[str, list[str]]]:
    """pid -> (command name, the stat(5) fields after it: state, ppid, ...) of every process,
    from /proc (no psutil needed)."""
    stats: dict[int, tuple[str, list[str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name_end = raw.rindex(")")  # the name itself may hold ")"
        stats[int(entry)] = (raw[raw.index("(") + 1 : name_end], raw[name_end + 2 :].split())
    return stats
