"""What the wrappers of C objects share: the base that frees them (close(), with blocks,
garbage collection), and the conversions of arguments into what libplume takes (token ids,
paths).

May use _lib and _errors; knows nothing of models, sessions or generation.
"""
import os

import numpy as np

from . import _lib
from ._errors import InvalidArgumentError


class Closing:
    """A wrapper of a C object freed by close(): usable in a with block, and closed on
    garbage collection."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def ids_array(ids):
    """ids as a C-contiguous int32 vector (no copy when it already is one)."""
    a = np.ascontiguousarray(ids, dtype=np.int32)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise InvalidArgumentError("ids must be a 1-D sequence of token ids, not shape %s"
                                   % (a.shape,), _lib.EINVAL)
    return a


def c_path(p):
    """A path argument (str, bytes or os.PathLike; ~ expanded) as the bytes libplume opens."""
    return os.fsencode(os.path.expanduser(os.fspath(p)))
