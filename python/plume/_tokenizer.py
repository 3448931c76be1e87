"""Text and token ids: the Gemma 4 tokenizer (Tokenizer) and the chat template
(render_chat), the two steps between a conversation and the ids a session is fed.

May use _lib, _errors and _common; knows nothing of models beyond the owner it is handed
(a Model whose tokenizer this is, checked open on every call).
"""
import numpy as np

from . import _lib
from ._common import Closing, c_path, ids_array
from ._errors import Error, InvalidArgumentError, check
from ._lib import byref, c_void_p, i32_ptr, lib, take_string

# ---- tokenizer ---------------------------------------------------------------------------


class Tokenizer(Closing):
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
        check(lib.plume_tokenizer_open(byref(out), c_path(path), byref(err)), err)
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
        a = ids_array(ids) if len(ids) else np.zeros(0, np.int32)
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


# ---- chat template -----------------------------------------------------------------------


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
    check(lib.plume_chat_render(arr, len(msgs), int(bool(add_generation_prompt)),
                                int(bool(enable_thinking)), byref(out), byref(err)), err)
    return take_string(out.value)
