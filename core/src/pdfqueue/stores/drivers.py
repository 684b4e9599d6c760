"""Driver errors translated once, where a store meets its driver: above it, only ours exist."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from importlib import resources
from typing import Any, ParamSpec, TypeVar

import asyncpg
from redis.exceptions import RedisError

from pdfqueue.domain.errors import DatabaseSchemaError, DatabaseUnavailable, RedisUnavailable

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)
Edge = Callable[[], AbstractContextManager[None]]


def lua(name: str) -> str:
    """The source of a Redis script shipped in `pdfqueue/stores/lua/` (`name` without .lua)."""
    return resources.files("pdfqueue.stores").joinpath(f"lua/{name}.lua").read_text()


@contextmanager
def postgres_errors() -> Iterator[None]:
    """asyncpg's errors (and the socket's) as DatabaseSchemaError or DatabaseUnavailable."""
    try:
        yield
    except asyncpg.SyntaxOrAccessError as exc:  # a missing table or column, or no privilege
        raise DatabaseSchemaError(f"schema error: {type(exc).__name__}") from exc
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
        raise DatabaseUnavailable(type(exc).__name__) from exc


@contextmanager
def redis_errors() -> Iterator[None]:
    """redis-py's errors (and the socket's) as RedisUnavailable."""
    try:
        yield
    except (RedisError, OSError, TimeoutError) as exc:
        raise RedisUnavailable(type(exc).__name__) from exc


def typed_call(
    edge: Edge,
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate a coroutine function that talks to a driver: its errors come out typed."""

    def decorate(
        fn: Callable[P, Coroutine[Any, Any, R]],
    ) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with edge():
                return await fn(*args, **kwargs)

        return wrapper

    return decorate


def typed_methods(edge: Edge) -> Callable[[C], C]:
    """Decorate a store class: each of its coroutine methods raises typed errors only.

    Async generators are left alone: they page through coroutine methods that are typed.
    """

    def decorate(cls: C) -> C:
        for name, member in list(vars(cls).items()):
            if inspect.iscoroutinefunction(member):
                setattr(cls, name, typed_call(edge)(member))
        return cls

    return decorate
