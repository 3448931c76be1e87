"""One conversation's state on a model (Session): the KV caches of the three chunks and the
tokens fed so far; feed, prefix reuse, rewind, save. Model.session and Model.load_session
make them.

May use _lib, _errors and _common. Of its model it knows only what every session needs
(_p() to check it is open, n_vocab, the _sessions set that closes it with the model), never
the Model class: _model imports this file, not the other way round.
"""
import threading

import numpy as np

from . import _lib
from ._common import Closing, c_path, ids_array
from ._errors import Error, InvalidArgumentError, check
from ._lib import byref, c_int32, c_void_p, f32_ptr, i32_ptr, lib


class Session(Closing):
    """One conversation's state on a model: the KV caches of the three chunks and the tokens
    fed so far. Made by :meth:`Model.session` or :meth:`Model.load_session`. Calls on one
    session are serialized by a lock; use one session per thread for parallel work."""

    def __init__(self, model, ptr):
        self._model = model
        self._ptr = ptr
        self._lock = threading.Lock()
        model._sessions.add(self)

    def _p(self):
        if not self._ptr:
            raise Error("the session is closed")
        self._model._p()
        return self._ptr

    # ---- what it holds -------------------------------------------------------------------

    @property
    def model(self):
        """The model this session runs on."""
        return self._model

    @property
    def n_past(self):
        """Tokens fed so far (the position of the next token)."""
        with self._lock:
            return lib.plume_session_n_past(self._p())

    @property
    def n_ctx(self):
        """The context length of the session."""
        with self._lock:
            return lib.plume_session_n_ctx(self._p())

    @property
    def tokens(self):
        """The ids fed so far (a copy, int32 [n_past])."""
        with self._lock:
            p = self._p()
            n = lib.plume_session_n_past(p)
            t = lib.plume_session_tokens(p)
            return np.ctypeslib.as_array(t, (n,)).copy() if n else np.zeros(0, np.int32)

    # ---- feeding -------------------------------------------------------------------------

    def _out(self, out, shape):
        if out is None:
            return np.empty(shape, np.float32)
        if (not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != shape
                or not out.flags.c_contiguous or not out.flags.writeable):
            raise InvalidArgumentError("out must be a writeable C-contiguous float32 array of "
                                       "shape %s" % (shape,), _lib.EINVAL)
        return out

    def feed(self, ids, all_logits=False, *, logits=True, out=None):
        """Feed token ids at the current position and return the logits (after the final
        softcap): float32 [n_vocab] of the last token, or [n, n_vocab] of every token with
        all_logits. The model writes them straight into the returned array (or into out,
        reused, when given). logits=False computes none and returns None. On error the
        session is unchanged."""
        a = ids_array(ids)
        V = self._model.n_vocab
        res = None
        if logits:
            res = self._out(out, (len(a), V) if all_logits else (V,))
        err = c_void_p()
        with self._lock:
            rc = lib.plume_session_feed(self._p(), i32_ptr(a), len(a), f32_ptr(res),
                                        int(bool(all_logits)), byref(err))
        check(rc, err, "feed")
        return res

    def feed_prompt(self, ids, *, out=None):
        """Feed a whole prompt, keeping the longest prefix it shares with the session's
        tokens and computing only the rest. Returns (logits [n_vocab] of the last token,
        number of tokens reused); the logits equal those of a fresh prefill."""
        a = ids_array(ids)
        res = self._out(out, (self._model.n_vocab,))
        reused, err = c_int32(0), c_void_p()
        with self._lock:
            rc = lib.plume_session_feed_prompt(self._p(), i32_ptr(a), len(a), f32_ptr(res),
                                               byref(reused), byref(err))
        check(rc, err, "feed_prompt")
        return res, reused.value

    # ---- going back, keeping -------------------------------------------------------------

    def rewind(self, n_keep):
        """Forget every token from position n_keep on (exact, for any 0 <= n_keep <= n_past)."""
        err = c_void_p()
        with self._lock:
            rc = lib.plume_session_rewind(self._p(), int(n_keep), byref(err))
        check(rc, err, "rewind")

    def save(self, path):
        """Write the session (tokens, caches) to a file, crash-safely. Load it with
        :meth:`Model.load_session` on the same bundle."""
        err = c_void_p()
        with self._lock:
            rc = lib.plume_session_save(self._p(), c_path(path), byref(err))
        check(rc, err, "save")

    def close(self):
        """Free the C session now (also done on garbage collection)."""
        with self._lock:
            if self._ptr:
                lib.plume_session_free(self._ptr)
            self._ptr = None
        self._model._sessions.discard(self)
