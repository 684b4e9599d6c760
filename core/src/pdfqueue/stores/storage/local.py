"""The local backend: a folder, for development and single-machine runs."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from pdfqueue.domain.errors import ObjectNotFound, StorageError

if TYPE_CHECKING:
    from pdfqueue.stores.storage import UploadSink


class FileBackend:
    """A folder on local disk: the embedded default for a laptop or a single machine."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            msg = f"key {key!r} escapes the storage folder"
            raise ValueError(msg)
        return path

    def describe(self) -> str:
        return f"file://{self.root}"

    def check(self) -> None:
        if not self.root.is_dir():
            raise StorageError(f"storage folder {self.root} does not exist")

    def ensure_bucket(self) -> bool:
        existed = self.root.is_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        return not existed

    def expire_uploads(self, days: int) -> bool:
        """A folder has no lifecycle rules: uploads stay until a cleanup step removes them."""
        return False

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc

    def read_range(self, key: str, start: int, length: int) -> bytes:
        try:
            with self._path(key).open("rb") as fh:
                fh.seek(start)
                return fh.read(length)
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc

    def put(self, key: str, data: bytes, tenant: str | None = None) -> None:
        sink = self.begin_upload(key, tenant)
        sink.write_part(data)
        sink.complete()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def begin_upload(self, key: str, tenant: str | None = None) -> UploadSink:
        return _FileUpload(self._path(key))

    def probe_encryption(self) -> None:
        """A folder has no server-side encryption to check (the settings refuse asking it)."""


class _FileUpload:
    """Writes to a hidden temporary file and renames it into place on completion."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
        self.fh = self.tmp.open("wb")

    def write_part(self, data: bytes) -> None:
        self.fh.write(data)

    def complete(self) -> None:
        self.fh.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)
