"""Exception hierarchy shared by every layer.

The CLI turns any GravfsError into one line on stderr and a non-zero exit; the
FUSE layer maps them to errno values. Keep messages self-contained: they are
shown to users as they are.
"""

from __future__ import annotations


class GravfsError(Exception):
    """Base of every error gravfs reports to a user."""

    exit_code = 1


class NotFoundError(GravfsError):
    """A ref, commit, object or path does not exist."""

    exit_code = 2


class TreeGoneError(NotFoundError):
    """A commit's tree object (metarange, range) is not in the store: garbage collection
    deleted it (the commit expired), or damage. Not a missing path: what the tree would
    answer is unknown (the mount answers EIO, not ENOENT or an empty directory)."""


class AlreadyExistsError(GravfsError):
    """Create-once object (tag, branch, repository) already exists."""

    exit_code = 3


class BadNameError(GravfsError):
    """A branch/tag name or path is not acceptable."""

    exit_code = 4


class AmbiguousRefError(GravfsError):
    """A commit-id prefix matches more than one commit."""

    exit_code = 4


class PreconditionFailedError(GravfsError):
    """A compare-and-swap lost: the object changed under us."""

    exit_code = 5


class ConflictError(GravfsError):
    """Merge or rebase found paths changed on both sides."""

    exit_code = 6

    def __init__(self, message: str, keys: list[bytes] | None = None):
        super().__init__(message)
        self.keys = list(keys or [])


class CorruptDataError(GravfsError):
    """Stored bytes fail their checksum or do not parse; names file and offset."""

    exit_code = 7

    def __init__(self, message: str, path: str | None = None, offset: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if offset is not None:
                where += f" at offset {offset}"
            where += ": "
        super().__init__(where + message)
        self.reason = message
        self.path = path
        self.offset = offset


class SourceChangedError(CorruptDataError):
    """The source object of a by-reference entry changed or vanished since it was
    referenced (gravfs.data.external): its bytes would not be the entry's, so none
    are served (EIO in the mount). ``vanished``: the source is gone."""

    def __init__(self, message: str, url: str = "", vanished: bool = False):
        super().__init__(message)
        self.url = url
        self.vanished = vanished


class StoreUnavailableError(GravfsError):
    """The object store cannot be reached or keeps failing after retries."""

    exit_code = 8


class ReadOnlyError(GravfsError):
    """Write attempted on an immutable ref (commit or tag)."""

    exit_code = 9


class PathTypeError(GravfsError):
    """A path is the wrong kind for the operation (file vs directory, non-empty dir).

    ``errno`` carries the POSIX code the mount answers with (EISDIR, ENOTDIR,
    ENOTEMPTY).
    """

    exit_code = 10

    def __init__(self, message: str, errno: int):
        super().__init__(message)
        self.errno = errno
