"""The converter: a Hugging Face checkpoint -> a bundle directory, through plume_convert(),
the function `plume convert` calls (so both write byte-identical bundles); and the check of a
bundle against its manifest (plume_bundle_verify, `plume verify`).

May use _lib, _errors and _common; needs no model.
"""
from ._common import c_path
from ._errors import FormatError, check
from ._lib import VerifyReport, byref, c_void_p, lib, take_string


def convert(hf_dir, out_dir, weights="q8", *, n_ctx=0, progress=False, layout="auto", head="q8",
            q4_scale="best"):
    """Convert a Hugging Face Gemma 4 checkpoint (config.json + safetensors) into a bundle
    directory out_dir, which must not exist: the converter of `plume convert`. weights:
    "f32", "bf16", "q8" or "q4"; n_ctx: the bundle's context (0: min(max_position_embeddings,
    4096)); progress: a progress line on stderr; layout of q8/q4 weights: "auto" (tiles if
    this CPU's kernels read them), "tiles" or "rows"; head of q4 weights: "q8" (the INT8
    token sidecar) or "q4" (its own q4 copy: fewer bytes a decode step reads; docs/BUNDLE.md); q4_scale: how a q4 group's step
    is chosen, "best" (the smallest error: a checkpoint on a 4-bit grid is kept exactly),
    "absmax" or "q4_0"."""
    p = lib.plume_convert_default_params()
    w, lay, hd, qs = weights.encode(), layout.encode(), head.encode(), q4_scale.encode()
    p.weights, p.n_ctx, p.progress, p.layout, p.head = w, int(n_ctx), int(bool(progress)), lay, hd
    p.q4_scale = qs
    err = c_void_p()
    check(lib.plume_convert(c_path(hf_dir), c_path(out_dir), byref(p), byref(err)), err,
          "convert")


def verify(bundle_dir):
    """Check every file of a bundle against the manifest.sha256 the converter wrote (as `plume
    verify` does). Returns None when all match; raises FormatError naming every corrupt,
    missing or unlisted file (one per line), FileError when the bundle has no manifest."""
    bad = []
    report = VerifyReport(lambda line, _arg: bad.append(line.decode("utf-8", "replace")))
    err = c_void_p()
    rc = lib.plume_bundle_verify(c_path(bundle_dir), None, None, report, byref(err))
    if rc and bad:
        take_string(err.value) if err.value else None  # its first line is bad[0]
        raise FormatError("\n".join(bad), rc)
    check(rc, err, "verify")
