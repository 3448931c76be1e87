"""A bundle, opened (Model): where a bundle is looked for, the model's facts, and what is
made from it: sessions, the bundle's tokenizer, and generation (whose loop is _generate's).

The top of the package below __init__: may use every other module (_session, _tokenizer,
_generate, _common, _errors, _lib); none of them imports this one.
"""
import os
import weakref

from . import _generate, _lib
from ._common import Closing, c_path
from ._errors import Error, InvalidArgumentError, check
from ._lib import byref, c_void_p, lib
from ._session import Session
from ._tokenizer import Tokenizer


def _resolve_model(path):
    """A bundle path: path (~ expanded), else ~/.cache/plume/<path> for a bare name, else
    $PLUME_MODEL, else ~/.cache/plume/gemma-4-e2b (as the CLI looks)."""
    if path is None:
        path = os.environ.get("PLUME_MODEL") or "~/.cache/plume/gemma-4-e2b"
    p = os.path.expanduser(os.fspath(path))
    if not os.path.isdir(p) and os.sep not in p:
        cached = os.path.join(os.path.expanduser("~/.cache/plume"), p)
        if os.path.isdir(cached):
            return cached
    return p


class Model(Closing):
    """A bundle, memory-mapped and validated (read-only; many sessions may share it, from
    several threads).

    path: a bundle directory, or the name of one in ~/.cache/plume (None: $PLUME_MODEL,
    then ~/.cache/plume/gemma-4-e2b). threads: compute threads (0: physical cores).
    isa: force kernels ("scalar", "avx2", "avx512", "neon"; None: the best the CPU has).
    exact: q8/q4 bundles compute with float32 activations, the reference; by default they take
    int8 activations (one scale per block of 32), faster and ~1% off per matmul
    (docs/BENCHMARKS.md, "Int8 activations accuracy"). No effect on f32/bf16 bundles."""

    def __init__(self, path=None, threads=0, *, isa=None, exact=False):
        self._ptr = None
        self._vocab_ptr = None  # the constraints' index of the tokens' bytes (see _vocab)
        self._sessions = weakref.WeakSet()
        self.path = _resolve_model(path)
        p = lib.plume_model_default_params()
        p.n_threads = int(threads)
        p.isa = isa.encode() if isa else None
        p.exact = int(bool(exact))
        out, err = c_void_p(), c_void_p()
        check(lib.plume_model_open(byref(out), os.fsencode(self.path), byref(p), byref(err)), err)
        self._ptr = out.value
        self.n_vocab = lib.plume_model_n_vocab(self._ptr)
        self.n_ctx = lib.plume_model_n_ctx(self._ptr)
        self.n_layers = lib.plume_model_n_layers(self._ptr)
        self.isa = lib.plume_model_isa(self._ptr).decode()
        self.n_threads = lib.plume_model_n_threads(self._ptr)
        self.weights = lib.plume_model_weights(self._ptr).decode()

    def _p(self):
        if not self._ptr:
            raise Error("the model is closed")
        return self._ptr

    # ---- tokenizer -----------------------------------------------------------------------

    @property
    def tokenizer(self):
        """The bundle's :class:`Tokenizer` (None if the bundle has none)."""
        t = lib.plume_model_tokenizer(self._p())
        return Tokenizer(t, self) if t else None

    def _tokenizer_required(self):
        """The bundle's tokenizer, or InvalidArgumentError if it has none."""
        t = self.tokenizer
        if t is None:
            raise InvalidArgumentError("%s: the bundle has no tokenizer" % self.path, _lib.EINVAL)
        return t

    # ---- sessions ------------------------------------------------------------------------

    def session(self, n_ctx=0, *, n_batch=0, n_rewind=None, snapshot_every=0, kv_bits=32):
        """A new, empty :class:`Session`. n_ctx: context length (0: the bundle's);
        n_batch: prefill tokens per step (0: 128); n_rewind: rewind depth that costs nothing
        (None: the sliding window); snapshot_every: ring snapshots for deep rewinds (0: the
        default); kv_bits: 32, or 8 for int8 full-attention caches (docs/SESSIONS.md)."""
        p = lib.plume_session_default_params()
        p.n_ctx, p.n_batch, p.snapshot_every, p.kv_bits = int(n_ctx), int(n_batch), \
            int(snapshot_every), int(kv_bits)
        if n_rewind is not None:
            p.n_rewind = int(n_rewind)
        out, err = c_void_p(), c_void_p()
        check(lib.plume_session_new(byref(out), self._p(), byref(p), byref(err)), err)
        return Session(self, out.value)

    def load_session(self, path):
        """A new :class:`Session` from a file written by :meth:`Session.save`
        (MismatchError for another bundle's, FormatError for a corrupt one)."""
        out, err = c_void_p(), c_void_p()
        check(lib.plume_session_load(byref(out), self._p(), c_path(path), byref(err)), err)
        return Session(self, out.value)

    # ---- generation ----------------------------------------------------------------------

    def generate(self, prompt, max_tokens=512, *, temperature=None, top_k=None, top_p=None,
                 min_p=None, repeat_penalty=None, repeat_last_n=None, presence_penalty=None,
                 frequency_penalty=None, seed=None, stop=(), session=None, json_schema=None,
                 grammar=None):
        """Generate text after prompt, yielding it in pieces (whole UTF-8 characters) as it
        comes: the loop of `plume run`, which it equals for the same seed and sampling flags.

        prompt: text (tokenized as is: chat text from :func:`render_chat` starts with <bos>)
        or token ids. max_tokens: at most this many tokens (-1: until the context is full).
        Sampling parameters left None take the model's generation config; seed None draws
        one. stop: strings that end the generation (not yielded). It also ends at an
        end-of-turn token. session: continue this session (the prompt's prefix shared with
        its tokens is reused, e.g. the earlier turns of a chat; afterwards it holds the
        prompt and the answer); None uses a fresh one.

        json_schema: the answer is JSON valid against this schema (a dict or its JSON text;
        a subset of JSON Schema, and what is outside it raises InvalidArgumentError naming
        the keyword: docs/STRUCTURED.md); {"type": "object"} is JSON mode. grammar: the
        answer matches this GBNF grammar (start rule root). Either way the generation ends
        only where the value is complete, or at max_tokens with the value cut short."""
        sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                        repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                        seed=seed)
        return _generate.generate(self, prompt, max_tokens, sampling, stop, session, json_schema, grammar)

    def _vocab(self):
        """The tokens' bytes indexed for constraints (plume_vocab), made at the first use."""
        if not self._vocab_ptr:
            out, err = c_void_p(), c_void_p()
            check(lib.plume_vocab_new(byref(out), self._tokenizer_required()._p(), byref(err)), err)
            self._vocab_ptr = out.value
        return self._vocab_ptr

    def close(self):
        """Free the model now, and every session still open on it (also done on garbage
        collection, once no session refers to it)."""
        for s in list(self._sessions):
            s.close()
        if getattr(self, "_vocab_ptr", None):
            lib.plume_vocab_free(self._vocab_ptr)
            self._vocab_ptr = None
        if self._ptr:
            lib.plume_model_free(self._ptr)
        self._ptr = None
