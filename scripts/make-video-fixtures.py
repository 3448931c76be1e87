#!/usr/bin/env python3
"""make-video-fixtures.py -- the video fixtures of tests/data/tiny-video-a/ (developer tool, never
run by the build or the tests): the two golden clips and small extracts of the golden arrays of
shared/golden/tiny-video-a (Debian's python3-numpy).

    /usr/bin/python3 scripts/make-video-fixtures.py ../shared/golden/tiny-video-a tests/data/tiny-video-a

What it writes:
  clip0.mp4 clip1.webm           the golden files (h264 in MP4, vp9 in WebM), as they are
  expect.json                    per clip: decoded frame count, fps, sampled indices, timestamp
                                 strings, the SHA-256 of the 32 sampled decoded frames (all of
                                 clipK_frames_u8, uint8 [32, H, W, 3]) and of each resized frame
                                 (stats.json's resized_sha256), resized size, tokens per frame, T
  clipK_ids.npy                  the expanded prompt's ids (int32 [T])
  clipK_emb_ends.npy             video_emb rows of the first and the last frame (float32 [2n, H])
  clipK_logits_q8emb_rows.npy    logits_q8emb rows (float32 [R', V]) at the positions
  clipK_logits_q8emb_rows_idx.npy  (int32 [R']): the last soft token of frames 0, 15, 31 and the
                                 last 12 positions of the prompt
  clipK_greedy_q8emb.npy         the greedy continuation on q8 embeddings
Made here with the ffmpeg CLI (Debian's ffmpeg 5.1), their expectations in expect.json:
  rot90.mp4     clip0.mp4 remuxed with a 90-degree display matrix (-metadata:s:v rotate=90): the
                SHA-256 of the CLI's autorotated rgb24 decode, sampled (frames_sha256)
  short_av.mp4  1.2 s, 12 frames of 64x48 testsrc (H.264) and a 440 Hz sine (AAC, 44.1 kHz):
                fewer frames than 32, a sound track; the SHA-256 of all 12 decoded frames
  wide.mp4      one 8200x16 H.264 frame (over the 8192 side)
  big.mkv       one 4104x4104 H.264 frame in Matroska (over 4096 x 4096 pixels)
"""
import hashlib, json, os, shutil, subprocess, sys
import numpy as np

src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
stats = json.load(open(os.path.join(src, "stats.json")))
expect = {}
for k, c in sorted(stats["clips"].items()):
    shutil.copy(os.path.join(src, c["file"]), os.path.join(dst, c["file"]))
    frames = np.load(os.path.join(src, k + "_frames_u8.npy"))
    n = c["soft_tokens_per_frame"]
    expect[k] = {
        "file": c["file"], "decoded_frames": c["decoded_frames"], "fps": c["fps_used"],
        "indices": c["indices"], "timestamps": c["timestamp_strs"],
        "frames_sha256": hashlib.sha256(np.ascontiguousarray(frames).tobytes()).hexdigest(),
        "size_hw": list(frames.shape[1:3]), "resized_hw": c["resized_hw"], "resized_sha256": c["resized_sha256"],
        "tokens_per_frame": n, "T": c["T"]}
    ids = np.load(os.path.join(src, k + "_ids.npy")).astype(np.int32)
    np.save(os.path.join(dst, k + "_ids.npy"), ids)
    emb = np.load(os.path.join(src, k + "_video_emb.npy")).astype(np.float32)
    np.save(os.path.join(dst, k + "_emb_ends.npy"), np.concatenate([emb[:n], emb[-n:]]))
    pos = np.load(os.path.join(src, k + "_logit_pos.npy"))
    logits = np.load(os.path.join(src, k + "_logits_q8emb.npy"))
    vid = np.flatnonzero(ids == 16)  # tiny-mm-a's video_token_id
    want = [vid[(f + 1) * n - 1] for f in (0, 15, 31)] + list(range(len(ids) - 12, len(ids)))
    rows = [int(np.flatnonzero(pos == p)[0]) for p in want]
    np.save(os.path.join(dst, k + "_logits_q8emb_rows.npy"), logits[rows].astype(np.float32))
    np.save(os.path.join(dst, k + "_logits_q8emb_rows_idx.npy"), np.array(want, np.int32))
    np.save(os.path.join(dst, k + "_greedy_q8emb.npy"), np.load(os.path.join(src, k + "_greedy_q8emb.npy")).astype(np.int32))

def ff(*args):
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)

def decoded_sha(path, sample):
    """SHA-256 of the CLI's rgb24 frames (sampled as HF when sample) and their count."""
    raw = subprocess.run(["ffmpeg", "-v", "error", "-threads", "1", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         check=True, capture_output=True).stdout
    w, h = [int(x) for x in subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
            "stream=width,height", "-of", "csv=p=0", path], check=True, capture_output=True, text=True).stdout.split()[0].split(",")[:2]]
    rot = b"rotation=90" in subprocess.run(["ffprobe", "-v", "error", "-show_streams", path], capture_output=True).stdout
    if rot: w, h = h, w
    fr = np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)
    n = fr.shape[0]
    idx = [i * n // 32 for i in range(32)] if sample and n >= 32 else list(range(n))
    return hashlib.sha256(np.ascontiguousarray(fr[idx]).tobytes()).hexdigest(), n, w, h

ff("-i", os.path.join(src, "clip0.mp4"), "-c", "copy", "-metadata:s:v", "rotate=90", os.path.join(dst, "rot90.mp4"))
ff("-f", "lavfi", "-i", "testsrc=s=64x48:r=10", "-f", "lavfi", "-i", "sine=f=440:r=44100", "-t", "1.2", "-c:v", "libx264",
   "-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a", "32k", "-shortest", "-fflags", "+bitexact", "-map_metadata", "-1",
   os.path.join(dst, "short_av.mp4"))
ff("-f", "lavfi", "-i", "color=gray:s=8200x16:r=1", "-frames:v", "1", "-c:v", "libx264", "-pix_fmt", "yuv420p",
   os.path.join(dst, "wide.mp4"))
ff("-f", "lavfi", "-i", "color=gray:s=4104x4104:r=1", "-frames:v", "1", "-c:v", "libx264", "-preset", "veryslow", "-crf", "51",
   "-pix_fmt", "yuv420p", os.path.join(dst, "big.mkv"))
for name in ("rot90.mp4", "short_av.mp4"):
    sha, n, w, h = decoded_sha(os.path.join(dst, name), True)
    expect[name] = {"frames_sha256": sha, "decoded_frames": n, "size_hw": [h, w]}
json.dump(expect, open(os.path.join(dst, "expect.json"), "w"), indent=1)
