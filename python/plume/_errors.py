"""The exceptions of plume: Error, one subclass per PLUME_E* code of include/plume.h, and the
check that turns a libplume return code and its message into one of them.

Knows only the C side's codes and messages (_lib), nothing of models or sessions.
"""
from typing import Optional

from . import _lib
from ._lib import take_string

# ---- the classes -------------------------------------------------------------------------


class Error(Exception):
    """An error reported by libplume; str() is its one-line message, ``code`` the PLUME_E*
    code (a negative int)."""
    code: Optional[int] = None

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code


class FileError(Error, OSError):
    """A file could not be opened, read or written (PLUME_EIO)."""
    code = _lib.EIO


class FormatError(Error):
    """A file's bytes are not what they should be (PLUME_EFORMAT)."""
    code = _lib.EFORMAT


class OutOfMemoryError(Error, MemoryError):
    """Out of memory (PLUME_ENOMEM)."""
    code = _lib.ENOMEM


class InvalidArgumentError(Error, ValueError):
    """A bad argument: a token id outside the vocabulary, a bad parameter (PLUME_EINVAL)."""
    code = _lib.EINVAL


class RangeError(Error):
    """More tokens than the context holds (PLUME_ERANGE)."""
    code = _lib.ERANGE


class MismatchError(Error):
    """A state file from another bundle, or a shape that disagrees (PLUME_EMISMATCH)."""
    code = _lib.EMISMATCH


# ---- from a return code ------------------------------------------------------------------

_BY_CODE = {c.code: c for c in (FileError, FormatError, OutOfMemoryError, InvalidArgumentError,
                                RangeError, MismatchError)}


def raise_error(rc, err, what="plume"):
    """Raise the exception of a PLUME_E* code with the message in err (a c_void_p, freed)."""
    msg = take_string(err.value) if err.value else "%s failed (code %d)" % (what, rc)
    cls = _BY_CODE.get(rc, Error)
    raise cls(msg, rc)


def check(rc, err, what="plume"):
    """Raise the exception of rc (a libplume return code) unless it is 0."""
    if rc:
        raise_error(rc, err, what)
