"""Logits -> token id: the Sampler over libplume's plume_sampler (docs/SAMPLING.md), which
Model.generate draws with and a caller's own loop may use.

May use _lib, _errors and _common; knows nothing of models, sessions or text.
"""
import secrets

import numpy as np

from . import _lib
from ._common import Closing
from ._errors import Error, InvalidArgumentError, check
from ._lib import byref, c_void_p, f32_ptr, lib


def _params(temperature=None, top_k=None, top_p=None, min_p=None, repeat_penalty=None,
            repeat_last_n=None, presence_penalty=None, frequency_penalty=None, seed=None):
    """A plume_sampler_params: the library's defaults, overridden by the arguments not None;
    seed None draws one."""
    p = lib.plume_sampler_default_params()
    for name, v in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p),
                    ("min_p", min_p), ("repeat_penalty", repeat_penalty),
                    ("repeat_last_n", repeat_last_n), ("presence_penalty", presence_penalty),
                    ("frequency_penalty", frequency_penalty)):
        if v is not None:
            setattr(p, name, v)
    if seed is None:
        seed = secrets.randbits(64)
    if not 0 <= int(seed) < 1 << 64:
        raise InvalidArgumentError("seed must be in [0, 2**64), not %r" % (seed,), _lib.EINVAL)
    p.seed = int(seed)
    return p


class Sampler(Closing):
    """Logits -> token id (docs/SAMPLING.md). Unset parameters take the model's generation
    config (temperature 1.0, top-k 64, top-p 0.95, no penalties); seed None draws one."""

    def __init__(self, n_vocab, *, temperature=None, top_k=None, top_p=None, min_p=None,
                 repeat_penalty=None, repeat_last_n=None, presence_penalty=None,
                 frequency_penalty=None, seed=None):
        self._ptr = None
        p = _params(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                    presence_penalty, frequency_penalty, seed)
        out, err = c_void_p(), c_void_p()
        check(lib.plume_sampler_new(byref(out), byref(p), int(n_vocab), byref(err)), err)
        self._ptr = out.value
        self.n_vocab = int(n_vocab)
        self.seed = p.seed

    def _p(self):
        if not self._ptr:
            raise Error("the sampler is closed")
        return self._ptr

    def sample(self, logits):
        """Draw the next id from logits (float32 [n_vocab], not modified)."""
        a = np.ascontiguousarray(logits, dtype=np.float32)
        if a.shape != (self.n_vocab,):
            raise InvalidArgumentError("sample: logits must have shape (%d,), not %s"
                                       % (self.n_vocab, a.shape), _lib.EINVAL)
        tid = lib.plume_sampler_sample(self._p(), f32_ptr(a))
        if tid < 0:
            raise Error("sampling failed (no finite logit)", tid)
        return tid

    def accept(self, token_id):
        """Record an id in the history the penalties see (prompt and generated tokens)."""
        lib.plume_sampler_accept(self._p(), int(token_id))

    def reset(self):
        """Forget the history and reseed."""
        lib.plume_sampler_reset(self._p())

    def close(self):
        """Free the C sampler (also done on garbage collection)."""
        if self._ptr:
            lib.plume_sampler_free(self._ptr)
        self._ptr = None
