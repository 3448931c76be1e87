"""Images and audio through the binding, on tiny-mm-a (tiny-a's text weights with the golden
vision and audio towers, converted by the CLI): Model.embed_image / embed_audio against the
golden embeddings (from a path, bytes and numpy arrays alike), generate(images=, audio=) token
for token as `plume run --image / --audio`, Model.transcribe as `plume transcribe`, and the
refusals."""
import json
import os
import struct
import unittest
import wave

import numpy as np

import plume
from common import CLI, ROOT, cli, bundle, rel_rms, tmpdir

MM = os.path.join(ROOT, "tests", "data", "tiny-mm-a")
TINY_A = os.path.join(ROOT, "tests", "data", "tiny-a", "hf")
_mm = None


def mm_bundle():
    """The tiny-mm-a checkpoint put together (tests/t_mm.h's t_mm_checkpoint) and converted."""
    global _mm
    if _mm:
        return _mm
    ck = os.path.join(tmpdir(), "mm-hf")
    os.makedirs(ck)
    for f in ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer.json",
              "tokenizer_config.json"]:
        os.symlink(os.path.join(TINY_A, f), os.path.join(ck, f))
    for f in ["config.json", "audio_tower.safetensors", "vision_tower.safetensors"]:
        os.symlink(os.path.join(MM, f), os.path.join(ck, f))
    with open(os.path.join(TINY_A, "model.safetensors.index.json")) as f:
        index = json.load(f)
    for f in ["audio_tower.safetensors", "vision_tower.safetensors"]:
        with open(os.path.join(MM, f), "rb") as t:
            n = struct.unpack("<Q", t.read(8))[0]
            for name in json.loads(t.read(n)):
                if name != "__metadata__":
                    index["weight_map"][name] = f
    with open(os.path.join(ck, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    out = os.path.join(tmpdir(), "mm")
    cli("convert", ck, out, "--weights", "f32", "--quiet")
    _mm = out
    return out


def wav_samples(path):
    """A 16-bit mono WAV's samples as float32 (int16 / 32768, as libsndfile reads them)."""
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0


def run_cli(*args):
    """plume run's stdout (its last newline cut)."""
    _, out, _ = cli("run", *args)
    out = out.decode("utf-8", "replace")
    return out[:-1] if out.endswith("\n") else out


class TestMedia(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = plume.Model(mm_bundle(), threads=1, exact=True)

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def test_towers(self):
        self.assertTrue(self.m.has_vision and self.m.has_audio)
        with plume.Model(bundle("f32"), threads=1) as text_only:
            self.assertFalse(text_only.has_vision or text_only.has_audio)
            with self.assertRaises(plume.InvalidArgumentError) as cm:
                text_only.embed_image(os.path.join(MM, "A.png"))
            self.assertIn("vision tower", str(cm.exception))
            with self.assertRaises(plume.InvalidArgumentError):
                text_only.embed_audio(os.path.join(MM, "short.wav"))

    def test_embed_image_matches_golden(self):
        path = os.path.join(MM, "A.png")
        gold = np.load(os.path.join(MM, "image0_vision_emb.npy")).astype(np.float32).reshape(-1, self.m_dim())
        e = self.m.embed_image(path)
        self.assertEqual(e.shape, gold.shape)
        self.assertLess(rel_rms(e, gold), 1e-4)
        with open(path, "rb") as f:
            np.testing.assert_array_equal(self.m.embed_image(f.read()), e)
        # a numpy array of pixels: the golden decode of B_crop.jpg gives what the file gives
        px = np.load(os.path.join(MM, "B_crop_decoded.npy")).astype(np.uint8)
        np.testing.assert_array_equal(self.m.embed_image(px), self.m.embed_image(os.path.join(MM, "B_crop.jpg")))
        self.assertEqual(self.m.embed_image(path, max_tokens=70).shape[0] <= 70, True)

    def m_dim(self):
        return np.load(os.path.join(MM, "audio0_audio_emb.npy")).shape[-1]

    def test_embed_audio_matches_golden(self):
        path = os.path.join(MM, "speechlike.wav")
        gold = np.load(os.path.join(MM, "audio0_audio_emb.npy")).astype(np.float32)
        e = self.m.embed_audio(path)
        self.assertEqual(e.shape, (58, gold.shape[-1]))
        self.assertLess(rel_rms(e, gold.reshape(e.shape)), 1e-4)
        np.testing.assert_array_equal(self.m.embed_audio(wav_samples(path)), e)
        with open(path, "rb") as f:
            np.testing.assert_array_equal(self.m.embed_audio(f.read()), e)

    def test_generate_as_cli(self):
        prompt = plume.render_chat([{"role": "user", "content": "What is this?"}], add_generation_prompt=True)
        img, wav = os.path.join(MM, "A.png"), os.path.join(MM, "speechlike.wav")
        got = "".join(self.m.generate(prompt, 8, temperature=0.0, images=[img]))
        want = run_cli("-m", mm_bundle(), "--image", img, "-p", "What is this?", "-n", "8", "--temp", "0", "--exact")
        self.assertEqual(got, want)
        got = "".join(self.m.generate(prompt, 8, temperature=0.0, audio=[wav_samples(wav)]))
        want = run_cli("-m", mm_bundle(), "--audio", wav, "-p", "What is this?", "-n", "8", "--temp", "0", "--exact")
        self.assertEqual(got, want)
        # where the prompt says: the same as media first when the text puts them first
        prompt2 = plume.render_chat([{"role": "user", "content": "<|image|>What is this?"}], add_generation_prompt=True)
        self.assertEqual("".join(self.m.generate(prompt2, 8, temperature=0.0, images=[img])),
                         "".join(self.m.generate(prompt, 8, temperature=0.0, images=[img])))

    def test_video(self):
        """embed_video against tiny-video-a's first and last frame; the same rows from bytes;
        decoded frames as an array; generate(videos=) as `plume run --video`; refusals."""
        vid = os.path.join(ROOT, "tests", "data", "tiny-video-a")
        clip = os.path.join(vid, "clip0.mp4")
        gold = np.load(os.path.join(vid, "clip0_emb_ends.npy"))
        e = self.m.embed_video(clip)
        self.assertEqual(e.shape, (32 * 66, gold.shape[-1]))
        self.assertLess(rel_rms(np.concatenate([e[:66], e[-66:]]), gold), 1e-4)
        with open(clip, "rb") as f:
            np.testing.assert_array_equal(self.m.embed_video(f.read()), e)
        frames = np.random.default_rng(3).integers(0, 256, (5, 48, 64, 3), dtype=np.uint8)
        self.assertEqual(self.m.embed_video(frames, fps=10).shape, (5 * 63, gold.shape[-1]))  # fewer than 32: all
        prompt = plume.render_chat([{"role": "user", "content": "Describe."}], add_generation_prompt=True)
        got = "".join(self.m.generate(prompt, 8, temperature=0.0, videos=[clip]))
        want = run_cli("-m", mm_bundle(), "--video", clip, "-p", "Describe.", "-n", "8", "--temp", "0", "--exact")
        self.assertEqual(got, want)
        with self.assertRaises(plume.FormatError) as cm:
            self.m.embed_video(os.path.join(MM, "A.png"))
        self.assertIn("not a video", str(cm.exception))
        with open(clip, "rb") as f:
            with self.assertRaises(plume.FormatError) as cm:
                self.m.embed_video(f.read()[:20000])
        self.assertIn("truncated", str(cm.exception))
        with self.assertRaises(plume.InvalidArgumentError):
            self.m.embed_video(np.zeros((2, 8, 8), np.uint8))

    def test_session_reuses_the_image(self):
        prompt = plume.render_chat([{"role": "user", "content": "Describe."}], add_generation_prompt=True)
        img = os.path.join(MM, "A.png")
        with self.m.session() as s:
            a = "".join(self.m.generate(prompt, 4, temperature=0.0, images=[img], session=s))
            n1 = s.n_past
            b = "".join(self.m.generate(prompt, 4, temperature=0.0, images=[img], session=s))
            self.assertEqual(a, b)
            self.assertEqual(s.n_past, n1)

    def test_transcribe_as_cli(self):
        wav = os.path.join(MM, "speechlike.wav")
        _, out, _ = cli("transcribe", "-m", mm_bundle(), wav, "--exact")
        want = out.decode("utf-8", "replace")
        self.assertEqual(self.m.transcribe(wav), want[:-1] if want.endswith("\n") else want)

    def test_refusals(self):
        prompt = plume.render_chat([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
        with self.assertRaises(plume.FormatError):
            self.m.embed_image(b"not an image")
        with self.assertRaises(plume.InvalidArgumentError):
            self.m.embed_image(np.zeros((4, 4), np.uint8))
        with self.assertRaises(plume.InvalidArgumentError):
            self.m.embed_audio(np.zeros(100, np.float64))
        with self.assertRaises(plume.FormatError):
            self.m.embed_audio(b"RIFF....not audio")
        with self.assertRaises(plume.InvalidArgumentError):  # two placeholders, one image
            self.m.generate(prompt.replace("Hi", "<|image|><|image|>Hi"), 2, images=[os.path.join(MM, "A.png")])
        with self.assertRaises(plume.InvalidArgumentError):
            self.m.generate([2, 3, 4], 2, images=[os.path.join(MM, "A.png")])
        with self.assertRaises(plume.FileError):
            self.m.embed_image(os.path.join(MM, "no-such.png"))


if __name__ == "__main__":
    unittest.main()
