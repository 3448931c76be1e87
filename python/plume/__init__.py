"""plume: Gemma 4 E2B on a CPU, from Python.

A binding over libplume (include/plume.h), with numpy arrays in and out::

    import plume, numpy as np
    m = plume.Model("~/.cache/plume/gemma-4-e2b", threads=2)
    s = m.session()                                   # the chunk states, made once
    logits = s.feed(np.array(ids, np.int32))          # float32 [n_vocab]
    prompt = plume.render_chat([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    for piece in m.generate(prompt, max_tokens=128, temperature=0.7, seed=1):
        print(piece, end="")

Errors are exceptions carrying libplume's one-line message: :class:`Error` and its
subclasses, one per PLUME_E* code. Objects free their C side when closed (``with`` blocks,
``close()``) or garbage-collected. The GIL is released while the model computes, so a model
can serve several threads, each with its own session.
"""
import os
import secrets
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import byref, c_int32, c_void_p, f32_ptr, i32_ptr, lib, take_string

__version__ = "0.1.0"

__all__ = ["Error", "FileError", "FormatError", "OutOfMemoryError", "InvalidArgumentError",
           "RangeError", "MismatchError", "Model", "Session", "Tokenizer", "Sampler",
           "render_chat", "convert", "__version__"]

# ---- errors ------------------------------------------------------------------------------


class Error(Exception):
    """An error reported by libplume; str() is its one-line message, ``code`` the PLUME_E*
    code (a negative int)."""
    code = None

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


_ERRORS = {c.code: c for c in (FileError, FormatError, OutOfMemoryError, InvalidArgumentError,
                               RangeError, MismatchError)}


def _raise(rc, err, what="plume"):
    """Raise the exception of a PLUME_E* code with the message in err (a c_void_p, freed)."""
    msg = take_string(err.value) if err.value else "%s failed (code %d)" % (what, rc)
    cls = _ERRORS.get(rc, Error)
    raise cls(msg, rc)


def _check(rc, err, what="plume"):
    if rc:
        _raise(rc, err, what)


def _ids_array(ids):
    """ids as a C-contiguous int32 vector (no copy when it already is one)."""
    a = np.ascontiguousarray(ids, dtype=np.int32)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise InvalidArgumentError("ids must be a 1-D sequence of token ids, not shape %s"
                                   % (a.shape,), _lib.EINVAL)
    return a


def _path(p):
    return os.fsencode(os.path.expanduser(os.fspath(p)))


# ---- tokenizer ---------------------------------------------------------------------------


class _Closing:
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


class Tokenizer(_Closing):
    """Gemma 4 BPE (docs/TOKENIZER.md): text <-> token ids. ``Model.tokenizer`` is the
    bundle's; ``Tokenizer.open(path)`` opens a tokenizer.bin on its own."""

    def __init__(self, ptr, owner):
        # owner: the Model whose tokenizer this is, or None when this object owns ptr.
        self._ptr = ptr
        self._owner = owner

    @classmethod
    def open(cls, path):
        """Open the compact binary tokenizer (a bundle's tokenizer.bin)."""
        out, err = c_void_p(), c_void_p()
        _check(lib.plume_tokenizer_open(byref(out), _path(path), byref(err)), err)
        return cls(out.value, None)

    def _p(self):
        if self._owner is not None:
            self._owner._p()  # raises if the model was closed
        if not self._ptr:
            raise Error("the tokenizer is closed")
        return self._ptr

    @property
    def n_vocab(self):
        """The number of token ids."""
        return lib.plume_tokenizer_n_vocab(self._p())

    def encode(self, text):
        """Token ids of UTF-8 text, as a list of ints (no <bos> added: chat text from
        :func:`render_chat` carries its own)."""
        b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        cap = len(b) + 16
        while True:
            ids = np.empty(cap, np.int32)
            n = lib.plume_tokenize(self._p(), b, len(b), i32_ptr(ids), cap)
            if n < 0:
                raise InvalidArgumentError("tokenize: the text is not valid UTF-8", n)
            if n <= cap:
                return ids[:n].tolist()
            cap = n

    def decode(self, ids, skip_special=False):
        """The text of token ids (special tokens dropped when skip_special)."""
        a = _ids_array(ids) if len(ids) else np.zeros(0, np.int32)
        n = lib.plume_detokenize(self._p(), i32_ptr(a), len(a), int(bool(skip_special)), None, 0)
        if n < 0:
            raise InvalidArgumentError("decode: a token id is outside the vocabulary [0, %d)"
                                       % self.n_vocab, int(n))
        buf = _lib.ctypes.create_string_buffer(int(n) + 1)
        lib.plume_detokenize(self._p(), i32_ptr(a), len(a), int(bool(skip_special)), buf, n + 1)
        return buf.raw[:n].decode("utf-8", "replace")

    def is_special(self, token_id):
        """Whether token_id is a special token (<bos>, <|turn>, ...)."""
        return bool(lib.plume_token_is_special(self._p(), int(token_id)))

    def close(self):
        """Free a tokenizer opened with :meth:`open` (a model's is freed with the model)."""
        if self._owner is None and self._ptr:
            lib.plume_tokenizer_free(self._ptr)
        self._ptr = None


# ---- sampler -----------------------------------------------------------------------------


def _sampler_params(temperature=None, top_k=None, top_p=None, min_p=None, repeat_penalty=None,
                    repeat_last_n=None, presence_penalty=None, frequency_penalty=None, seed=None):
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


class Sampler(_Closing):
    """Logits -> token id (docs/SAMPLING.md). Unset parameters take the model's generation
    config (temperature 1.0, top-k 64, top-p 0.95, no penalties); seed None draws one."""

    def __init__(self, n_vocab, *, temperature=None, top_k=None, top_p=None, min_p=None,
                 repeat_penalty=None, repeat_last_n=None, presence_penalty=None,
                 frequency_penalty=None, seed=None):
        self._ptr = None
        p = _sampler_params(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                            presence_penalty, frequency_penalty, seed)
        out, err = c_void_p(), c_void_p()
        _check(lib.plume_sampler_new(byref(out), byref(p), int(n_vocab), byref(err)), err)
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


# ---- stop strings ------------------------------------------------------------------------


class _StopMatcher:
    """Holds back generated text that may be the start of a stop string, as the CLI's
    plume_stop_matcher (src/chat/chat.h) does; text, not bytes, since the pieces are whole
    characters."""

    def __init__(self, stops):
        self.stops = [s for s in stops]
        if any(not isinstance(s, str) or not s for s in self.stops):
            raise InvalidArgumentError("stop strings must be non-empty str", _lib.EINVAL)
        self.held = ""

    def feed(self, piece):
        """(text safe to emit, whether a stop string completed)."""
        t = self.held + piece
        hits = [i for i in (t.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return t[:min(hits)], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(t)), keep, -1):
                if t.endswith(s[:k]):
                    keep = k
                    break
        self.held = t[len(t) - keep:]
        return t[:len(t) - keep], False

    def flush(self):
        t, self.held = self.held, ""
        return t


# ---- session -----------------------------------------------------------------------------


class Session(_Closing):
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
        a = _ids_array(ids)
        V = self._model.n_vocab
        res = None
        if logits:
            res = self._out(out, (len(a), V) if all_logits else (V,))
        err = c_void_p()
        with self._lock:
            rc = lib.plume_session_feed(self._p(), i32_ptr(a), len(a), f32_ptr(res),
                                        int(bool(all_logits)), byref(err))
        _check(rc, err, "feed")
        return res

    def feed_prompt(self, ids, *, out=None):
        """Feed a whole prompt, keeping the longest prefix it shares with the session's
        tokens and computing only the rest. Returns (logits [n_vocab] of the last token,
        number of tokens reused); the logits equal those of a fresh prefill."""
        a = _ids_array(ids)
        res = self._out(out, (self._model.n_vocab,))
        reused, err = c_int32(0), c_void_p()
        with self._lock:
            rc = lib.plume_session_feed_prompt(self._p(), i32_ptr(a), len(a), f32_ptr(res),
                                               byref(reused), byref(err))
        _check(rc, err, "feed_prompt")
        return res, reused.value

    def rewind(self, n_keep):
        """Forget every token from position n_keep on (exact, for any 0 <= n_keep <= n_past)."""
        err = c_void_p()
        with self._lock:
            rc = lib.plume_session_rewind(self._p(), int(n_keep), byref(err))
        _check(rc, err, "rewind")

    def save(self, path):
        """Write the session (tokens, caches) to a file, crash-safely. Load it with
        :meth:`Model.load_session` on the same bundle."""
        err = c_void_p()
        with self._lock:
            rc = lib.plume_session_save(self._p(), _path(path), byref(err))
        _check(rc, err, "save")

    def close(self):
        """Free the C session now (also done on garbage collection)."""
        with self._lock:
            if self._ptr:
                lib.plume_session_free(self._ptr)
            self._ptr = None
        self._model._sessions.discard(self)


# ---- model -------------------------------------------------------------------------------

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


class Model(_Closing):
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
        self._sessions = weakref.WeakSet()
        self.path = _resolve_model(path)
        p = lib.plume_model_default_params()
        p.n_threads = int(threads)
        p.isa = isa.encode() if isa else None
        p.exact = int(bool(exact))
        out, err = c_void_p(), c_void_p()
        _check(lib.plume_model_open(byref(out), os.fsencode(self.path), byref(p), byref(err)), err)
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

    @property
    def tokenizer(self):
        """The bundle's :class:`Tokenizer` (None if the bundle has none)."""
        t = lib.plume_model_tokenizer(self._p())
        return Tokenizer(t, self) if t else None

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
        _check(lib.plume_session_new(byref(out), self._p(), byref(p), byref(err)), err)
        return Session(self, out.value)

    def load_session(self, path):
        """A new :class:`Session` from a file written by :meth:`Session.save`
        (MismatchError for another bundle's, FormatError for a corrupt one)."""
        out, err = c_void_p(), c_void_p()
        _check(lib.plume_session_load(byref(out), self._p(), _path(path), byref(err)), err)
        return Session(self, out.value)

    def generate(self, prompt, max_tokens=512, *, temperature=None, top_k=None, top_p=None,
                 min_p=None, repeat_penalty=None, repeat_last_n=None, presence_penalty=None,
                 frequency_penalty=None, seed=None, stop=(), session=None):
        """Generate text after prompt, yielding it in pieces (whole UTF-8 characters) as it
        comes: the loop of `plume run`, which it equals for the same seed and sampling flags.

        prompt: text (tokenized as is: chat text from :func:`render_chat` starts with <bos>)
        or token ids. max_tokens: at most this many tokens (-1: until the context is full).
        Sampling parameters left None take the model's generation config; seed None draws
        one. stop: strings that end the generation (not yielded). It also ends at an
        end-of-turn token. session: continue this session (the prompt's prefix shared with
        its tokens is reused, e.g. the earlier turns of a chat; afterwards it holds the
        prompt and the answer); None uses a fresh one."""
        ids = self._tokenizer_required().encode(prompt) if isinstance(prompt, str) else prompt
        ids = _ids_array(ids)
        sampler = Sampler(self.n_vocab, temperature=temperature, top_k=top_k, top_p=top_p,
                          min_p=min_p, repeat_penalty=repeat_penalty,
                          repeat_last_n=repeat_last_n, presence_penalty=presence_penalty,
                          frequency_penalty=frequency_penalty, seed=seed)
        matcher = _StopMatcher(stop)
        return self._generate(ids, int(max_tokens), sampler, matcher, session)

    def _tokenizer_required(self):
        """The bundle's tokenizer, or InvalidArgumentError if it has none."""
        t = self.tokenizer
        if t is None:
            raise InvalidArgumentError("%s: the bundle has no tokenizer" % self.path, _lib.EINVAL)
        return t

    def _generate(self, ids, max_tokens, sampler, matcher, session):
        own = session is None
        s = self.session() if own else session
        try:
            if len(ids):
                if s.n_past == 0:
                    logits = s.feed(ids)
                else:
                    logits = s.feed_prompt(ids)[0]
                for t in ids.tolist():
                    sampler.accept(t)
            elif s.n_past == 0:
                raise InvalidArgumentError("generate: an empty prompt", _lib.EINVAL)
            else:
                raise InvalidArgumentError("generate: an empty prompt; feed the session first",
                                           _lib.EINVAL)
            ds = _lib.DetokStream()
            lib.plume_detok_stream_init(byref(ds), self._tokenizer_required()._p(), 1)
            piece = _lib.ctypes.create_string_buffer(256)
            n_gen, hit = 0, False
            one = np.zeros(1, np.int32)
            while max_tokens < 0 or n_gen < max_tokens:
                tid = sampler.sample(logits)
                if lib.plume_model_ends_turn(self._p(), tid):
                    break
                k = lib.plume_detok_stream_put(byref(ds), tid, piece, len(piece))
                text, hit = matcher.feed(piece.raw[:max(k, 0)].decode("utf-8", "replace"))
                if text:
                    yield text
                n_gen += 1
                if hit or s.n_past >= s.n_ctx:
                    break
                sampler.accept(tid)
                one[0] = tid
                s.feed(one, out=logits)
            if not hit:
                k = lib.plume_detok_stream_flush(byref(ds), piece, len(piece))
                text, hit = matcher.feed(piece.raw[:max(k, 0)].decode("utf-8", "replace"))
                rest = "" if hit else matcher.flush()
                if text + rest:
                    yield text + rest
        finally:
            sampler.close()
            if own:
                s.close()

    def close(self):
        """Free the model now, and every session still open on it (also done on garbage
        collection, once no session refers to it)."""
        for s in list(self._sessions):
            s.close()
        if self._ptr:
            lib.plume_model_free(self._ptr)
        self._ptr = None


# ---- chat template, converter ------------------------------------------------------------


def render_chat(messages, add_generation_prompt=False, enable_thinking=False):
    """Render a conversation with the E2B chat template (docs/CHAT.md); the text starts with
    "<bos>". messages: dicts with "role" ("system", "user", "assistant" or "model") and
    "content"."""
    msgs = list(messages)
    arr = (_lib.ChatMessage * max(len(msgs), 1))()
    keep = []
    for i, m in enumerate(msgs):
        try:
            role, content = m["role"], m["content"]
        except (KeyError, TypeError):
            raise InvalidArgumentError("render_chat: message %d is not a dict with role and "
                                       "content" % i, _lib.EINVAL) from None
        r, c = str(role).encode(), str(content).encode("utf-8")
        keep += [r, c]
        arr[i].role, arr[i].content = r, c
    out, err = c_void_p(), c_void_p()
    _check(lib.plume_chat_render(arr, len(msgs), int(bool(add_generation_prompt)),
                                 int(bool(enable_thinking)), byref(out), byref(err)), err)
    return take_string(out.value)


def convert(hf_dir, out_dir, weights="q8", *, n_ctx=0, progress=False, layout="auto"):
    """Convert a Hugging Face Gemma 4 checkpoint (config.json + safetensors) into a bundle
    directory out_dir, which must not exist: the converter of `plume convert`. weights:
    "f32", "bf16", "q8" or "q4"; n_ctx: the bundle's context (0: min(max_position_embeddings,
    4096)); progress: a progress line on stderr; layout of q8/q4 weights: "auto" (tiles if
    this CPU's kernels read them), "tiles" or "rows" (docs/BUNDLE.md)."""
    p = lib.plume_convert_default_params()
    w, lay = weights.encode(), layout.encode()
    p.weights, p.n_ctx, p.progress, p.layout = w, int(n_ctx), int(bool(progress)), lay
    err = c_void_p()
    _check(lib.plume_convert(_path(hf_dir), _path(out_dir), byref(p), byref(err)), err,
           "convert")
