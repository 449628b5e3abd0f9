"""safetensors files for the PyTorch reference scripts, with only the standard
library and torch (no `safetensors` package on the test machines).

load(path) -> (dict name -> tensor, metadata dict); save(path, tensors, metadata).
The reader checks the same things fivefold's C reader does (sizes, dtypes,
offsets tiling the data section) so a broken dump fails loudly here too.
"""
import json
import os
import struct

import torch

DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
    "BOOL": (torch.bool, 1),
}
NAMES = {dt: name for name, (dt, _) in DTYPES.items()}


class SafetensorsError(Exception):
    pass


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: {len(raw)} bytes, too short for the header length")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if hlen > len(raw) - 8:
        raise SafetensorsError(f"{path}: header length {hlen} exceeds the file ({len(raw)} bytes)")
    try:
        header = json.loads(raw[8 : 8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    data = memoryview(raw)[8 + hlen :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors, spans = {}, []
    for name, info in header.items():
        try:
            dtype, esize = DTYPES[info["dtype"]]
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise SafetensorsError(f"{path}: tensor '{name}': bad entry {info!r} ({e})") from None
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * esize or begin < 0 or end > len(data):
            raise SafetensorsError(
                f"{path}: tensor '{name}': {info['dtype']} {shape} needs {numel * esize} bytes, "
                f"data_offsets [{begin}, {end}] in a {len(data)}-byte data section"
            )
        spans.append((begin, end, name))
        if numel == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            # bytearray copies, so each tensor owns aligned, writable storage.
            buf = bytearray(data[begin:end])
            tensors[name] = torch.frombuffer(buf, dtype=dtype).reshape(shape)
    covered = 0
    for begin, end, name in sorted(spans):
        if begin != covered:
            raise SafetensorsError(f"{path}: tensor '{name}' starts at {begin}, expected {covered}")
        covered = end
    if covered != len(data):
        raise SafetensorsError(f"{path}: tensors cover {covered} of {len(data)} data bytes")
    return tensors, metadata


def save(path, tensors, metadata=None):
    """Writes atomically (PATH.tmp then rename). tensors: dict name -> tensor."""
    header, chunks, pos = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    # Larger elements first keeps every tensor aligned to its element size.
    order = sorted(tensors.items(), key=lambda kv: -kv[1].element_size())
    for name, t in order:
        t = t.detach().contiguous().cpu()
        if t.dtype not in NAMES:
            raise SafetensorsError(f"tensor '{name}': dtype {t.dtype} not supported")
        if t.dtype == torch.bfloat16:
            blob = t.view(torch.int16).numpy().tobytes()
        else:
            blob = t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [pos, pos + len(blob)]}
        chunks.append(blob)
        pos += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
