#!/usr/bin/env python3
"""Writes the seed corpora (tests/fuzz/corpus/<reader>/) and dictionaries
(tests/fuzz/<reader>.dict) of the fuzz harnesses. The output is committed;
rerun this after a reader learns new fields or formats, then check that the
corpus stays small (well under 100 KB in all).

Seeds are small valid files of every kind the readers accept (so the fuzzer
starts deep inside them) plus a few near misses. Standard library only.

The checkpoint seeds derive from corpus/checkpoint/state.json, which must
match the fixture checkpoint fuzz_checkpoint saves at start-up (its file
sizes and CRC-32s); after a change of the checkpoint or safetensors format,
regenerate it first:
  FIVEFOLD_FUZZ_DUMP_STATE=tests/fuzz/corpus/checkpoint/state.json \
      BUILD/tests/fuzz/fuzz_checkpoint -runs=0
"""
import base64
import json
import os
import re
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def out_dir(reader):
    d = os.path.join(CORPUS, reader)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write(d, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def literals(path, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$"):
    """Identifier-like string literals of a source file: field names, enum
    values and section names the reader compares against."""
    text = open(os.path.join(ROOT, path)).read()
    return sorted({s for s in re.findall(r'"((?:[^"\\\n]|\\.)*)"', text) if re.match(pattern, s)})


def write_dict(reader, words):
    def esc(w):
        if isinstance(w, str):
            w = w.encode()
        return "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else "\\x%02x" % b for b in w)

    seen, lines = set(), []
    for w in words:
        if w in seen or not w:
            continue
        seen.add(w)
        lines.append('"%s"' % esc(w))
    with open(os.path.join(HERE, reader + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary of fuzz_%s (written by make_corpus.py)\n" % reader)
        f.write("\n".join(lines) + "\n")


def json_words(names):
    return [w for n in names for w in (n, '"%s"' % n, '"%s":' % n)]


JSON_TOKENS = ["{", "}", "[", "]", ":", ",", "null", "true", "false", "-1", "0", "1", "2", "0.5", "1e-6",
               "1e308", "2147483647", "2147483648", "4294967296", "9007199254740993", "1048576", "1073741824",
               '""', '"\\u0000"', '"\\ud800"']

# ---------------------------------------------------------------- model config


def model_config():
    d = out_dir("model_config")
    for sub in ("configs/models", "configs/models/tiny"):
        for name in sorted(os.listdir(os.path.join(ROOT, sub))):
            if name.endswith(".json"):
                prefix = "tiny-" if sub.endswith("tiny") else ""
                shutil.copy(os.path.join(ROOT, sub, name), os.path.join(d, prefix + name))
    every_option = {
        "model_type": "fivefold", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 10, "intermediate_size": 48,
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 8, "moe_router_score_function": "sigmoid",
        "moe_router_order": "topk_then_softmax", "moe_router_topk_scaling_factor": 2.5,
        "moe_aux_loss_coeff": 0.01, "moe_z_loss_coeff": 0.001, "moe_expert_capacity_factor": 1.25,
        "moe_token_drop_policy": "position", "moe_pad_expert_input_to_capacity": True,
        "moe_layer_pattern": [1, 0, True], "tie_word_embeddings": True, "rope_scaling": None,
        "layer_types": ["full_attention"] * 3,
    }
    write(d, "every-option.json", json.dumps(every_option))
    write(d, "layer-freq.json", json.dumps(dict(every_option, moe_layer_pattern=None, moe_layer_freq=2)))
    write(d, "bad-typo.json", '{"vocab_size": 10, "hidden_size": 8, "num_hidden_layer": 2, "num_attention_heads": 2}')
    write(d, "bad-type.json", '{"vocab_size": "10", "hidden_size": 8, "num_hidden_layers": 2}')
    write(d, "bad-json.json", '{"vocab_size": 10, "hidden_size": 8,\n "num_hidden_layers": 2,')
    write(d, "not-object.json", "[1, 2, 3]")
    write_dict("model_config", json_words(literals("src/model/config.c")) + JSON_TOKENS)


# ------------------------------------------------------------------ run config

TINY_MODEL = {"vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 64, "max_position_embeddings": 256}


def train_config():
    d = out_dir("train_config")
    # The harness's scratch directory holds model.json, train.bin and val.bin.
    demo = json.load(open(os.path.join(ROOT, "configs/demo-moe.json")))
    demo["data"] = {"train": "train.bin", "val": ["val.bin", "train.bin"]}
    demo["training"]["seq_len"] = 64
    write(d, "demo-inline-model.json", json.dumps(demo, indent=1))
    ref = json.load(open(os.path.join(ROOT, "configs/ref-moe.json")))
    ref["model"] = "model.json"
    ref["data"] = {"train": "train.bin"}
    ref["training"]["seq_len"] = 64
    ref["out"] = "runs/x"
    write(d, "ref-model-path.json", json.dumps(ref, indent=1))
    write(d, "global-batch.json", json.dumps({
        "model": TINY_MODEL, "training": {"micro_batch_size": 4, "global_batch_size": 32, "seq_len": 16,
                                          "decay": "linear", "peak_gflops": 100.5, "seed": 7, "threads": 2},
        "data": {"train": ["train.bin"]}}))
    write(d, "tokenizer-checkpoint.json", json.dumps({
        "model": "model.json", "training": {"seq_len": 8, "steps": 10},
        "data": {"train": "train.bin", "tokenizer": "tokenizer.json"},
        "checkpoint": {"interval": 5, "keep_last": 2}}))
    write(d, "byte-level.json", json.dumps({"model": "model.json", "training": {"seq_len": 32},
                                            "data": {"train": "train.bin", "tokenizer": "byte-level"}}))
    write(d, "minimal.json", json.dumps({"model": "model.json", "training": {"seq_len": 128},
                                         "data": {"train": "train.bin"}}))
    shutil.copy(os.path.join(ROOT, "configs/ref-dense.json"), os.path.join(d, "ref-dense-missing-files.json"))
    write(d, "bad-field.json", '{"model": "model.json", "training": {"stesp": 10}}')
    write(d, "bad-range.json", '{"model": "model.json", "training": {"lr": -1, "beta1": 1}}')
    words = literals("src/train/train_config.c") + ["model.json", "train.bin", "val.bin", "tokenizer.json",
                                                   "byte-level", "/", "../", "cosine", "linear", "constant"]
    write_dict("train_config", json_words(words) + json_words(literals("src/model/config.c")) + JSON_TOKENS)


# --------------------------------------------------------------- tokenizer.json


def byte_to_unicode():
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


B2U = byte_to_unicode()


def level(bs):
    return "".join(B2U[b] for b in bs)


def learn_merges(text, n):
    """A few BPE merges on text (words split at spaces, a space kept in front
    as GPT-2 does): enough structure for the fuzzer to start from."""
    words = {}
    for i, w in enumerate(text.split(" ")):
        key = tuple(bytes([b]) for b in ((" " if i else "") + w).encode())
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(n):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    return merges


def bytelevel(add_prefix_space=False, trim_offsets=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": True}


def tokenizer():
    d = out_dir("tokenizer")
    text = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
            "and darkness was upon the face of the deep.")
    merges = learn_merges(text, 24)
    # Ours: byte b is id b, merge r gives id 256 + r, the end-of-text token last.
    vocab = {level(bytes([b])): b for b in range(256)}
    for r, (a, b) in enumerate(merges):
        vocab[level(a + b)] = 256 + r
    eot = 256 + len(merges)
    vocab["<|endoftext|>"] = eot
    added = [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
             "merges": ["%s %s" % (level(a), level(b)) for a, b in merges]}
    ours = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": bytelevel(), "post_processor": None, "decoder": bytelevel(True), "model": model}
    write(d, "ours.json", json.dumps(ours, ensure_ascii=False))
    # GPT-2 style: other ids (a hole at 3), pair merges, add_prefix_space,
    # a post-processor, and two added tokens (one only in added_tokens).
    ids = {tok: (i + 5 if i >= 3 else i) for i, tok in enumerate(sorted(vocab, key=lambda t: -vocab[t]))}
    gpt2 = dict(ours, pre_tokenizer=bytelevel(True), post_processor=bytelevel(True, False), model=dict(
        model, vocab=ids, merges=[[level(a), level(b)] for a, b in merges]), added_tokens=[
        dict(added[0], id=ids["<|endoftext|>"]),
        dict(added[0], id=3, content="<pad>", special=False)])
    write(d, "gpt2-style.json", json.dumps(gpt2))
    # Only a few bytes, so most text cannot be encoded.
    few = {level(b"a"): 0, level(b"b"): 1, level(b" "): 2, level(b"ab"): 3, level(b" ab"): 4}
    write(d, "few-bytes.json", json.dumps({"model": {"vocab": few, "merges": ["a b", level(b" ") + " ab"]},
                                           "pre_tokenizer": {"type": "ByteLevel"}}))
    write(d, "bad-merge.json", json.dumps({"model": {"vocab": few, "merges": ["a c"]},
                                           "pre_tokenizer": {"type": "ByteLevel"}}))
    write(d, "bad-duplicate-id.json", json.dumps({"model": {"vocab": {"a": 1, "b": 1}, "merges": []},
                                                  "pre_tokenizer": {"type": "ByteLevel"}}))
    words = literals("src/tok/tok_json.c") + ["ByteLevel", "BPE", "<|endoftext|>", "\u0120", "\u0120the", "a b"]
    write_dict("tokenizer", json_words(words) + JSON_TOKENS)


# ------------------------------------------------------------------ safetensors

DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def safetensors_file(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes), stored in that order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors():
    d = out_dir("safetensors")
    f32 = struct.pack("<6f", 1, -2, 3.5, 0, float("inf"), -0.0)
    mixed = [
        ("layers.0.w", "F32", [2, 3], f32),
        ("layers.0.b", "F16", [3], struct.pack("<3H", 0x3C00, 0x8001, 0x7C01)),
        ("scale", "BF16", [], struct.pack("<H", 0x3F80)),
        ("steps", "I64", [2], struct.pack("<2q", 5, -1)),
        ("empty", "F32", [0, 4], b""),
        ("mask", "BOOL", [5], bytes([0, 1, 1, 0, 1])),
        ("d", "F64", [1, 1], struct.pack("<d", 3.25)),
        ("f8", "F8_E4M3", [2], bytes([0x38, 0x7F])),
    ]
    write(d, "mixed.safetensors", safetensors_file(mixed, {"format": "pt", "step": "3"}))
    write(d, "empty.safetensors", safetensors_file([], None))
    write(d, "metadata-only.safetensors", safetensors_file([], {"a": "b"}, pad=False))
    # Header order differs from data order: the reader sorts by offset.
    good = safetensors_file([("a", "U8", [2], b"xy"), ("b", "I32", [1], b"abcd")])
    hdr_len = struct.unpack("<Q", good[:8])[0]
    swapped = json.dumps({"b": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]},
                          "a": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}}).encode()
    write(d, "reordered.safetensors", struct.pack("<Q", len(swapped)) + swapped + b"abcdxy")
    write(d, "bad-truncated.safetensors", good[:8 + hdr_len + 3])
    overlap = json.dumps({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                          "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}).encode()
    write(d, "bad-overlap.safetensors", struct.pack("<Q", len(overlap)) + overlap + b"abcd")
    words = ["dtype", "shape", "data_offsets", "__metadata__"] + list(DTYPE_SIZES)
    write_dict("safetensors", json_words(words) + JSON_TOKENS + [struct.pack("<Q", n) for n in (2, 8, 64)])


# ------------------------------------------------------------------ token shard


def shard(tokens, vocab, dtype=None, count=None, version=1, magic=b"FFTOKEN1"):
    dtype = dtype or (1 if vocab <= 65536 else 2)
    fmt = "<%d%s" % (len(tokens), "H" if dtype == 1 else "I")
    head = magic + struct.pack("<IIQI", version, dtype, len(tokens) if count is None else count, vocab)
    return head + bytes(64 - len(head)) + struct.pack(fmt, *tokens)


def token_shard():
    d = out_dir("token_shard")
    write(d, "u16.bin", shard([(i * 37) % 300 for i in range(40)], 300))
    write(d, "u32.bin", shard([(i * 7919) % 70000 for i in range(20)], 70000))
    write(d, "u16-full-vocab.bin", shard([65535, 0, 1, 65535, 2], 65536))
    write(d, "empty.bin", shard([], 256))
    write(d, "one-token.bin", shard([5], 256))
    write(d, "bad-token.bin", shard([1, 2, 300], 300))
    write(d, "bad-count.bin", shard([1, 2, 3], 300, count=4))
    write(d, "bad-version.bin", shard([1, 2], 300, version=2))
    write_dict("token_shard", [b"FFTOKEN1", struct.pack("<I", 1), struct.pack("<I", 2),
                               struct.pack("<I", 65536), struct.pack("<I", 65537), struct.pack("<I", 0xFFFFFFFF),
                               struct.pack("<Q", 0xFFFFFFFFFFFFFFFF), struct.pack("<Q", 1 << 62)])


# ------------------------------------------------------------------ checkpoint


def checkpoint():
    d = os.path.join(CORPUS, "checkpoint")
    state = json.load(open(os.path.join(d, "state.json")))
    state["train_config"]["out"] = "/tmp/run"
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    write(d, "state.json", json.dumps(state, indent=1))
    big = json.loads(json.dumps(state))
    big["data_loader"].update(seed="18446744073709551615", epoch="9007199254740993", position=9, num_windows="12")
    big["rng"]["seed"] = "12345678901234567890"
    big["tokenizer"] = "/data/tok/tokenizer.json"
    write(d, "u64-strings.json", json.dumps(big, separators=(",", ":")))
    bad = json.loads(json.dumps(state))
    bad["files"]["model.safetensors"]["crc32"] = "00000000"
    write(d, "bad-crc.json", json.dumps(bad, separators=(",", ":")))
    bad = json.loads(json.dumps(state))
    bad["step"] = 6
    write(d, "bad-step.json", json.dumps(bad, separators=(",", ":")))
    words = literals("src/ckpt/checkpoint_read.c") + literals("src/ckpt/checkpoint_write.c") + [
        "fivefold-checkpoint", "model.safetensors", "optimizer.safetensors", "byte-level", "388c63a8"]
    write_dict("checkpoint", json_words(words) + json_words(literals("src/model/config.c")) + JSON_TOKENS)

def png_file(width, height, depth, color, rows, palette=None):
    """A PNG of the given IHDR fields and raw scanlines (filter byte 0 is
    added to each row), written with zlib like any encoder would."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if palette:
        out += chunk(b"PLTE", palette)
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


# Small JPEGs (8 x 4, quality 50) made with libjpeg: grey baseline and colour
# progressive; the standard library has no JPEG encoder.
JPEG_GREY = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1R"
    "V19iZ2hnPk1xeXBkeFxlZ2P/wAALCAAEAAgBAREA/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgED"
    "AwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RF"
    "RkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJ"
    "ytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/9oACAEBAAA/AKWnaba8fJX/2Q==")
JPEG_COLOUR_PROGRESSIVE = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1R"
    "V19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj"
    "Y2NjY2NjY2NjY2NjY2P/wgARCAAEAAgDASIAAhEBAxEB/8QAFQABAQAAAAAAAAAAAAAAAAAAAAH/xAAUAQEAAAAAAAAAAAAA"
    "AAAAAAAB/9oADAMBAAIQAxAAAAGgP//EABYQAAMAAAAAAAAAAAAAAAAAAAEEI//aAAgBAQABBQISX//EABQRAQAAAAAAAAAA"
    "AAAAAAAAAAD/2gAIAQMBAT8Bf//EABcRAQADAAAAAAAAAAAAAAAAAAEAESH/2gAIAQIBAT8BoXZ//8QAFxAAAwEAAAAAAAAA"
    "AAAAAAAAAAECMf/aAAgBAQAGPwJ1On//xAAXEAEBAQEAAAAAAAAAAAAAAAABEQCB/9oACAEBAAE/ISBwMj3f/9oADAMBAAIA"
    "AwAAABDz/8QAFBEBAAAAAAAAAAAAAAAAAAAAAP/aAAgBAwEBPxB//8QAFREBAQAAAAAAAAAAAAAAAAAAEQD/2gAIAQIBAT8Q"
    "QDf/xAAYEAEBAAMAAAAAAAAAAAAAAAABEQAhcf/aAAgBAQABPxACgBCygvd5/9k=")


def image():
    d = out_dir("image")
    write(d, "grey8.png", png_file(4, 3, 8, 0, [bytes([10 * x + 40 * y for x in range(4)]) for y in range(3)]))
    write(d, "rgba16.png", png_file(2, 2, 16, 6, [bytes(range(16 * y, 16 * y + 16)) for y in range(2)]))
    write(d, "grey-alpha.png", png_file(3, 1, 8, 4, [bytes([1, 255, 2, 0, 3, 128])]))
    write(d, "palette2.png", png_file(4, 2, 2, 3, [b"\x1b", b"\xe4"], palette=bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9])))
    write(d, "grey1.png", png_file(9, 2, 1, 0, [b"\xa5\x80", b"\x5a\x00"]))
    write(d, "truncated.png", png_file(4, 3, 8, 2, [bytes(12)] * 3)[:-20])
    write(d, "binary.pgm", b"P5\n3 2\n255\n" + bytes([0, 50, 100, 150, 200, 250]))
    write(d, "ascii.pgm", "P2\n# comment\n3 2\n15\n0 1 2\n13 14 15\n")
    write(d, "deep.pgm", b"P5\n1 1\n65535\n\x01\x02")
    write(d, "grey.jpg", JPEG_GREY)
    write(d, "colour-progressive.jpg", JPEG_COLOUR_PROGRESSIVE)
    write_dict("image", ["P2", "P5", "255", "65535", "#", "\n", b"\x89PNG\r\n\x1a\n", "IHDR", "IDAT", "IEND", "PLTE",
                         "tRNS", b"\xff\xd8\xff", b"\xff\xd9", b"\xff\xc0", b"\xff\xc2", b"\xff\xc4", b"\xff\xda"])


def npy_file(header, data, version=1):
    pre = 10 if version == 1 else 12
    hl = len(header) + 1
    while (pre + hl) % 16:
        hl += 1
    head = header.encode() + b" " * (hl - len(header) - 1) + b"\n"
    size = struct.pack("<H", hl) if version == 1 else struct.pack("<I", hl)
    return b"\x93NUMPY" + bytes([version, 0]) + size + head + data


def npy():
    d = out_dir("npy")
    write(d, "f8.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
                                struct.pack("<6d", 0, 0.25, 0.5, 0.75, 1, 0.125)))
    write(d, "f4-v2.npy", npy_file('{"descr": "<f4", "fortran_order": False, "shape": (2,)}',
                                   struct.pack("<2f", 1.5, -2), version=2))
    write(d, "u1.npy", npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 3), }", b"\x00\x80\xff"))
    write(d, "scalar.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", struct.pack("<d", 2)))
    write(d, "fortran.npy", npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (1,), }", struct.pack("<d", 2)))
    write_dict("npy", ["descr", "fortran_order", "shape", "'<f8'", "'<f4'", "'|u1'", "'<u1'", "'>f8'", "True", "False",
                       b"\x93NUMPY", "{", "}", "(", ")", ",", ":", "'"])


if __name__ == "__main__":
    model_config()
    train_config()
    tokenizer()
    safetensors()
    token_shard()
    checkpoint()
    image()
    npy()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(CORPUS) for f in fs)
    print("corpus: %d bytes" % total)
