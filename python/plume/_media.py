"""Images, audio and video in (docs/MEDIA.md): what a user hands over (a path, bytes, a numpy
array) decoded by libplume, encoded by the bundle's towers into soft tokens (plume_embd), and the
prompt whose placeholders they fill: each <|image|> / <|audio|> / <|video|> of the text becomes
the model's placeholder id, then its run (<|image> N x <|image|> <image|>; a video's frames
with their timestamps).

May use _lib, _errors and _common; knows of the model only its handle (model._p()) and its
tokenizer (model._tokenizer_required()).
"""
import os

import numpy as np

from . import _lib
from ._common import Closing, c_path
from ._errors import InvalidArgumentError, check
from ._lib import byref, c_void_p, lib

AUDIO_RATE = 16000  # samples per second the audio tower hears (PLUME_AUDIO_RATE)
IMAGE_TEXT, AUDIO_TEXT, VIDEO_TEXT = "<|image|>", "<|audio|>", "<|video|>"


class Embd(Closing):
    """Soft tokens of one image or clip (a plume_embd), freed by close()."""

    def __init__(self, ptr):
        self.ptr = ptr

    def rows(self):
        """float32 [n_tokens, dim], a copy."""
        n, d = lib.plume_embd_n_tokens(self.ptr), lib.plume_embd_dim(self.ptr)
        return np.ctypeslib.as_array(lib.plume_embd_data(self.ptr), (n, d)).copy()

    def close(self):
        if self.ptr:
            lib.plume_embd_free(self.ptr)
        self.ptr = None


def _is_path(x):
    return isinstance(x, (str, os.PathLike))


def load_image(image):
    """A plume_image handle from a path, encoded bytes (PNG, JPEG, WebP) or a uint8 numpy
    array [height, width, 3] (RGB); the caller frees it."""
    out, err = c_void_p(), c_void_p()
    if _is_path(image):
        check(lib.plume_image_load(byref(out), c_path(image), byref(err)), err)
    elif isinstance(image, (bytes, bytearray, memoryview)):
        b = bytes(image)
        check(lib.plume_image_decode(byref(out), b, len(b), byref(err)), err)
    elif isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise InvalidArgumentError("an image array must be uint8 [height, width, 3] (RGB), not %s %s"
                                       % (image.dtype, image.shape), _lib.EINVAL)
        a = np.ascontiguousarray(image)
        check(lib.plume_image_from_rgb(byref(out), a.ctypes.data_as(_lib.POINTER(_lib.c_uint8)), a.shape[1],
                                       a.shape[0], byref(err)), err)
    else:
        raise InvalidArgumentError("an image is a path, bytes or a uint8 numpy array [h, w, 3], not %s"
                                   % type(image).__name__, _lib.EINVAL)
    return out.value


def load_audio(audio):
    """A plume_audio handle from a path, encoded bytes (WAV, FLAC, Ogg, MP3) or float32
    samples at 16 kHz (a 1-D numpy array, mono); the caller frees it."""
    out, err = c_void_p(), c_void_p()
    if _is_path(audio):
        check(lib.plume_audio_load(byref(out), c_path(audio), byref(err)), err)
    elif isinstance(audio, (bytes, bytearray, memoryview)):
        b = bytes(audio)
        check(lib.plume_audio_decode(byref(out), b, len(b), byref(err)), err)
    elif isinstance(audio, np.ndarray):
        if audio.dtype != np.float32 or audio.ndim != 1:
            raise InvalidArgumentError("audio samples must be a 1-D float32 array at 16 kHz, not %s %s"
                                       % (audio.dtype, audio.shape), _lib.EINVAL)
        a = np.ascontiguousarray(audio)
        check(lib.plume_audio_from_pcm(byref(out), _lib.f32_ptr(a), len(a), AUDIO_RATE, byref(err)), err)
    else:
        raise InvalidArgumentError("audio is a path, bytes or a float32 numpy array at 16 kHz, not %s"
                                   % type(audio).__name__, _lib.EINVAL)
    return out.value


def encode_image(model, image, max_tokens=0):
    """The soft tokens of an image (Embd): decoded, resized to the budget max_tokens (70, 140,
    280, 560, 1120; 0: the model's default), through the vision tower."""
    img = load_image(image)
    try:
        p = lib.plume_image_default_params()
        p.max_tokens = int(max_tokens)
        out, err = c_void_p(), c_void_p()
        check(lib.plume_image_encode(byref(out), model._p(), img, byref(p), byref(err)), err)
        return Embd(out.value)
    finally:
        lib.plume_image_free(img)


def encode_audio(model, audio):
    """The soft tokens of a clip (Embd), through the audio tower (longer than 30 s: 30 s
    clips one after the other, as the library does)."""
    a = load_audio(audio)
    try:
        out, err = c_void_p(), c_void_p()
        check(lib.plume_audio_encode(byref(out), model._p(), a, byref(err)), err)
        return Embd(out.value)
    finally:
        lib.plume_audio_free(a)


def load_video(video, fps=0.0):
    """A plume_video handle from a path, encoded bytes (MP4, MOV, MKV, WebM) or decoded frames,
    a uint8 numpy array [n, h, w, 3] (RGB; fps for the timestamps, 0: 24 as Hugging Face)."""
    out, err = c_void_p(), c_void_p()
    if _is_path(video):
        check(lib.plume_video_load(byref(out), c_path(video), None, byref(err)), err)
    elif isinstance(video, (bytes, bytearray, memoryview)):
        b = bytes(video)
        check(lib.plume_video_decode(byref(out), b, len(b), None, byref(err)), err)
    elif isinstance(video, np.ndarray):
        if video.dtype != np.uint8 or video.ndim != 4 or video.shape[3] != 3:
            raise InvalidArgumentError("video frames must be uint8 [n, height, width, 3] (RGB), not %s %s"
                                       % (video.dtype, video.shape), _lib.EINVAL)
        a = np.ascontiguousarray(video)
        check(lib.plume_video_from_frames(byref(out), a.ctypes.data_as(_lib.POINTER(_lib.c_uint8)), a.shape[0],
                                          a.shape[2], a.shape[1], float(fps), byref(err)), err)
    else:
        raise InvalidArgumentError("a video is a path, bytes or a uint8 numpy array [n, h, w, 3], not %s"
                                   % type(video).__name__, _lib.EINVAL)
    return out.value


def encode_video(model, video, fps=0.0):
    """The soft tokens of a video (Embd): 32 frames sampled as Hugging Face's processor (all of
    a clip shorter than that), each resized to 70 tokens and through the vision tower."""
    v = load_video(video, fps)
    try:
        out, err = c_void_p(), c_void_p()
        check(lib.plume_video_encode(byref(out), model._p(), v, byref(err)), err)
        return Embd(out.value)
    finally:
        lib.plume_video_free(v)


def encode_all(model, images, audio, videos=None):
    """(Embd list of the images, of the clips, of the videos), in order; all freed on error."""
    done = []
    try:
        ims = [encode_image(model, x) for x in images or ()]
        done += ims
        auds = [encode_audio(model, x) for x in audio or ()]
        done += auds
        vids = [encode_video(model, x) for x in videos or ()]
        return ims, auds, vids
    except BaseException:
        for e in done:
            e.close()
        raise


def _with_placeholders(prompt, n_images, n_audio, n_videos=0):
    """The prompt as given when it holds one <|image|> per image, one <|audio|> per clip and
    one <|video|> per video; without any, the placeholders are put first (media before text, as
    the model card says): after the chat template's opening of the last user turn when the
    prompt is chat text, else after <bos>. Other counts are an error."""
    have_i, have_a, have_v = prompt.count(IMAGE_TEXT), prompt.count(AUDIO_TEXT), prompt.count(VIDEO_TEXT)
    if (have_i, have_a, have_v) == (n_images, n_audio, n_videos):
        return prompt
    if have_i or have_a or have_v:
        raise InvalidArgumentError("the prompt holds %d %s, %d %s and %d %s, but %d images, %d audio clips and %d "
                                   "videos were given" % (have_i, IMAGE_TEXT, have_a, AUDIO_TEXT, have_v, VIDEO_TEXT,
                                                          n_images, n_audio, n_videos), _lib.EINVAL)
    ph = IMAGE_TEXT * n_images + VIDEO_TEXT * n_videos + AUDIO_TEXT * n_audio
    turn = "<|turn>user\n"
    at = prompt.rfind(turn)
    if at >= 0:
        at += len(turn)
    else:
        at = len("<bos>") if prompt.startswith("<bos>") else 0
    return prompt[:at] + ph + prompt[at:]


def prompt_ids(model, prompt, ims, auds, vids=()):
    """The ids of a text prompt with media: placeholders checked (or put first), the text
    between them tokenized, each placeholder the model's id, then expanded into its run
    (plume_prompt_expand). Returns (int32 ids, the media handles in the prompt's order)."""
    tok = model._tokenizer_required()
    text = _with_placeholders(prompt, len(ims), len(auds), len(vids))
    pid = {IMAGE_TEXT: lib.plume_model_media_token(model._p(), b"image"),
           AUDIO_TEXT: lib.plume_model_media_token(model._p(), b"audio"),
           VIDEO_TEXT: lib.plume_model_media_token(model._p(), b"video")}
    ids, order, rest = [], [], text
    queues = {IMAGE_TEXT: list(ims), AUDIO_TEXT: list(auds), VIDEO_TEXT: list(vids)}
    while True:
        hits = [(rest.find(k), k) for k in (IMAGE_TEXT, AUDIO_TEXT, VIDEO_TEXT) if rest.find(k) >= 0]
        if not hits:
            ids += list(tok.encode(rest)) if rest else []
            break
        at, k = min(hits)
        if at:
            ids += list(tok.encode(rest[:at]))
        ids.append(pid[k])
        order.append(queues[k].pop(0))
        rest = rest[at + len(k):]
    a = np.asarray(ids, np.int32)
    handles = (c_void_p * max(len(order), 1))(*[e.ptr for e in order])
    err = c_void_p()
    need = lib.plume_prompt_expand(model._p(), _lib.i32_ptr(a), len(a), handles, len(order), None, 0, byref(err))
    if need < 0:
        check(need, err, "prompt")
    out = np.empty(max(need, 1), np.int32)
    n = lib.plume_prompt_expand(model._p(), _lib.i32_ptr(a), len(a), handles, len(order), _lib.i32_ptr(out), need,
                                byref(err))
    if n < 0:
        check(n, err, "prompt")
    return out[:n], order
