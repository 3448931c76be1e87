"""plume: Gemma 4 E2B/E4B on a CPU, from Python.

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
# The package, one concern per module; each imports only those above it in this list:
#   _lib        the C side: libplume loaded with ctypes, the structs of plume.h mirrored
#   _errors     Error and one subclass per PLUME_E* code; return code + message -> exception
#   _common     the close/with base of every wrapper; ids and paths as libplume takes them
#   _tokenizer  Tokenizer (text <-> ids) and render_chat (the chat template)
#   _sampler    Sampler (logits -> id)
#   _session    Session (one conversation's caches: feed, rewind, save)
#   _media      images and audio: decoded, encoded by the towers, their placeholders expanded
#   _generate   the generation loop behind Model.generate (prefill, sample, stop strings)
#   _convert    convert (HF checkpoint -> bundle), verify (a bundle against its manifest)
#   _model      Model (a bundle opened): sessions, its tokenizer, generate
# The public names are the ones below, defined in those modules and re-exported here: users
# (and __init__.pyi, which types them) know only `plume.X`.
from . import _lib  # noqa: F401 -- plume._lib (LIBRARY_PATH, the ABI test)
from ._convert import convert, verify
from ._errors import (Error, FileError, FormatError, InvalidArgumentError, MismatchError,
                      OutOfMemoryError, RangeError)
from ._model import Model
from ._sampler import Sampler
from ._session import Session
from ._tokenizer import Tokenizer, render_chat

__version__ = "0.1.0"

__all__ = ["Error", "FileError", "FormatError", "OutOfMemoryError", "InvalidArgumentError",
           "RangeError", "MismatchError", "Model", "Session", "Tokenizer", "Sampler",
           "render_chat", "convert", "verify", "__version__"]

# Each public class and function says it is plume's, not its private module's: repr()
# (<class 'plume.FileError'>), tracebacks (plume.FileError: ...), help() and pickle name it
# plume.X, the name users import.
for _name in __all__[:-1]:
    globals()[_name].__module__ = __name__
del _name
