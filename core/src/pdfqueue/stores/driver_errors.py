"""Driver errors translated once, where a store meets its driver: above it, only ours exist."""

from __future__ import annotations

import functools
import inspect
import ssl
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ParamSpec, TypeVar

import asyncpg
from redis import exceptions as rx
from urllib3.util.ssl_match_hostname import CertificateError as HostnameMismatch

from pdfqueue.domain.errors import (
    CertificateRejected,
    DatabaseRejected,
    DatabaseSchemaError,
    DatabaseUnavailable,
    DependencyMisconfigured,
    InvalidData,
    PdfQueueError,
    RedisRejected,
    RedisUnavailable,
)

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)
Edge = Callable[[], AbstractContextManager[None]]


# SQLSTATEs (PostgreSQL, Appendix A) by what a retry can do about them. Classes are the first
# two characters; a code listed on its own wins over its class.
_PG_TRANSIENT_CLASSES = frozenset({"08", "53", "58"})
"""Connection exceptions, insufficient resources (disk full, out of memory, too many
connections), system errors (I/O): the server or the path to it, not the statement."""
_PG_TRANSIENT_CODES = frozenset(
    {
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (starting up, recovering)
        "57P05",  # idle_session_timeout
        "57014",  # query_canceled: statement_timeout or a cancel; the load may pass
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "40003",  # statement_completion_unknown
        "55P03",  # lock_not_available
        "55006",  # object_in_use
        "25P03",  # idle_in_transaction_session_timeout
    }
)
_PG_SCHEMA_CODES = frozenset(
    {
        "42P01",  # undefined_table
        "42703",  # undefined_column
        "42883",  # undefined_function
        "42704",  # undefined_object
        "42501",  # insufficient_privilege
        "3F000",  # invalid_schema_name
    }
)
"""A deployment to fix (the host application's table, a migration, a grant): retried."""
_PG_MISCONFIGURED = frozenset({"28", "3D"})
"""Invalid authorization (a wrong password or role), no such database: credentials to fix."""
_PG_DATA_CLASSES = frozenset({"22", "23", "54"})
"""Data, integrity, program limits: the value sent is at fault."""


def tls_failure(exc: BaseException) -> str | None:
    """Why TLS with a store failed, if that is what `exc` says, or what it wraps (drivers
    wrap the `ssl` error: as the cause or context, or as an argument, as botocore and
    urllib3 do): the certificate check's reason (`certificate has expired`, `Hostname
    mismatch, ...`, `unable to get local issuer certificate`) or the handshake's. None for
    anything else. Neither names a secret."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        cause = todo.pop(0)
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        # aiohttp's certificate error is one too, without the attributes: its own comes next
        inner = getattr(cause, "certificate_error", None)
        if inner is None and isinstance(cause, ssl.SSLCertVerificationError):
            reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None)
            return str(reason or "certificate verify failed")
        if isinstance(cause, HostnameMismatch):  # urllib3's own check (boto3's connections)
            return f"Hostname mismatch: {cause}"
        handshake = isinstance(cause, ssl.SSLError) and not isinstance(cause, ssl.SSLEOFError)
        if inner is None and handshake:
            return f"TLS handshake failed: {getattr(cause, 'reason', None) or type(cause).__name__}"
        wrapped = [inner, cause.__cause__, cause.__context__, *cause.args]
        wrapped += list(getattr(cause, "kwargs", {}).values())  # botocore's `error=`
        todo += [w for w in wrapped if isinstance(w, BaseException)]
    return None


def postgres_error(exc: BaseException) -> PdfQueueError:
    """The pdfqueue error for one of asyncpg's (or the socket's): by SQLSTATE when the server
    answered one (`classify_sqlstate`), else PostgreSQL is out of reach."""
    if (tls := tls_failure(exc)) is not None:
        return CertificateRejected("postgresql", tls)
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(exc, asyncpg.PostgresError) and isinstance(sqlstate, str) and sqlstate:
        return classify_sqlstate(sqlstate, type(exc).__name__)
    if isinstance(exc, asyncpg.ClientConfigurationError):
        return DependencyMisconfigured("postgresql", type(exc).__name__)
    return DatabaseUnavailable(type(exc).__name__)


def classify_sqlstate(sqlstate: str, name: str = "") -> PdfQueueError:
    """Transient for an outage (08, 53, 58, 57P0x, 40001/40P01 and the like), a schema error
    for what a deployment lacks, misconfigured for credentials (28, 3D), `InvalidData` for
    the data at fault (22, 23, 54) and `DatabaseRejected` for the rest: no retry cures them.
    Only the SQLSTATE and the exception's class name are kept, never the message (it may
    quote the value)."""
    klass = sqlstate[:2]
    label = f"{name} (SQLSTATE {sqlstate})" if name else f"SQLSTATE {sqlstate}"
    if sqlstate in _PG_TRANSIENT_CODES or klass in _PG_TRANSIENT_CLASSES:
        return DatabaseUnavailable(label)
    if sqlstate in _PG_SCHEMA_CODES:
        return DatabaseSchemaError(f"schema error: {label}")
    if klass in _PG_MISCONFIGURED:
        return DependencyMisconfigured("postgresql", label)
    if klass in _PG_DATA_CLASSES:
        return InvalidData(sqlstate)
    return DatabaseRejected(sqlstate)


@contextmanager
def postgres_errors() -> Iterator[None]:
    """asyncpg's errors (and the socket's) as pdfqueue's, classified by `postgres_error`."""
    try:
        yield
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
        raise postgres_error(exc) from exc


_REDIS_TRANSIENT_PREFIXES = frozenset(
    {"OOM", "LOADING", "BUSY", "MISCONF", "MASTERDOWN", "READONLY", "TRYAGAIN"}
    | {"CLUSTERDOWN", "NOREPLICAS", "NOSCRIPT", "MOVED", "ASK"}
)
"""Replies of a server that is full, loading, busy, failing over or whose script cache was
flushed: the command itself is fine, and passes later."""
_REDIS_ACCESS_PREFIXES = frozenset({"NOAUTH", "WRONGPASS", "NOPERM"})
_REDIS_TRANSIENT = (
    rx.ConnectionError,  # BusyLoadingError and MaxConnectionsError included
    rx.TimeoutError,
    rx.WatchError,  # a key changed under a transaction: a retry decides again
    rx.InvalidResponse,  # a reply cut or garbled on the way: the connection is dropped
    OSError,
    TimeoutError,
)


_REDIS_REFUSED = (
    rx.AuthenticationError,
    rx.AuthorizationError,
    rx.NoPermissionError,
    rx.AuthenticationWrongNumberOfArgsError,
)
"""Credentials or rights refused: a deployment to fix."""
_REDIS_OUTAGE = (
    *_REDIS_TRANSIENT,
    rx.OutOfMemoryError,
    rx.ReadOnlyError,
    rx.NoScriptError,
    rx.TryAgainError,
    rx.ClusterDownError,
    rx.AskError,
)
"""A server down, full, loading, failing over or resharding: passes later."""


def redis_connection_lost(exc: BaseException) -> bool:
    """Whether redis-py says its connection dropped: a ConnectionError or TimeoutError, or the
    WatchError it raises instead, while handling one, when that connection held a WATCH
    (arq's `start_jobs` does; so does `BatchState.restore`), which would otherwise read as
    "a watched key changed"."""
    if isinstance(exc, rx.WatchError) and exc.__context__ is not None:
        exc = exc.__context__
    return isinstance(exc, (rx.ConnectionError, rx.TimeoutError, OSError, TimeoutError))


def redis_error(exc: BaseException) -> PdfQueueError:
    """The pdfqueue error for one of redis-py's (or the socket's): misconfigured for refused
    credentials, `RedisUnavailable` for a server down, full, loading or failing over,
    `RedisRejected` for a command refused for what it is (WRONGTYPE, a script's own error,
    bad arguments). The detail is the reply's first word or the class name, never the reply."""
    if (tls := tls_failure(exc)) is not None:
        return CertificateRejected("redis", tls)
    prefix = _reply_prefix(exc)
    name = type(exc).__name__
    detail = f"{name} ({prefix})" if prefix else name
    if isinstance(exc, _REDIS_REFUSED) or prefix in _REDIS_ACCESS_PREFIXES:
        return DependencyMisconfigured("redis", detail)
    if isinstance(exc, _REDIS_OUTAGE) or prefix in _REDIS_TRANSIENT_PREFIXES:
        return RedisUnavailable(detail)
    return RedisRejected(detail)


def _reply_prefix(exc: BaseException) -> str:
    """The error reply's code (its first word, as Redis sends it: `WRONGTYPE`, `OOM`), or ''."""
    if not isinstance(exc, rx.ResponseError) or not exc.args:
        return ""
    word = str(exc.args[0]).split(" ", 1)[0]
    return word if word.isalpha() and word.isupper() and len(word) <= 16 else ""


@contextmanager
def redis_errors() -> Iterator[None]:
    """redis-py's errors (and the socket's) as pdfqueue's, classified by `redis_error`."""
    try:
        yield
    except (rx.RedisError, OSError, TimeoutError) as exc:
        raise redis_error(exc) from exc


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
