"""Generation: the loop of `plume run` behind Model.generate. A prompt becomes token ids,
is prefilled into a session (the prefix it shares with the session's tokens reused), then
each step samples an id, turns it into text (whole UTF-8 characters), holds back what may
be the start of a stop string, and feeds the id back.

With a format (json_schema or grammar: docs/STRUCTURED.md) a constraint is attached to the
sampler once the prompt is in: every step draws only what keeps the text a prefix of a value
the format accepts, and the end of turn comes only where the value is complete.

With drafting (docs/SPECULATIVE.md) the steps after the first are plume_spec_step's: the
pending token and the guesses of the model's MTP drafter (else prompt lookup) in one forward
step, the guesses the model agrees with kept (greedy: the same tokens; sampling: the same
distribution), and the ids handed out one at a time as the plain loop would. At the end the
session is left holding what the plain loop would have fed.

May use _lib, _errors, _common, _sampler and _media (images and audio: encoded when generate
is called, their placeholders expanded into runs, fed with the prompt). It meets the model only through the object it
is handed (model.session(), model.n_vocab, the bundle's tokenizer), never imports _model
(which imports this file).
"""
import json

import numpy as np

from . import _lib, _media
from ._common import Closing, ids_array
from ._errors import InvalidArgumentError, check
from ._lib import byref, c_void_p, lib
from ._sampler import Sampler

# ---- stop strings ------------------------------------------------------------------------


class StopMatcher:
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
        """The text held back, released (the generation ended without a stop string)."""
        t, self.held = self.held, ""
        return t


# ---- the loop ----------------------------------------------------------------------------


# ---- formats ------------------------------------------------------------------------------


class Constraint(Closing):
    """A C plume_constraint, freed by close() (or on garbage collection)."""

    def __init__(self, ptr):
        self._ptr = ptr

    def close(self):
        if self._ptr:
            lib.plume_constraint_free(self._ptr)
        self._ptr = None


def constraint(model, json_schema=None, grammar=None):
    """The Constraint of a JSON Schema (a dict, or its JSON text) or a GBNF grammar (text,
    start rule root), or None for neither. A schema outside the subset is an
    InvalidArgumentError naming the keyword."""
    if json_schema is not None and grammar is not None:
        raise InvalidArgumentError("generate: json_schema and grammar exclude each other", _lib.EINVAL)
    if json_schema is None and grammar is None:
        return None
    if json_schema is not None:
        text = json_schema if isinstance(json_schema, (str, bytes)) else json.dumps(json_schema)
        make = lib.plume_constraint_new_json_schema
    else:
        text, make = grammar, lib.plume_constraint_new_grammar
    b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    out, err = c_void_p(), c_void_p()
    p = lib.plume_constraint_default_params()
    check(make(byref(out), model._vocab(), b, len(b), byref(p), byref(err)), err)
    return Constraint(out.value)


def generate(model, prompt, max_tokens, sampling, stop, session, images=None, audio=None, json_schema=None,
             grammar=None, videos=None, draft=0):
    """Model.generate: check the arguments now (tokenize the prompt, encode the images and
    audio, make the sampler, the stop matcher and the format's constraint) and return the
    generator of text pieces. sampling: the Sampler's keyword arguments. draft: tokens guessed
    per speculative step (0: plain decoding)."""
    media = None
    if images or audio or videos:
        if not isinstance(prompt, str):
            raise InvalidArgumentError("generate: images, audio and videos need a text prompt (its <|image|>, "
                                       "<|audio|> and <|video|> say where they go)", _lib.EINVAL)
        ims, auds, vids = _media.encode_all(model, images, audio, videos)
        try:
            ids, media = _media.prompt_ids(model, prompt, ims, auds, vids)
        except BaseException:
            for e in ims + auds + vids:
                e.close()
            raise
    else:
        ids = model._tokenizer_required().encode(prompt) if isinstance(prompt, str) else prompt
        ids = ids_array(ids)
    matcher = StopMatcher(stop)
    try:
        con = constraint(model, json_schema, grammar)
    except BaseException:
        for e in media or ():
            e.close()
        raise
    sampler = Sampler(model.n_vocab, **sampling)
    return _pieces(model, ids, int(max_tokens), sampler, matcher, session, media, con, draft)


def _prefill(s, ids, sampler, media=None):
    """Feed the prompt ids into session s (keeping the prefix they share with its tokens,
    and with media: their keys too), record them in the sampler's history, and return the
    logits of the last one."""
    if not len(ids):
        if s.n_past == 0:
            raise InvalidArgumentError("generate: an empty prompt", _lib.EINVAL)
        raise InvalidArgumentError("generate: an empty prompt; feed the session first",
                                   _lib.EINVAL)
    if media is not None:
        logits = s._feed_prompt_media(ids, media, None)[0]
    else:
        logits = s.feed(ids) if s.n_past == 0 else s.feed_prompt(ids)[0]
    for t in ids.tolist():
        sampler.accept(t)
    return logits


def _text(buf, k):
    """The text of the k bytes a detok stream call wrote into buf (none when k <= 0)."""
    return buf.raw[:max(k, 0)].decode("utf-8", "replace")


class _Spec(Closing):
    """A speculative decoder (plume_spec) for one generation, with a drafter of the model's
    taken for it (None: prompt lookup); close() gives the drafter back."""

    def __init__(self, model, draft):
        self._ptr, self._model = None, model
        self._drafter = model._take_drafter()
        p = lib.plume_spec_default_params()
        p.draft_max, p.drafter = int(draft), self._drafter
        p.lookup = 0 if model._no_lookup else 1
        out, err = c_void_p(), c_void_p()
        try:
            check(lib.plume_spec_new(byref(out), model._p(), byref(p), byref(err)), err)
        except BaseException:
            self.close()
            raise
        self._ptr = out.value
        self.ids = np.zeros(_lib.SAMPLER_UNDO, np.int32)

    def step(self, s, sampler, pending, cap):
        """One speculative step after the pending id on session s: the ids it gives (the
        guesses kept, fed, then the next pending one, not fed), at most cap."""
        err = c_void_p()
        with s._lock:
            n = lib.plume_spec_step(self._ptr, s._p(), sampler._p(), int(pending), _lib.i32_ptr(self.ids),
                                    max(1, min(int(cap), _lib.SAMPLER_UNDO)), byref(err))
        check(min(n, 0), err)
        return self.ids[:n].tolist()

    def close(self):
        if self._ptr:
            st = [_lib.c_int64() for _ in range(5)]
            lib.plume_spec_stats(self._ptr, byref(st[0]), byref(st[1]), byref(st[2]))
            lib.plume_spec_source_stats(self._ptr, _lib.SPEC_LOOKUP, None, byref(st[3]), byref(st[4]))
            self._model._count_drafts(*(v.value for v in st))
            lib.plume_spec_free(self._ptr)
        self._ptr = None
        if self._drafter:
            self._model._give_drafter(self._drafter)
        self._drafter = None


def _pieces(model, ids, max_tokens, sampler, matcher, session, media=None, con=None, draft=0):
    """Yield the text generated after ids on session (None: a fresh one, closed at the end),
    step by step, until an end-of-turn token, a stop string, max_tokens (< 0: no limit) or
    a full context, held to the constraint con when not None; draft > 0: by speculative
    steps. Closes the sampler and frees con."""
    own = session is None
    s = model.session() if own else session
    spec = None
    try:
        try:
            logits = _prefill(s, ids, sampler, media)
        finally:  # the session keeps its own copy of the rows
            for e in media or ():
                e.close()
        if con:  # from here on the sampler's accepts move the constraint
            lib.plume_sampler_set_constraint(sampler._p(), con._ptr)
        ds = _lib.DetokStream()
        lib.plume_detok_stream_init(byref(ds), model._tokenizer_required()._p(), 1)
        piece = _lib.ctypes.create_string_buffer(256)
        n_gen, hit = 0, False
        one = np.zeros(1, np.int32)
        if draft > 0:
            spec = _Spec(model, draft)
        queue, n_fed = [], s.n_past  # speculative: ids decided ahead; what plain decoding fed
        while max_tokens < 0 or n_gen < max_tokens:
            if spec is None or n_gen == 0:
                tid = sampler.sample(logits)
            else:  # the previous id is pending (processed, not fed)
                if not queue:
                    queue = spec.step(s, sampler, tid, max_tokens - n_gen if max_tokens >= 0 else _lib.SAMPLER_UNDO)
                tid = queue.pop(0)
            if lib.plume_model_ends_turn(model._p(), tid):
                break
            k = lib.plume_detok_stream_put(byref(ds), tid, piece, len(piece))
            text, hit = matcher.feed(_text(piece, k))
            if text:
                yield text
            n_gen += 1
            if hit or (s.n_past if spec is None else n_fed) >= s.n_ctx:
                break
            if spec is not None:  # fed by the next step (or already by this one)
                n_fed += 1
                continue
            sampler.accept(tid)
            one[0] = tid
            s.feed(one, out=logits)
        if not hit:
            k = lib.plume_detok_stream_flush(byref(ds), piece, len(piece))
            text, hit = matcher.feed(_text(piece, k))
            rest = "" if hit else matcher.flush()
            if text + rest:
                yield text + rest
    finally:
        if spec is not None:
            try:  # a caller's session as plain decoding leaves it (also when the caller stops early)
                if not own and n_gen and s.n_past > n_fed:
                    s.rewind(n_fed)
                elif not own and n_gen and s.n_past < n_fed:  # the last id is pending
                    one[0] = tid
                    s.feed(one, logits=False)
            finally:
                spec.close()
        sampler.close()  # first: it points to the constraint
        if con:
            con.close()
        if own:
            s.close()
