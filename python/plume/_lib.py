"""The C side: libplume loaded with ctypes, every function used declared with its types.

The structs below mirror include/plume.h field for field; tests/test_abi.py compiles a small
C program that prints the C sizes and offsets and compares them with these, so a change of
the header that is not made here fails `make check`.

ctypes releases the GIL for the duration of every foreign call, so a forward step of one
session does not block the Python threads stepping others.
"""
import ctypes
import ctypes.util
import os
import sys

from ctypes import (POINTER, Structure, byref, c_char, c_char_p, c_double, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint8, c_uint64, c_void_p)

# plume_bundle_verify's report callback: one line per bad file.
VerifyReport = ctypes.CFUNCTYPE(None, c_char_p, c_void_p)

# Error codes (enum in plume.h).
OK, EIO, EFORMAT, ENOMEM, EINVAL, ERANGE, EMISMATCH = 0, -1, -2, -3, -4, -5, -6


class SamplerParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float),
                ("min_p", c_float), ("repeat_penalty", c_float), ("repeat_last_n", c_int32),
                ("presence_penalty", c_float), ("frequency_penalty", c_float),
                ("seed", c_uint64)]


class ModelParams(Structure):
    _fields_ = [("isa", c_char_p), ("n_threads", c_int32), ("exact", c_int32)]


class SessionParams(Structure):
    _fields_ = [("n_ctx", c_int32), ("n_batch", c_int32), ("n_rewind", c_int32),
                ("snapshot_every", c_int32), ("kv_bits", c_int32)]


class DetokStream(Structure):
    _fields_ = [("tok", c_void_p), ("skip_special", c_int32), ("pending", c_uint8 * 8),
                ("n_pending", c_int32)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class ImageParams(Structure):
    _fields_ = [("max_tokens", c_int32)]
class VideoParams(Structure):
    _fields_ = [("audio", c_int32), ("n_threads", c_int32), ("abort", c_void_p), ("abort_ctx", c_void_p)]


class ConstraintParams(Structure):
    _fields_ = [("thinking", c_int32)]


class SpecParams(Structure):
    _fields_ = [("draft_max", c_int32), ("ngram_max", c_int32), ("ngram_min", c_int32), ("adaptive", c_int32),
                ("draft_fn", c_void_p), ("draft_user", c_void_p), ("drafter", c_void_p), ("lookup", c_int32)]


class ConvertParams(Structure):
    _fields_ = [("weights", c_char_p), ("n_ctx", c_int32), ("progress", c_int32), ("layout", c_char_p),
                ("head", c_char_p), ("q4_scale", c_char_p),
                ("report", c_int32)]


# Every struct mirrored here, by its C name (for the ABI test).
STRUCTS = {"plume_sampler_params": SamplerParams, "plume_model_params": ModelParams,
           "plume_session_params": SessionParams, "plume_detok_stream": DetokStream,
           "plume_chat_message": ChatMessage, "plume_convert_params": ConvertParams,
           "plume_image_params": ImageParams, "plume_video_params": VideoParams,
           "plume_constraint_params": ConstraintParams, "plume_spec_params": SpecParams}

SAMPLER_UNDO = 64  # PLUME_SAMPLER_UNDO: a speculative step gives at most this many ids
SPEC_LOOKUP = 0  # PLUME_SPEC_LOOKUP: prompt lookup's guesses (plume_spec_source_stats)

_ERR = POINTER(c_void_p)  # char **err
_I32P = POINTER(c_int32)
_F32P = POINTER(c_float)

# name: (restype, argtypes)
_FUNCS = {
    "plume_tokenizer_open": (c_int, [POINTER(c_void_p), c_char_p, _ERR]),
    "plume_tokenizer_free": (None, [c_void_p]),
    "plume_tokenizer_n_vocab": (c_int32, [c_void_p]),
    "plume_tokenize": (c_int32, [c_void_p, c_char_p, c_size_t, _I32P, c_int32]),
    "plume_detokenize": (c_int64, [c_void_p, _I32P, c_int32, c_int32, c_char_p, c_size_t]),
    "plume_detok_stream_init": (None, [POINTER(DetokStream), c_void_p, c_int32]),
    "plume_detok_stream_put": (c_int32, [POINTER(DetokStream), c_int32, c_char_p, c_size_t]),
    "plume_detok_stream_flush": (c_int32, [POINTER(DetokStream), c_char_p, c_size_t]),
    "plume_token_is_special": (c_int32, [c_void_p, c_int32]),
    "plume_chat_render": (c_int, [POINTER(ChatMessage), c_int32, c_int32, c_int32,
                                  POINTER(c_void_p), _ERR]),
    "plume_sampler_default_params": (SamplerParams, []),
    "plume_sampler_new": (c_int, [POINTER(c_void_p), POINTER(SamplerParams), c_int32, _ERR]),
    "plume_sampler_free": (None, [c_void_p]),
    "plume_sampler_accept": (None, [c_void_p, c_int32]),
    "plume_sampler_reset": (None, [c_void_p]),
    "plume_sampler_sample": (c_int32, [c_void_p, _F32P]),
    "plume_sampler_set_constraint": (None, [c_void_p, c_void_p]),
    "plume_vocab_new": (c_int, [POINTER(c_void_p), c_void_p, _ERR]),
    "plume_vocab_free": (None, [c_void_p]),
    "plume_constraint_default_params": (ConstraintParams, []),
    "plume_constraint_new_json_schema": (c_int, [POINTER(c_void_p), c_void_p, c_char_p, c_size_t,
                                                 POINTER(ConstraintParams), _ERR]),
    "plume_constraint_new_grammar": (c_int, [POINTER(c_void_p), c_void_p, c_char_p, c_size_t,
                                             POINTER(ConstraintParams), _ERR]),
    "plume_constraint_free": (None, [c_void_p]),
    "plume_constraint_reset": (None, [c_void_p]),
    "plume_constraint_status": (c_int32, [c_void_p]),
    "plume_model_default_params": (ModelParams, []),
    "plume_model_open": (c_int, [POINTER(c_void_p), c_char_p, POINTER(ModelParams), _ERR]),
    "plume_model_free": (None, [c_void_p]),
    "plume_model_n_vocab": (c_int32, [c_void_p]),
    "plume_model_n_ctx": (c_int32, [c_void_p]),
    "plume_model_n_layers": (c_int32, [c_void_p]),
    "plume_model_isa": (c_char_p, [c_void_p]),
    "plume_model_n_threads": (c_int32, [c_void_p]),
    "plume_model_weights": (c_char_p, [c_void_p]),
    "plume_model_tokenizer": (c_void_p, [c_void_p]),
    "plume_model_ends_turn": (c_int32, [c_void_p, c_int32]),
    "plume_session_default_params": (SessionParams, []),
    "plume_session_new": (c_int, [POINTER(c_void_p), c_void_p, POINTER(SessionParams), _ERR]),
    "plume_session_free": (None, [c_void_p]),
    "plume_session_feed": (c_int, [c_void_p, _I32P, c_int32, _F32P, c_int32, _ERR]),
    "plume_session_feed_prompt": (c_int, [c_void_p, _I32P, c_int32, _F32P, _I32P, _ERR]),
    "plume_session_rewind": (c_int, [c_void_p, c_int32, _ERR]),
    "plume_session_save": (c_int, [c_void_p, c_char_p, _ERR]),
    "plume_session_load": (c_int, [POINTER(c_void_p), c_void_p, c_char_p, _ERR]),
    "plume_session_n_past": (c_int32, [c_void_p]),
    "plume_session_n_ctx": (c_int32, [c_void_p]),
    "plume_session_tokens": (_I32P, [c_void_p]),
    "plume_session_feed_prompt_media": (c_int, [c_void_p, _I32P, c_int32, POINTER(c_void_p), c_int32, _F32P,
                                                _I32P, _ERR]),
    "plume_model_has_vision": (c_int32, [c_void_p]),
    "plume_model_has_audio": (c_int32, [c_void_p]),
    "plume_model_media_token": (c_int32, [c_void_p, c_char_p]),
    "plume_image_load": (c_int, [POINTER(c_void_p), c_char_p, _ERR]),
    "plume_image_decode": (c_int, [POINTER(c_void_p), c_char_p, c_size_t, _ERR]),
    "plume_image_from_rgb": (c_int, [POINTER(c_void_p), POINTER(c_uint8), c_int32, c_int32, _ERR]),
    "plume_image_free": (None, [c_void_p]),
    "plume_image_default_params": (ImageParams, []),
    "plume_image_encode": (c_int, [POINTER(c_void_p), c_void_p, c_void_p, POINTER(ImageParams), _ERR]),
    "plume_audio_load": (c_int, [POINTER(c_void_p), c_char_p, _ERR]),
    "plume_audio_decode": (c_int, [POINTER(c_void_p), c_char_p, c_size_t, _ERR]),
    "plume_audio_from_pcm": (c_int, [POINTER(c_void_p), _F32P, c_int64, c_int32, _ERR]),
    "plume_audio_free": (None, [c_void_p]),
    "plume_audio_n_samples": (c_int64, [c_void_p]),
    "plume_audio_samples": (_F32P, [c_void_p]),
    "plume_audio_encode": (c_int, [POINTER(c_void_p), c_void_p, c_void_p, _ERR]),
    "plume_video_load": (c_int, [POINTER(c_void_p), c_char_p, POINTER(VideoParams), _ERR]),
    "plume_video_decode": (c_int, [POINTER(c_void_p), c_char_p, c_size_t, POINTER(VideoParams), _ERR]),
    "plume_video_from_frames": (c_int, [POINTER(c_void_p), POINTER(c_uint8), c_int32, c_int32, c_int32, c_double, _ERR]),
    "plume_video_free": (None, [c_void_p]),
    "plume_video_default_params": (VideoParams, []),
    "plume_video_n_frames": (c_int32, [c_void_p]),
    "plume_video_timestamp": (c_char_p, [c_void_p, c_int32]),
    "plume_video_encode": (c_int, [POINTER(c_void_p), c_void_p, c_void_p, _ERR]),
    "plume_embd_free": (None, [c_void_p]),
    "plume_embd_n_tokens": (c_int32, [c_void_p]),
    "plume_embd_dim": (c_int32, [c_void_p]),
    "plume_embd_data": (_F32P, [c_void_p]),
    "plume_prompt_expand": (c_int32, [c_void_p, _I32P, c_int32, POINTER(c_void_p), c_int32, _I32P, c_int32, _ERR]),
    "plume_drafter_open": (c_int, [POINTER(c_void_p), c_void_p, c_char_p, _ERR]),
    "plume_drafter_free": (None, [c_void_p]),
    "plume_drafter_find": (c_void_p, [c_void_p]),
    "plume_spec_default_params": (SpecParams, []),
    "plume_spec_new": (c_int, [POINTER(c_void_p), c_void_p, POINTER(SpecParams), _ERR]),
    "plume_spec_free": (None, [c_void_p]),
    "plume_spec_step": (c_int32, [c_void_p, c_void_p, c_void_p, c_int32, _I32P, c_int32, _ERR]),
    "plume_spec_stats": (None, [c_void_p, POINTER(c_int64), POINTER(c_int64), POINTER(c_int64)]),
    "plume_spec_source_stats": (None, [c_void_p, c_int32, POINTER(c_int64), POINTER(c_int64), POINTER(c_int64)]),
    "plume_convert_default_params": (ConvertParams, []),
    "plume_convert": (c_int, [c_char_p, c_char_p, POINTER(ConvertParams), _ERR]),
    "plume_bundle_verify": (c_int, [c_char_p, c_void_p, c_void_p, VerifyReport, _ERR]),
}


def _library_path():
    """$PLUME_LIBRARY, else the libplume that `pip install` put beside this file."""
    env = os.environ.get("PLUME_LIBRARY")
    if env:
        return env
    name = "libplume.dylib" if sys.platform == "darwin" else "libplume.so"
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def _load():
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError("plume: %s is missing; install the package with "
                          "`pip install ./python` (it builds libplume) or set PLUME_LIBRARY" % path)
    lib = ctypes.CDLL(path)
    for name, (res, args) in _FUNCS.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


lib = _load()
LIBRARY_PATH = _library_path()

# free() of the C library libplume allocates with (messages, rendered chat text).
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None


def take_string(p):
    """The text of a malloc'd C string, which is freed."""
    if not p:
        return ""
    try:
        return ctypes.string_at(p).decode("utf-8", "replace")
    finally:
        _libc.free(p)


def i32_ptr(arr):
    """A int32_t * to the data of a C-contiguous int32 numpy array."""
    return arr.ctypes.data_as(_I32P)


def f32_ptr(arr):
    """A float * to the data of a C-contiguous float32 numpy array (or NULL for None)."""
    return None if arr is None else arr.ctypes.data_as(_F32P)


__all__ = ["lib", "take_string", "i32_ptr", "f32_ptr", "byref", "c_void_p", "c_int32",
           "c_char", "c_uint8", "POINTER", "STRUCTS"]
