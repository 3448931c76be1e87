"""A bundle, opened (Model): where a bundle is looked for, the model's facts, and what is
made from it: sessions, the bundle's tokenizer, and generation (whose loop is _generate's).

The top of the package below __init__: may use every other module (_session, _tokenizer,
_generate, _common, _errors, _lib); none of them imports this one.
"""
import os
import threading
import weakref

import numpy as np

from . import _generate, _lib, _media
from ._common import Closing, c_path
from ._errors import Error, InvalidArgumentError, check
from ._lib import byref, c_void_p, lib
from ._session import Session
from . import _tokenizer
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
    (docs/BENCHMARKS.md, "Int8 activations accuracy"). No effect on f32/bf16 bundles.
    drafter: the directory of an MTP drafter (a converted gemma-4-*-assistant,
    docs/SPECULATIVE.md) that generate drafts with; None: the bundle's own (BUNDLE/drafter)
    when it has one. no_drafter: never the MTP drafter (prompt lookup drafts instead). A
    drafter for another backbone is a FormatError naming what differs. The drafter in use is
    the attribute drafter (its path, or None). no_lookup: with the drafter, draft by it alone
    (by default prompt lookup drafts instead where the text repeats itself and lookup guesses
    as well as the drafter; a model without a drafter refuses it)."""

    def __init__(self, path=None, threads=0, *, isa=None, exact=False, drafter=None, no_drafter=False,
                 no_lookup=False):
        self._ptr = None
        self._vocab_ptr = None  # the constraints' index of the tokens' bytes (see _vocab)
        self._sessions = weakref.WeakSet()
        self._drafters = []  # opened plume_drafters not in use (one per generation at a time)
        self._drafter_lock = threading.Lock()
        self._draft_totals = [0, 0, 0, 0, 0]  # speculative steps, tokens guessed, kept; lookup's guessed, kept
        self.drafter = None
        self._drafter_named = drafter is not None
        if drafter is not None and no_drafter:
            raise InvalidArgumentError("Model: drafter and no_drafter contradict each other", _lib.EINVAL)
        if no_lookup and no_drafter:
            raise InvalidArgumentError("Model: no_lookup and no_drafter contradict each other", _lib.EINVAL)
        self._no_lookup = bool(no_lookup)
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
        if not no_drafter:
            dpath = os.path.expanduser(os.fspath(drafter)) if drafter is not None else \
                _lib.take_string(lib.plume_drafter_find(self._ptr))
            if dpath:
                try:
                    self._drafters.append(self._open_drafter(dpath))
                except BaseException:
                    self.close()
                    raise
                self.drafter = dpath
        if no_lookup and not self.drafter:
            self.close()
            raise InvalidArgumentError("Model: no_lookup: there is no drafter to draft alone (the bundle has "
                                       "none; drafter= names one)", _lib.EINVAL)

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
                 frequency_penalty=None, seed=None, stop=(), session=None, images=None, audio=None,
                 json_schema=None, grammar=None, videos=None, draft=None):
        """Generate text after prompt, yielding it in pieces (whole UTF-8 characters) as it
        comes: the loop of `plume run`, which it equals for the same seed and sampling flags.

        prompt: text (tokenized as is: chat text from :func:`render_chat` starts with <bos>)
        or token ids. max_tokens: at most this many tokens (-1: until the context is full).
        Sampling parameters left None take the model's generation config; seed None draws
        one. stop: strings that end the generation (not yielded). It also ends at an
        end-of-turn token. session: continue this session (the prompt's prefix shared with
        its tokens is reused, e.g. the earlier turns of a chat; afterwards it holds the
        prompt and the answer); None uses a fresh one.

        images: a list of images (a path, encoded bytes, or a uint8 numpy array [h, w, 3] RGB);
        audio: a list of clips (a path, encoded bytes, or float32 samples at 16 kHz, 1-D). Each
        goes where the text prompt says <|image|> / <|audio|> (each kind in order); a prompt
        without any gets them first (at the start of the last user turn of chat text). The
        bundle needs the towers (InvalidArgumentError otherwise). A session re-fed the same
        image reuses its cache (media are keyed by their pixels and samples).
        videos: a list of videos (a path, encoded bytes of an MP4/MOV/MKV/WebM, or decoded
        frames, a uint8 numpy array [n, h, w, 3]): 32 frames with their MM:SS timestamps as
        Hugging Face's processor, each where the prompt says <|video|>.
        json_schema: the answer is JSON valid against this schema (a dict or its JSON text;
        a subset of JSON Schema, and what is outside it raises InvalidArgumentError naming
        the keyword: docs/STRUCTURED.md); {"type": "object"} is JSON mode. grammar: the
        answer matches this GBNF grammar (start rule root). Either way the generation ends
        only where the value is complete, or at max_tokens with the value cut short.
        draft: speculative decoding (docs/SPECULATIVE.md), tokens guessed per step (0: off):
        guessed by the model's MTP drafter (the attribute drafter) when it has one, else by
        prompt lookup, and verified in one step. Greedy text is the same with or without;
        sampled text keeps its distribution but not its seed's text. None: as `plume run`, 3
        when greedy or when Model was given drafter=, else 0."""
        sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                        repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                        seed=seed)
        return _generate.generate(self, prompt, max_tokens, sampling, stop, session, images, audio, json_schema,
                                  grammar, videos, self._draft_len(draft, temperature))

    # ---- images and audio ------------------------------------------------------------------

    @property
    def has_vision(self):
        """Whether the bundle carries a vision tower (images in)."""
        return bool(lib.plume_model_has_vision(self._p()))

    @property
    def has_audio(self):
        """Whether the bundle carries an audio tower (audio in)."""
        return bool(lib.plume_model_has_audio(self._p()))

    def embed_image(self, image, max_tokens=0):
        """The soft tokens that replace an image's placeholders: float32 [N, hidden] (what
        `plume embed --image` writes). image: a path, encoded bytes (PNG, JPEG, WebP) or a
        uint8 numpy array [h, w, 3] (RGB). max_tokens: the budget (70, 140, 280, 560, 1120;
        0: the model's 280)."""
        with _media.encode_image(self, image, max_tokens) as e:
            return e.rows()

    def embed_video(self, video, fps=0.0):
        """The soft tokens of a video's sampled frames, stacked: float32 [frames x n, hidden]
        (what `plume embed --video` writes). video: a path, encoded bytes (MP4, MOV, MKV, WebM)
        or decoded frames, a uint8 numpy array [n, h, w, 3] (fps for their timestamps)."""
        with _media.encode_video(self, video, fps) as e:
            return e.rows()

    def embed_audio(self, audio):
        """The soft tokens of a clip: float32 [N, hidden], about 25 a second (what
        `plume embed --audio` writes). audio: a path, encoded bytes or float32 samples at
        16 kHz."""
        with _media.encode_audio(self, audio) as e:
            return e.rows()

    def transcribe(self, audio, *, translate=None, max_tokens=256):
        """What is said in audio (a path, encoded bytes or float32 samples at 16 kHz), as
        `plume transcribe` writes it: each 30 s clip its own one-turn conversation, answered
        greedily, the clips' texts one per line. translate: a language to translate into
        instead. max_tokens: per clip."""
        a = _media.load_audio(audio)
        try:
            n = lib.plume_audio_n_samples(a)
            pcm = np.ctypeslib.as_array(lib.plume_audio_samples(a), (n,)).copy() if n else np.zeros(0, np.float32)
        finally:
            lib.plume_audio_free(a)
        if translate:
            ask = "Translate the speech in this audio clip into %s. Reply with the translation only." % translate
        else:
            ask = ("Transcribe this audio clip word for word, in the language it is spoken in. Reply with "
                   "the transcription only.")
        prompt = _tokenizer.render_chat([{"role": "user", "content": _media.AUDIO_TEXT + ask}],
                                        add_generation_prompt=True)
        clip, lines = 30 * _media.AUDIO_RATE, []
        for at in range(0, max(n, 1), clip):
            piece = pcm[at:at + clip]
            if len(piece) < 161 and at:  # a tail under 10 ms gives no token
                break
            lines.append("".join(self.generate(prompt, max_tokens, temperature=0.0, audio=[piece])))
        return "\n".join(lines)

    # ---- the MTP drafter --------------------------------------------------------------------

    def _open_drafter(self, path):
        """A new plume_drafter of the drafter at path for this model."""
        out, err = c_void_p(), c_void_p()
        check(lib.plume_drafter_open(byref(out), self._p(), os.fsencode(path), byref(err)), err)
        return out.value

    def _take_drafter(self):
        """A plume_drafter for one generation (a drafter holds one step's scratch: each
        generation running at once, in any thread, has its own), or None without a drafter."""
        if self.drafter is None:
            return None
        with self._drafter_lock:
            if self._drafters:
                return self._drafters.pop()
        return self._open_drafter(self.drafter)

    def _give_drafter(self, d):
        """Hand back a drafter _take_drafter gave (freed if the model was closed meanwhile)."""
        if not d:
            return
        with self._drafter_lock:
            if self._ptr:
                self._drafters.append(d)
                return
        lib.plume_drafter_free(d)

    def _count_drafts(self, steps, drafted, accepted, lookup_drafted, lookup_accepted):
        """Add a finished generation's speculative figures to the model's totals."""
        with self._drafter_lock:
            for i, v in enumerate((steps, drafted, accepted, lookup_drafted, lookup_accepted)):
                self._draft_totals[i] += int(v)

    @property
    def draft_stats(self):
        """Speculative decoding of this model's generations so far: {"steps": forward steps
        that verified guesses, "drafted": tokens guessed, "accepted": guesses the model kept,
        "lookup_drafted", "lookup_accepted": of those, prompt lookup's (with the drafter: the
        rounds lookup drafted instead of it)}."""
        with self._drafter_lock:
            return dict(zip(("steps", "drafted", "accepted", "lookup_drafted", "lookup_accepted"),
                            self._draft_totals))

    def _draft_len(self, draft, temperature):
        """Tokens guessed per step for a generation: draft, or by default as `plume run`: 3 when
        decoding is greedy (the text cannot change) or the drafter was named, else 0 (drafting
        keeps the sampled distribution, but a seed would no longer give the text it gives
        without)."""
        if draft is None:
            greedy = temperature is not None and temperature <= 0
            return lib.plume_spec_default_params().draft_max if greedy or self._drafter_named else 0
        if isinstance(draft, bool) or not isinstance(draft, int) or not 0 <= draft < _lib.SAMPLER_UNDO:
            raise InvalidArgumentError("generate: draft must be an int in [0, %d], not %r"
                                       % (_lib.SAMPLER_UNDO - 1, draft), _lib.EINVAL)
        return draft

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
        with self._drafter_lock:  # the drafters first: they point into the model
            for d in self._drafters:
                lib.plume_drafter_free(d)
            self._drafters = []
            if self._ptr:
                lib.plume_model_free(self._ptr)
            self._ptr = None
