#!/usr/bin/env python3
"""Writes safetensors fixtures for tests/test_safetensors.c, independently of mt.

The layout is Hugging Face's: a little-endian uint64 N, N bytes of JSON
({"NAME": {"dtype", "shape", "data_offsets": [BEGIN, END]}, "__metadata__": {...}}),
then the data; a sharded set is model.safetensors.index.json ({"metadata":
{"total_size"}, "weight_map": {NAME: SHARD}}) beside its shards. Values are
made here with the standard library only: struct's 'f' and 'e' formats for
F32 and F16, and round-to-nearest-even on the bits for BF16.

Writes WORKDIR/fixtures/ (good files, and bad/ with one kind of damage each)
and WORKDIR/fixtures/expected.txt, which lists what the good ones hold:

    open PATH N                          a set of N tensors, PATH relative to fixtures/
    tensor NAME FILE DTYPE RANK D... K   then K hex words: the fp32 bits st_to_f32 must give
    bf16 K                               then K hex words: those values rounded to BF16 (nearest even;
                                         a NaN keeps its sign and gets the quiet bit)

Also empties WORKDIR/out/, where the test writes.

usage: make_safetensors.py WORKDIR
"""
import json
import os
import shutil
import struct
import sys

# ---------------------------------------------------------------- numbers


def f32_bits(x):
    """The bits of the float32 nearest the Python float x (struct rounds to nearest even)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16_of_f32(u):
    """float32 bits to bfloat16 bits, rounded to nearest even, written out case by case."""
    sign, mag = u >> 31, u & 0x7FFFFFFF
    if mag > 0x7F800000:  # NaN: keep the sign and the top of the payload, make it quiet
        return (u >> 16) | 0x0040
    top, rest = mag >> 16, mag & 0xFFFF
    if rest > 0x8000 or (rest == 0x8000 and top & 1):
        top += 1  # a carry into the exponent is right: it is the next bfloat16 up (or infinity)
    return sign << 15 | top


def f32_of_f16(h):
    """float16 bits to float32 bits: struct's 'e' decoder for numbers, the bit layout for NaNs."""
    if h & 0x7C00 == 0x7C00 and h & 0x3FF:
        return (h & 0x8000) << 16 | 0x7F800000 | (h & 0x3FF) << 13
    return f32_bits(struct.unpack("<e", struct.pack("<H", h))[0])


def f32_of_bf16(b):
    return b << 16


# ---------------------------------------------------------------- files


def header_bytes(text, pad=True):
    raw = text.encode("utf-8")
    if pad:  # the reference implementation pads with spaces to a multiple of 8
        raw += b" " * ((8 - len(raw) % 8) % 8)
    return raw


def entry_json(name, dtype, shape, begin, end):
    return "%s: %s" % (json.dumps(name), json.dumps({"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}))


def write_raw(path, header, data, size=None):
    """size: the header size written, if not len(header)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header) if size is None else size))
        f.write(header)
        f.write(data)


def write_st(path, tensors, metadata=None, reverse_keys=True, gap=0):
    """tensors: [(name, dtype, shape, bytes)], laid out in that order (gap spare bytes between them);
    the header lists them in reverse order so that the reader must sort by offset."""
    entries, data = [], b""
    for name, dtype, shape, raw in tensors:
        begin = len(data)
        data += raw
        entries.append(entry_json(name, dtype, shape, begin, len(data)))
        data += b"\xee" * gap
    if reverse_keys:
        entries.reverse()
    meta = metadata if metadata is not None else {"format": "pt"}
    text = "{" + ", ".join(['"__metadata__": ' + json.dumps(meta)] + entries) + "}"
    write_raw(path, header_bytes(text), data)


def write_index(path, weight_map, total=0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def pack(fmt, words):
    return b"".join(struct.pack("<" + fmt, w) for w in words)


class Tensor:
    """A good tensor: its stored bytes and the fp32 bits it must read as."""

    def __init__(self, name, dtype, shape, stored, f32):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.f32 = f32
        if dtype == "F32":
            self.raw = pack("I", stored)
        else:
            self.raw = pack("H", stored)

    def item(self):
        return (self.name, self.dtype, self.shape, self.raw)


def f32_tensor(name, shape, bits):
    return Tensor(name, "F32", shape, bits, bits)


def bf16_tensor(name, shape, bits):
    return Tensor(name, "BF16", shape, bits, [f32_of_bf16(b) for b in bits])


def f16_tensor(name, shape, bits):
    return Tensor(name, "F16", shape, bits, [f32_of_f16(h) for h in bits])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_safetensors.py WORKDIR")
    work = sys.argv[1]
    fx = os.path.join(work, "fixtures")
    for d in (fx, os.path.join(work, "out")):
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
    sets = []  # (path relative to fixtures/, [(file name, Tensor)])

    # ---- F32: plain values, extremes, and values that need rounding to BF16
    w = f32_tensor("f32.w", [2, 3], [f32_bits(x) for x in (1.0, -2.5, 3.14159265358979, 1e-45, 3.4028234663852886e38, -0.0)])
    rounding = f32_tensor("f32.rounding", [14], [
        0x3F808000,  # 1 + 2^-8: a tie, to the even 1.0
        0x3F818000,  # a tie, up to the even 0x3f82
        0x3F808001,  # just above a tie: up
        0x3F807FFF,  # just below: down
        0x7F7FFFFF,  # the largest float: rounds up to infinity
        0x00000001,  # the smallest subnormal: to +0
        0x00018000,  # a subnormal tie: up to the even 0x0002
        0x807FFFFF,  # the largest negative subnormal: up to -2^-126
        0x7F800000,  # inf
        0xFF800000,  # -inf
        0x7FC00000,  # nan
        0xFFC00001,  # -nan with a payload
        0x7F800001,  # a signalling nan whose payload is only in the low bits: must stay a nan
        f32_bits(-1.0 / 3.0),
    ])
    scalar = f32_tensor("f32.scalar", [], [f32_bits(42.0)])
    empty = f32_tensor("f32.empty", [0, 4], [])
    tensors = [w, rounding, scalar, empty]
    write_st(os.path.join(fx, "f32.safetensors"), [t.item() for t in tensors], metadata={"format": "pt", "note": "x"})
    sets.append(("f32.safetensors", [("f32.safetensors", t) for t in tensors]))

    # ---- BF16: Python floats rounded to nearest even, then every bit pattern
    values = [1.0, 1.00390625, 1.01171875, 3.14159, -1e-40, 9.2e-41, float("inf"), float("-inf"), float("nan"),
              65504.0, 3.4e38, -0.0, 2.0 ** -133]
    picked = bf16_tensor("bf16.picked", [len(values)], [bf16_of_f32(f32_bits(x)) for x in values])
    assert picked.f32[1] == f32_bits(1.0), "the tie 1 + 2^-8 rounds to even"
    assert picked.f32[12] == 0x00010000, "2^-133 is the smallest bf16 subnormal"
    every = bf16_tensor("bf16.every", [256, 256], list(range(65536)))
    tensors = [picked, every]
    write_st(os.path.join(fx, "bf16.safetensors"), [t.item() for t in tensors], gap=6)
    sets.append(("bf16.safetensors", [("bf16.safetensors", t) for t in tensors]))

    # ---- F16: struct's own encoder for numbers, subnormals included, then every bit pattern
    values = [1.0, -2.0, 0.1, 65504.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -15 + 2.0 ** -24, -(2.0 ** -20),
              float("inf"), float("-inf"), -0.0]
    picked = f16_tensor("f16.picked", [len(values) + 2],
                        [struct.unpack("<H", struct.pack("<e", x))[0] for x in values] + [0x7E01, 0xFD00])
    assert picked.f32[5] == f32_bits(2.0 ** -24) and picked.f32[12] == 0xFFA00000
    every = f16_tensor("f16.every", [4, 128, 128], list(range(65536)))
    tensors = [picked, every]
    write_st(os.path.join(fx, "f16.safetensors"), [t.item() for t in tensors])
    sets.append(("f16.safetensors", [("f16.safetensors", t) for t in tensors]))

    # ---- a directory holding model.safetensors
    one = f32_tensor("dir.one", [2], [f32_bits(0.5), f32_bits(-0.25)])
    write_st(os.path.join(fx, "single_dir", "model.safetensors"), [one.item()])
    sets.append(("single_dir", [("model.safetensors", one)]))

    # ---- a sharded set, opened by its index and by its directory
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    a = f32_tensor("sharded.a", [4], [f32_bits(x) for x in (1.5, 2.5, -3.5, 1e30)])
    b = bf16_tensor("sharded.b", [2, 2], [0x3F80, 0xC000, 0x0001, 0x7FC0])
    c = f16_tensor("sharded.c", [3], [0x3C00, 0x0001, 0xFC00])
    d = f32_tensor("sharded.d", [1, 1], [f32_bits(7.0)])
    sh = os.path.join(fx, "sharded")
    write_st(os.path.join(sh, s1), [a.item(), b.item()])
    write_st(os.path.join(sh, s2), [c.item(), d.item()])
    members = [(s1, a), (s1, b), (s2, c), (s2, d)]
    write_index(os.path.join(sh, "model.safetensors.index.json"), {t.name: f for f, t in members},
                sum(len(t.raw) for _, t in members))
    sets.append(("sharded/model.safetensors.index.json", members))
    sets.append(("sharded", members))

    with open(os.path.join(fx, "expected.txt"), "w") as f:
        for path, members in sets:
            f.write("open %s %d\n" % (path, len(members)))
            for file, t in members:
                f.write("tensor %s %s %s %d %s %d\n" % (t.name, file, t.dtype, len(t.shape),
                                                       " ".join(str(k) for k in t.shape), len(t.f32)))
                f.write(" ".join("%08x" % u for u in t.f32) + "\n")
                f.write("bf16 %d\n" % len(t.f32))
                f.write(" ".join("%04x" % bf16_of_f32(u) for u in t.f32) + "\n")

    # ---- broken files, one fault each (the test knows the message each must give)
    bad = os.path.join(fx, "bad")
    os.makedirs(bad)
    six = pack("f", [1, 2, 3, 4, 5, 6])
    good_header = header_bytes("{" + entry_json("w", "F32", [2, 3], 0, 24) + "}")

    def bad_st(name, text, data=six, pad=True):
        write_raw(os.path.join(bad, name), header_bytes(text, pad), data)

    write_raw(os.path.join(bad, "truncated.safetensors"), good_header, six[:-10])
    with open(os.path.join(bad, "short.safetensors"), "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00")
    write_raw(os.path.join(bad, "header_past_end.safetensors"), good_header, six, size=1000)
    bad_st("bad_json.safetensors", '{"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}')
    bad_st("trailing_json.safetensors", '{"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}} {}')
    bad_st("i64.safetensors", "{" + entry_json("ids", "I64", [3], 0, 24) + "}")
    bad_st("shape_mismatch.safetensors", "{" + entry_json("w", "F32", [2, 3], 0, 20) + "}")
    bad_st("overlap.safetensors", "{" + entry_json("a", "F32", [4], 0, 16) + ", " + entry_json("b", "F32", [4], 8, 24) + "}")
    bad_st("dup_in_header.safetensors", "{" + entry_json("w", "F32", [3], 0, 12) + ", " + entry_json("w", "F32", [3], 12, 24) + "}")
    bad_st("not_object.safetensors", "[1, 2, 3]")
    bad_st("reversed.safetensors", "{" + entry_json("w", "F32", [0], 8, 4) + "}")
    bad_st("rank9.safetensors", "{" + entry_json("w", "F32", [1] * 9, 0, 4) + "}")
    bad_st("negative.safetensors", "{" + entry_json("w", "F32", [-1, 2], 0, 4) + "}")
    bad_st("fraction.safetensors", "{" + entry_json("w", "F32", [1.5], 0, 4) + "}")
    bad_st("no_dtype.safetensors", '{"w": {"shape": [1], "data_offsets": [0, 4]}}')
    bad_st("metadata.safetensors", '{"__metadata__": {"format": 1}, ' + entry_json("w", "F32", [1], 0, 4) + "}")
    write_raw(os.path.join(bad, "nul.safetensors"), b'{"w": {}}\x00      ', six)

    # shards: one name in two shards; a shard that is missing; index and shards disagreeing
    def shard_set(dirname, shards, weight_map):
        for fname, items in shards.items():
            write_st(os.path.join(bad, dirname, fname), items)
        write_index(os.path.join(bad, dirname, "model.safetensors.index.json"), weight_map)

    x4 = ("x", "F32", [4], pack("f", [1, 2, 3, 4]))
    y4 = ("y", "F32", [4], pack("f", [5, 6, 7, 8]))
    shard_set("dup_shards", {s1: [x4], s2: [x4, y4]}, {"x": s1, "y": s2})
    shard_set("missing_shard", {s1: [x4]}, {"x": s1, "y": s2})
    z4 = ("z", "F32", [4], pack("f", [9, 10, 11, 12]))
    shard_set("wrong_shard", {s1: [x4, z4], s2: [y4]}, {"x": s2, "y": s2, "z": s1})
    shard_set("not_in_index", {s1: [x4, y4]}, {"x": s1})
    shard_set("absent_tensor", {s1: [x4]}, {"x": s1, "z": s1})
    shard_set("slash_shard", {s1: [x4]}, {"x": "../" + s1})
    os.makedirs(os.path.join(bad, "empty_dir"))
    with open(os.path.join(bad, "broken.index.json"), "w") as f:
        f.write('{"weight_map": {"x": ')


if __name__ == "__main__":
    main()
