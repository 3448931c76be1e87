#!/usr/bin/python3
"""make_gguf.py -- a Gemma 4 GGUF (version 3) from a safetensors checkpoint (F32 or BF16), laid out as
llama.cpp's convert_hf_to_gguf.py and llama-quantize write one: the same tensor names and
gemma4.* / tokenizer.ggml.* metadata, the layer linears as Q4_0 blocks (fp16 step, element j
in the low nibble of byte j, j + 16 in its high one), everything else F32. Written for the
tests (test_gguf): standard library and numpy only.

usage: make_gguf.py HF_DIR OUT.gguf [--q4-rule q4_0|grid] [--embd-q8_0]
  --q4-rule q4_0  llama.cpp's rule: d = fp16(signed max / -8), q = clamp(round(x / d), -8, 7)
  --q4-rule grid  a block already on a 4-bit grid (a QAT checkpoint's) keeps its own step:
                  d = the Q4_0 step if it reproduces the block, else fp16(absmax / 7)
  --embd-q8_0     token_embd as Q8_0 blocks (d = fp16(absmax / 127), q = round(x / d))
"""
import glob
import json
import re
import struct
import sys

import numpy as np

LAYER = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "per_layer_input_gate.weight": "inp_gate.weight",
    "per_layer_projection.weight": "proj.weight", "post_per_layer_input_norm.weight": "post_norm.weight",
    "layer_scalar": "layer_output_scale.weight",
}
GLOBAL = {
    "embed_tokens.weight": "token_embd.weight", "embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
    "per_layer_model_projection.weight": "per_layer_model_proj.weight",
    "per_layer_projection_norm.weight": "per_layer_proj_norm.weight", "norm.weight": "output_norm.weight",
}
LINEAR = re.compile(r"(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|per_layer_input_gate|per_layer_projection)\.weight$")
F32, Q4_0, Q8_0 = 0, 2, 8
U32, I32, F32V, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9


def read_safetensors(path):
    """name -> float32 array of a safetensors file (F32 or BF16)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        raw = np.frombuffer(data[s:t], dtype=np.uint16 if e["dtype"] == "BF16" else np.float32)
        if e["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            assert e["dtype"] == "F32", (name, e["dtype"])
        out[name] = raw.reshape(e["shape"])
    return out


def q4_0(w, rule):
    """Q4_0 blocks of a [rows, cols] float32 matrix (bytes)."""
    x = w.reshape(-1, 32).astype(np.float32)
    idx = np.argmax(np.abs(x), axis=1)
    m = x[np.arange(len(x)), idx]
    d = (m / np.float32(-8)).astype(np.float16).astype(np.float32)
    if rule == "grid":
        d7 = (np.abs(m) / np.float32(7)).astype(np.float16).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            q8 = np.clip(np.rint(np.where(d[:, None] != 0, x / d[:, None], 0)), -8, 7)
        exact = np.all(q8 * d[:, None] == x, axis=1)
        d = np.where(exact, d, d7)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint(np.where(d[:, None] != 0, x / d[:, None], 0)), -8, 7).astype(np.int32) + 8
    packed = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)
    blocks = np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2), packed], axis=1)
    return blocks.tobytes()


def q8_0(w):
    """Q8_0 blocks of a float32 matrix (bytes)."""
    x = w.reshape(-1, 32).astype(np.float32)
    d = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint(np.where(d[:, None] != 0, x / d[:, None], 0)), -127, 127).astype(np.int8)
    return np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1).tobytes()


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    out = gstr(key) + struct.pack("<I", typ)
    if typ == U32:
        return out + struct.pack("<I", val)
    if typ == I32:
        return out + struct.pack("<i", val)
    if typ == F32V:
        return out + struct.pack("<f", val)
    if typ == BOOL:
        return out + struct.pack("<B", int(val))
    if typ == STR:
        return out + gstr(val)
    et, items = val
    out += struct.pack("<IQ", et, len(items))
    fmt = {I32: "<i", F32V: "<f", BOOL: "<B", U32: "<I"}
    return out + b"".join(gstr(i) if et == STR else struct.pack(fmt[et], i) for i in items)


def main():
    args = sys.argv[1:]
    rule = "q4_0"
    embd_q8 = "--embd-q8_0" in args
    if embd_q8:
        args.remove("--embd-q8_0")
    if "--q4-rule" in args:
        i = args.index("--q4-rule")
        rule = args[i + 1]
        del args[i:i + 2]
    hf, out = args
    cfg = json.load(open(f"{hf}/config.json"))
    tc = cfg.get("text_config", cfg)
    st = {}
    for p in sorted(glob.glob(f"{hf}/*.safetensors")):
        st.update(read_safetensors(p))
    tok = json.load(open(f"{hf}/tokenizer.json"))
    L = tc["num_hidden_layers"]
    tensors = []  # (name, shape (HF order), type, bytes)
    rope = tc["rope_parameters"]
    hd_full = tc["global_head_dim"]
    n_rot = int(hd_full * rope["full_attention"]["partial_rotary_factor"] / 2)
    tensors.append(("rope_freqs.weight", [hd_full // 2], F32,
                    np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), np.float32).tobytes()))
    for name, a in st.items():
        rest = name.replace("model.language_model.", "")
        if not name.startswith("model.language_model."):
            continue
        m = re.match(r"layers\.(\d+)\.(.*)$", rest)
        g = f"blk.{m.group(1)}.{LAYER[m.group(2)]}" if m else GLOBAL.get(rest)
        if g is None:
            continue
        shape = list(a.shape) if a.ndim else [1]
        if embd_q8 and g == "token_embd.weight":
            tensors.append((g, shape, Q8_0, q8_0(a)))
        elif LINEAR.search(rest) and a.shape[-1] % 32 == 0:
            tensors.append((g, shape, Q4_0, q4_0(a, rule)))
        else:
            tensors.append((g, shape, F32, np.ascontiguousarray(a, np.float32).tobytes()))
    # metadata, as convert_hf_to_gguf.py writes it for Gemma 4
    swa = [t == "sliding_attention" for t in tc["layer_types"]]
    ff = tc["intermediate_size"]
    first_shared = L - tc["num_kv_shared_layers"]
    ffs = [ff if (l < first_shared or not tc.get("use_double_wide_mlp")) else 2 * ff for l in range(L)]
    vocab = {i: t for t, i in tok["model"]["vocab"].items()}
    special = {a["id"] for a in tok["added_tokens"] if a.get("special")}
    tokens = [vocab[i] for i in range(len(vocab))]
    types = [6 if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t) else 3 if i in special else 1 for i, t in enumerate(tokens)]
    eos = cfg["eos_token_id"]
    eos = eos[-1] if isinstance(eos, list) else eos
    meta = [
        kv("general.architecture", STR, "gemma4"), kv("general.name", STR, "test"),
        kv("gemma4.block_count", U32, L), kv("gemma4.context_length", U32, tc["max_position_embeddings"]),
        kv("gemma4.embedding_length", U32, tc["hidden_size"]), kv("gemma4.feed_forward_length", ARR, (I32, ffs)),
        kv("gemma4.attention.head_count", U32, tc["num_attention_heads"]),
        kv("gemma4.attention.head_count_kv", U32, tc["num_key_value_heads"]),
        kv("gemma4.rope.freq_base", F32V, rope["full_attention"]["rope_theta"]),
        kv("gemma4.rope.freq_base_swa", F32V, rope["sliding_attention"]["rope_theta"]),
        kv("gemma4.attention.layer_norm_rms_epsilon", F32V, tc["rms_norm_eps"]),
        kv("gemma4.attention.key_length", U32, hd_full), kv("gemma4.attention.value_length", U32, hd_full),
        kv("gemma4.final_logit_softcapping", F32V, tc["final_logit_softcapping"]),
        kv("gemma4.attention.sliding_window", U32, tc["sliding_window"]),
        kv("gemma4.attention.shared_kv_layers", U32, tc["num_kv_shared_layers"]),
        kv("gemma4.embedding_length_per_layer_input", U32, tc["hidden_size_per_layer_input"]),
        kv("gemma4.attention.sliding_window_pattern", ARR, (BOOL, swa)),
        kv("gemma4.attention.key_length_swa", U32, tc["head_dim"]),
        kv("gemma4.attention.value_length_swa", U32, tc["head_dim"]),
        kv("general.alignment", U32, 64),
        kv("tokenizer.ggml.model", STR, "gemma4"), kv("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        kv("tokenizer.ggml.scores", ARR, (F32V, [-1000.0] * len(tokens))),
        kv("tokenizer.ggml.token_type", ARR, (I32, types)),
        kv("tokenizer.ggml.bos_token_id", U32, cfg["bos_token_id"]), kv("tokenizer.ggml.eos_token_id", U32, eos),
        kv("tokenizer.ggml.padding_token_id", U32, cfg.get("pad_token_id", 0)),
        kv("tokenizer.ggml.add_bos_token", BOOL, True),
        kv("tokenizer.chat_template", STR, "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"),
    ]
    align = 64
    infos, off = [], 0
    for name, shape, typ, data in tensors:
        ne = list(reversed(shape))
        infos.append(gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
                     + struct.pack("<IQ", typ, off))
        off = (off + len(data) + align - 1) // align * align
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * (-len(head) % align)
    with open(out, "wb") as f:
        f.write(head)
        for _, _, _, data in tensors:
            f.write(data + b"\0" * (-len(data) % align))


if __name__ == "__main__":
    main()
