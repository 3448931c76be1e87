#!/usr/bin/env python3
"""make-mm-fixtures.py -- the image fixtures of tests/data/tiny-mm-a/ (developer tool, never run by
the build or the tests): small copies and subsets of shared/golden/tiny-mm-a, and decode/resize
references made with Pillow (HF's PIL image processor is the reference; Debian's python3-pil and
python3-numpy).

    /usr/bin/python3 scripts/make-mm-fixtures.py ../shared/golden/tiny-mm-a tests/data/tiny-mm-a

What it writes (sizes in the README of tests/data/tiny-mm-a):
  hf/config.json                 the golden checkpoint's (its tokenizer is tiny-a's with ids 10-16
                                 renamed; the tests use tiny-a's, whose ids 10-16 are specials too)
  hf/vision.safetensors          the golden's vision tower + embed_vision tensors (BF16, as stored)
  hf/model.safetensors.index.json  text tensors -> tiny-a's two shards (the same numbers: the
                                 golden's text part is tiny-a), tower -> vision.safetensors
  A.png C.png                    image0, image2
  image0_pixels.sha256 image2_pixels.sha256   SHA-256 of the golden u8 pixels [P, 768]
  image0_pixels_head.npy         its first 8 patches (u8), for a readable failure
  image0_vision_soft.npy image0_vision_emb.npy
  B_crop.jpg B_crop_decoded.npy  a lossless crop (jpegtran, MCU-aligned) of B.jpg and the same
                                 region of the golden PIL decode image1_decoded_u8
  ids_2img.npy greedy_q8emb_2img.npy logits_q8emb_2img_rows.npy (+ _rows_idx.npy)
  ids_1img.npy logits_q8emb_1img_rows.npy (+ _rows_idx.npy): the mixed prompt up to its first
                                 audio placeholder (causal: those rows are the one-image prompt's)
  decode/: small PNG/JPEG/WebP variants (palette, gray 16, gray+alpha, RGBA 16, interlaced,
           EXIF orientations in JPEG, PNG and WebP) and Pillow's .convert("RGB") of each
           (after ImageOps.exif_transpose) as plain RGB PNGs
  down.png down_70.sha256        a 900x500 image and the SHA-256 of Pillow's bicubic resize of it
                                 to its 70-token size, 528x288 (a downscale: the goldens upscale)
"""
import hashlib, json, os, shutil, struct, subprocess, sys
import numpy as np
from PIL import Image, ImageOps

src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst + "/hf", exist_ok=True)
os.makedirs(dst + "/decode", exist_ok=True)
G = lambda f: os.path.join(src, f)
D = lambda f: os.path.join(dst, f)

shutil.copy(G("hf/config.json"), D("hf/config.json"))  # the tokenizer: tiny-a's (the tests copy it in)

# the tower tensors, as stored (BF16), in a safetensors file of their own
raw = open(G("hf/model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
base = 8 + n
tower = {k: v for k, v in hdr.items() if k.startswith(("model.vision_tower.", "model.embed_vision."))}
out, data, off = {}, [], 0
for k in sorted(tower):
    v = tower[k]
    b = raw[base + v["data_offsets"][0]: base + v["data_offsets"][1]]
    out[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + len(b)]}
    data.append(b)
    off += len(b)
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(D("hf/vision.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + b"".join(data))
tiny_a = json.load(open(os.path.join(src, "../tiny-a/hf/model.safetensors.index.json")))
wm = {k: v for k, v in tiny_a["weight_map"].items() if k.startswith("model.language_model.")}
for k in tower:
    wm[k] = "vision.safetensors"
json.dump({"metadata": {}, "weight_map": wm}, open(D("hf/model.safetensors.index.json"), "w"), separators=(",", ":"))

for f in ["A.png", "C.png", "image0_vision_soft.npy", "image0_vision_emb.npy", "ids_2img.npy",
          "greedy_q8emb_2img.npy"]:
    shutil.copy(G(f), D(f))
for i in (0, 2):
    px = np.load(G("image%d_pixels_u8.npy" % i))
    open(D("image%d_pixels.sha256" % i), "w").write(hashlib.sha256(px.tobytes()).hexdigest() + "\n")
np.save(D("image0_pixels_head.npy"), np.load(G("image0_pixels_u8.npy"))[:8])

# a lossless MCU-aligned crop of B.jpg (4:4:4: 8x8 MCUs) and its region of PIL's decode
x0, y0, w, h = 256, 160, 96, 64
subprocess.run(["jpegtran", "-crop", "%dx%d+%d+%d" % (w, h, x0, y0), "-copy", "none", "-outfile", D("B_crop.jpg"),
                G("B.jpg")], check=True)
dec = np.load(G("image1_decoded_u8.npy"))[y0:y0 + h, x0:x0 + w]
assert (np.array(Image.open(D("B_crop.jpg")).convert("RGB")) == dec).all()
np.save(D("B_crop_decoded.npy"), dec)

# logits: a subset of rows (the files are 1.1 MB whole)
ids = np.load(G("ids_2img.npy"))
rows = sorted(set(list(range(0, 8)) + [100, 200, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 400, 533, 534, 535, 536]
                  + list(range(len(ids) - 5, len(ids)))))
np.save(D("logits_q8emb_2img_rows_idx.npy"), np.array(rows, dtype=np.int32))
np.save(D("logits_q8emb_2img_rows.npy"), np.load(G("logits_q8emb_2img.npy"))[rows])
ids1 = np.load(G("ids.npy"))
k = int(np.where(ids1 == 13)[0][0])
np.save(D("ids_1img.npy"), ids1[:k].astype(np.int32))
rows1 = [0, 5, 6, 7, 8, 150, 280, 281, 282, 283, 284, k - 1]
np.save(D("logits_q8emb_1img_rows_idx.npy"), np.array(rows1, dtype=np.int32))
np.save(D("logits_q8emb_1img_rows.npy"), np.load(G("logits_q8emb.npy"))[rows1])


def png_chunk(t, b):
    import zlib
    return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)

def png_write(path, a, color, depth, interlace=False):
    """A PNG of array a ([h, w] or [h, w, c], values < 2^depth) written by hand (Pillow cannot
    write 2-bit gray, 16-bit RGBA or Adam7): filter 0 on every row."""
    import zlib
    a = a if a.ndim == 3 else a[..., None]
    h, w, c = a.shape
    def rows(sub):
        out = b""
        for r in sub:
            if depth == 16:
                out += b"\0" + r.astype(">u2").tobytes()
            elif depth == 8:
                out += b"\0" + r.astype(np.uint8).tobytes()
            else:  # pack samples of `depth` bits, high bits first
                bits = "".join(format(int(v), "0%db" % depth) for v in r.reshape(-1))
                bits += "0" * (-len(bits) % 8)
                out += b"\0" + bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        return out
    if interlace:
        raw = b""
        for y0, x0, dy, dx in [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1)]:
            sub = a[y0::dy, x0::dx]
            if sub.size:
                raw += rows(sub)
    else:
        raw = rows(a)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 1 if interlace else 0)
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9)) +
                           png_chunk(b"IEND", b""))

# decode variants: (file, how it is made); the expectation is PIL's exif_transpose + convert("RGB")
rng = np.random.default_rng(7)
yy, xx = np.mgrid[0:17, 0:23]
rgb = np.stack([xx * 11, yy * 15, (xx * yy) % 256], -1).astype(np.uint8)
alpha = ((xx + yy) * 12 % 256).astype(np.uint8)
def exif(o):
    e = Image.Exif()
    e[0x0112] = o
    return e.tobytes()
variants = {
    "rgb.png": lambda p: Image.fromarray(rgb).save(p),
    "interlaced.png": lambda p: png_write(p, rgb, 2, 8, interlace=True),
    "palette.png": lambda p: Image.fromarray(rgb).quantize(37).save(p),
    "palette_trns.png": lambda p: Image.fromarray(rgb).quantize(37).save(p, transparency=3),
    "gray16.png": lambda p: Image.fromarray((xx * yy * 97).astype(np.uint16)).save(p),
    "gray2.png": lambda p: png_write(p, (xx + yy) % 4, 0, 2),
    "gray_alpha.png": lambda p: Image.fromarray(np.stack([rgb[..., 0], alpha], -1), "LA").save(p),
    "rgba.png": lambda p: Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(p),
    "rgba16.png": lambda p: png_write(p, np.dstack([rgb, alpha]).astype(np.uint16) * 257 + (xx * 3)[..., None], 6, 16),
    "exif6.jpg": lambda p: Image.fromarray(rgb).save(p, quality=90, exif=exif(6)),
    "exif3.jpg": lambda p: Image.fromarray(rgb).save(p, quality=90, exif=exif(3)),
    "exif8.png": lambda p: Image.fromarray(rgb).save(p, exif=exif(8)),
    "exif5.webp": lambda p: Image.fromarray(rgb).save(p, lossless=True, exif=exif(5)),
    "gray.jpg": lambda p: Image.fromarray(rgb[..., 1]).save(p, quality=90),
    "cmyk.jpg": lambda p: Image.fromarray(rgb).convert("CMYK").save(p, quality=95),
    "lossless.webp": lambda p: Image.fromarray(rgb).save(p, lossless=True),
    "lossy.webp": lambda p: Image.fromarray(rgb).save(p, quality=80),
    "alpha.webp": lambda p: Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(p, quality=80),
}
for name, make in variants.items():
    p = D("decode/" + name)
    make(p)
    ref = ImageOps.exif_transpose(Image.open(p)).convert("RGB")
    ref.save(p + ".rgb.png")
    print(name, Image.open(p).mode, Image.open(p).size, "->", ref.size)

# a downscale: 900 x 500 to its 70-token size, 528 x 288 (HF's rule), by Pillow
big = np.stack([(xx := np.mgrid[0:500, 0:900][1]) % 256, np.mgrid[0:500, 0:900][0] % 256,
                ((np.mgrid[0:500, 0:900][0] * 7 + xx * 3) // 5) % 256], -1).astype(np.uint8)
Image.fromarray(big).save(D("down.png"), optimize=True)
small = np.array(Image.fromarray(big).resize((528, 288), Image.BICUBIC))
open(D("down_70.sha256"), "w").write(hashlib.sha256(small.tobytes()).hexdigest() + "\n")
