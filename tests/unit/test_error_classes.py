"""Each driver's errors classified by the driver's own codes: SQLSTATE, Redis replies, S3."""

from __future__ import annotations

import asyncpg
import pytest
from botocore.exceptions import (
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from redis import exceptions as rx
from redis._parsers.base import BaseParser

from pdfqueue.domain.errors import (
    DatabaseRejected,
    DatabaseSchemaError,
    DatabaseUnavailable,
    DependencyMisconfigured,
    InvalidData,
    ObjectNotFound,
    PdfQueueError,
    PermanentError,
    RedisRejected,
    RedisUnavailable,
    StorageError,
    StorageRejected,
    TransientError,
    is_transient,
    transient_reason,
    transient_reasons,
)
from pdfqueue.stores.driver_errors import classify_sqlstate, postgres_error, redis_error
from pdfqueue.stores.storage.s3errors import botocore_error, s3_error

SQLSTATES: dict[str, type[PdfQueueError]] = {
    # connection exceptions, resources, system errors, shutdown, serialization: transient
    "08000": DatabaseUnavailable,
    "08006": DatabaseUnavailable,  # connection_failure
    "08P01": DatabaseUnavailable,  # protocol_violation
    "53000": DatabaseUnavailable,
    "53100": DatabaseUnavailable,  # disk_full
    "53200": DatabaseUnavailable,  # out_of_memory
    "53300": DatabaseUnavailable,  # too_many_connections
    "58030": DatabaseUnavailable,  # io_error
    "57P01": DatabaseUnavailable,  # admin_shutdown
    "57P02": DatabaseUnavailable,  # crash_shutdown
    "57P03": DatabaseUnavailable,  # cannot_connect_now
    "57014": DatabaseUnavailable,  # query_canceled (statement_timeout)
    "40001": DatabaseUnavailable,  # serialization_failure
    "40P01": DatabaseUnavailable,  # deadlock_detected
    "55P03": DatabaseUnavailable,  # lock_not_available
    # what a deployment lacks: retried, said as such
    "42P01": DatabaseSchemaError,  # undefined_table
    "42703": DatabaseSchemaError,  # undefined_column
    "42501": DatabaseSchemaError,  # insufficient_privilege
    "3F000": DatabaseSchemaError,  # invalid_schema_name
    # credentials
    "28P01": DependencyMisconfigured,  # invalid_password
    "28000": DependencyMisconfigured,  # invalid_authorization_specification
    "3D000": DependencyMisconfigured,  # invalid_catalog_name (no such database)
    # the data at fault: permanent, 422
    "22000": InvalidData,  # asyncpg's own refusal of an argument (out of range, bad encoding)
    "22001": InvalidData,  # string_data_right_truncation
    "22003": InvalidData,  # numeric_value_out_of_range
    "22007": InvalidData,  # invalid_datetime_format
    "22008": InvalidData,  # datetime_field_overflow
    "22021": InvalidData,  # character_not_in_repertoire (a NUL in text)
    "22P02": InvalidData,  # invalid_text_representation
    "23502": InvalidData,  # not_null_violation
    "23503": InvalidData,  # foreign_key_violation
    "23505": InvalidData,  # unique_violation
    "23514": InvalidData,  # check_violation
    "54000": InvalidData,  # program_limit_exceeded (the index row too big)
    "54001": InvalidData,  # statement_too_complex
    # the rest: permanent, not an outage
    "42601": DatabaseRejected,  # syntax_error
    "42804": DatabaseRejected,  # datatype_mismatch
    "0A000": DatabaseRejected,  # feature_not_supported
    "25006": DatabaseRejected,  # read_only_sql_transaction
    "40002": DatabaseRejected,  # transaction_integrity_constraint_violation
    "XX000": DatabaseRejected,  # internal_error
    "P0001": DatabaseRejected,  # raise_exception
}


@pytest.mark.parametrize(("sqlstate", "expected"), SQLSTATES.items(), ids=list(SQLSTATES))
def test_each_sqlstate_class_is_transient_or_permanent_as_it_should(
    sqlstate: str, expected: type[PdfQueueError]
) -> None:
    error = classify_sqlstate(sqlstate, "SomeError")
    assert type(error) is expected
    retryable = expected in {DatabaseUnavailable, DatabaseSchemaError, DependencyMisconfigured}
    assert isinstance(error, TransientError) is retryable
    assert isinstance(error, PermanentError) is not retryable
    if expected is InvalidData:
        assert error.http_status == 422
        assert error.reason == "invalid_data"  # type: ignore[attr-defined]


def test_asyncpgs_own_exceptions_are_classified_by_their_sqlstate() -> None:
    """What asyncpg raises carries `.sqlstate`; the message (which may quote the value) is
    never kept."""
    cases = {
        asyncpg.CharacterNotInRepertoireError(
            "invalid byte sequence 0x00 in 'secret'"
        ): InvalidData,
        asyncpg.ProgramLimitExceededError("index row size 3000 exceeds maximum"): InvalidData,
        asyncpg.UniqueViolationError("duplicate key (secret)"): InvalidData,
        asyncpg.DataError("invalid input for query argument $1: 'secret'"): InvalidData,
        asyncpg.SerializationError("could not serialize"): DatabaseUnavailable,
        asyncpg.DeadlockDetectedError("deadlock"): DatabaseUnavailable,
        asyncpg.AdminShutdownError("terminating"): DatabaseUnavailable,
        asyncpg.CannotConnectNowError("starting up"): DatabaseUnavailable,
        asyncpg.TooManyConnectionsError("too many"): DatabaseUnavailable,
        asyncpg.QueryCanceledError("statement timeout"): DatabaseUnavailable,
        asyncpg.UndefinedTableError("relation users does not exist"): DatabaseSchemaError,
        asyncpg.InsufficientPrivilegeError("permission denied"): DatabaseSchemaError,
        asyncpg.InvalidPasswordError("password authentication failed"): DependencyMisconfigured,
        asyncpg.PostgresSyntaxError("syntax error at or near secret"): DatabaseRejected,
        asyncpg.InterfaceError("connection is closed"): DatabaseUnavailable,
        ConnectionResetError(): DatabaseUnavailable,
        TimeoutError(): DatabaseUnavailable,
    }
    for exc, expected in cases.items():
        error = postgres_error(exc)
        assert type(error) is expected, exc
        assert "secret" not in str(error)
        assert "secret" not in error.public_detail()


def _reply(message: str) -> Exception:
    """The exception redis-py raises for an error reply `message` (its own parser)."""
    return BaseParser().parse_error(message)


REDIS_REPLIES: dict[str, type[PdfQueueError]] = {
    "WRONGTYPE Operation against a key holding the wrong kind of value": RedisRejected,
    "ERR Error running script (call to f_0123): user_script:1: bad": RedisRejected,
    "ERR wrong number of arguments for 'hset' command": RedisRejected,
    "ERR value is not an integer or out of range": RedisRejected,
    "EXECABORT Transaction discarded because of previous errors.": RedisRejected,
    "OOM command not allowed when used memory > 'maxmemory'.": RedisUnavailable,
    "LOADING Redis is loading the dataset in memory": RedisUnavailable,
    "BUSY Redis is busy running a script.": RedisUnavailable,
    "MISCONF Redis is configured to save RDB snapshots, but it's unable to persist": (
        RedisUnavailable
    ),
    "READONLY You can't write against a read only replica.": RedisUnavailable,
    "NOSCRIPT No matching script. Please use EVAL.": RedisUnavailable,
    "MASTERDOWN Link with MASTER is down": RedisUnavailable,
    "TRYAGAIN Multiple keys request during rehashing of slot": RedisUnavailable,
    "NOAUTH Authentication required.": DependencyMisconfigured,
    "WRONGPASS invalid username-password pair or user is disabled.": DependencyMisconfigured,
    "NOPERM this user has no permissions to run the 'eval' command": DependencyMisconfigured,
}


@pytest.mark.parametrize(("reply", "expected"), REDIS_REPLIES.items(), ids=list(REDIS_REPLIES))
def test_each_redis_reply_is_classified_by_its_code(
    reply: str, expected: type[PdfQueueError]
) -> None:
    error = redis_error(_reply(reply))
    assert type(error) is expected
    assert reply.split(" ", 1)[1] not in str(error)  # the code, never the reply's text


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (rx.ConnectionError("refused"), RedisUnavailable),
        (rx.TimeoutError("timed out"), RedisUnavailable),
        (rx.BusyLoadingError("loading"), RedisUnavailable),
        (rx.MaxConnectionsError("too many"), RedisUnavailable),
        (rx.WatchError("changed"), RedisUnavailable),
        (rx.InvalidResponse("garbled"), RedisUnavailable),
        (ConnectionResetError(), RedisUnavailable),
        (rx.AuthenticationError("invalid password"), DependencyMisconfigured),
        (rx.DataError("Invalid input of type: 'dict'"), RedisRejected),
        (rx.ResponseError("something unknown"), RedisRejected),
    ],
)
def test_redis_client_side_errors_are_classified(
    exc: Exception, expected: type[PdfQueueError]
) -> None:
    assert type(redis_error(exc)) is expected


S3_ANSWERS: list[tuple[int, str, type[PdfQueueError]]] = [
    (500, "InternalError", StorageError),
    (502, "502", StorageError),
    (503, "SlowDown", StorageError),
    (503, "ServiceUnavailable", StorageError),
    (504, "504", StorageError),
    (429, "TooManyRequests", StorageError),
    (400, "RequestTimeout", StorageError),
    (408, "408", StorageError),
    (409, "OperationAborted", StorageError),
    (400, "XAmzContentSHA256Mismatch", StorageError),  # the body changed on the way
    (400, "BadDigest", StorageError),
    (403, "AccessDenied", DependencyMisconfigured),
    (403, "InvalidAccessKeyId", DependencyMisconfigured),
    (403, "SignatureDoesNotMatch", DependencyMisconfigured),
    (403, "RequestTimeTooSkewed", DependencyMisconfigured),
    (400, "ExpiredToken", DependencyMisconfigured),
    (401, "401", DependencyMisconfigured),
    (403, "403", DependencyMisconfigured),  # a HEAD's bare status
    (404, "NoSuchBucket", DependencyMisconfigured),
    (404, "NoSuchKey", ObjectNotFound),
    (404, "404", ObjectNotFound),
    (400, "InvalidArgument", StorageRejected),
    (400, "KeyTooLongError", StorageRejected),
    (400, "EntityTooSmall", StorageRejected),
    (411, "MissingContentLength", StorageRejected),
    (413, "EntityTooLarge", StorageRejected),
    (416, "InvalidRange", StorageRejected),
    (405, "MethodNotAllowed", StorageRejected),
]


@pytest.mark.parametrize(("status", "code", "expected"), S3_ANSWERS)
def test_each_s3_answer_is_classified_by_status_and_code(
    status: int, code: str, expected: type[PdfQueueError]
) -> None:
    error = s3_error(status, code, "pdfs/1/x.pdf", "PUT pdfs/1/x.pdf")
    assert type(error) is expected
    assert "pdfs/1" not in error.public_detail() or expected is ObjectNotFound
    if expected is StorageRejected:
        assert error.reason == "storage_rejected"  # type: ignore[attr-defined]
        assert not isinstance(error, TransientError)


def test_a_bucket_level_404_is_a_missing_bucket() -> None:
    assert type(s3_error(404, "404", None, "HEAD bucket")) is DependencyMisconfigured


def test_botocore_errors_are_classified() -> None:
    assert type(botocore_error(NoCredentialsError())) is DependencyMisconfigured
    assert type(botocore_error(ParamValidationError(report="bad key"))) is StorageRejected
    assert type(botocore_error(EndpointConnectionError(endpoint_url="http://s3"))) is StorageError
    timeout = ReadTimeoutError(endpoint_url="http://s3")
    assert type(botocore_error(timeout)) is StorageError


def test_misconfiguration_adds_no_retry_reason_and_is_not_called_unavailable() -> None:
    error = DependencyMisconfigured("storage", "S3 AccessDenied")
    assert transient_reason(error) in transient_reasons()
    assert "unavailable" not in transient_reason(error)
    assert "unavailable" not in error.public_detail()
    assert error.http_status == 500


@pytest.mark.parametrize("reason", ["invalid_data", "database_rejected", "storage_rejected"])
def test_rejections_are_permanent_per_file_reasons(reason: str) -> None:
    """A retry of the batch's transient failures leaves them alone: no try cures them."""
    assert not is_transient(reason)
    assert reason not in transient_reasons()


def test_every_rejection_reason_has_advice() -> None:
    """What a rejected file's report says to do: each reason a store's refusal gives."""
    from pdfqueue.domain.advice import ADVICE
    from pdfqueue.domain.errors import DependencyRejected

    def reasons(cls: type[DependencyRejected]) -> set[str]:
        return {cls.reason, *(r for sub in cls.__subclasses__() for r in reasons(sub))}

    assert reasons(DependencyRejected) - {"rejected"} <= set(ADVICE)
    assert "name_too_long" in ADVICE


def test_an_s3_error_code_is_a_bounded_label() -> None:
    from pdfqueue.stores.storage.s3errors import error_code

    assert error_code("NoSuchKey", 404) == "NoSuchKey"
    assert error_code("", 503) == "503"
    assert error_code("Bad\x00Code<script>", 400) == "400"
    assert error_code("X" * 200, 400) == "400"
