#!/usr/bin/env python3
"""Writes a small llm.c token file for tests/test_data.c, independently of mt.

The layout is llm.c's (dev/data/data_common.py, write_datafile): a header of
256 little-endian int32 -- magic 20240520, version 1, token count, zeros --
then the tokens as little-endian uint16; with --magic 20240801 (Llama-3's
files, version 7) as little-endian uint32.

--mask-out PATH also writes mt's loss mask for the file (runtime/data.h: the
same header with magic 20240902, version 1, the count, then one byte a
token): entry i is 0 when i % 3 == 0, else 1; --mask-count changes how many
entries it holds, --mask-set I=V one entry.

Token i is (7919 * i + 11) % MOD, unless --set I=V says otherwise; the test
computes the same formula on its own. The other options break the file on
purpose, one way each, for the error cases.

usage: make_llmc_tokens.py OUT --count N [--mod M] [--set I=V ...]
                           [--magic M] [--version V] [--header-count C]
                           [--truncate K] [--extra K]
                           [--mask-out PATH [--mask-count N] [--mask-set I=V ...]]
"""
import argparse
import array
import struct
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, required=True, help="number of tokens written")
    ap.add_argument("--mod", type=int, default=50000, help="token i is (7919*i + 11) %% MOD")
    ap.add_argument("--set", action="append", default=[], metavar="I=V",
                    help="token I is V instead (repeatable)")
    ap.add_argument("--magic", type=int, default=20240520)
    ap.add_argument("--version", type=int, default=1)
    ap.add_argument("--header-count", type=int, default=None,
                    help="token count written in the header (default: --count)")
    ap.add_argument("--truncate", type=int, default=0, help="drop K bytes from the end")
    ap.add_argument("--extra", type=int, default=0, help="append K zero bytes")
    ap.add_argument("--mask-out", default=None)
    ap.add_argument("--mask-count", type=int, default=None)
    ap.add_argument("--mask-set", action="append", default=[], metavar="I=V")
    a = ap.parse_args()

    if a.mask_out:
        n = a.count if a.mask_count is None else a.mask_count
        mask = bytearray(0 if i % 3 == 0 else 1 for i in range(n))
        for s in a.mask_set:
            i, v = (int(x) for x in s.split("="))
            mask[i] = v
        with open(a.mask_out, "wb") as f:
            f.write(struct.pack("<256i", *([20240902, 1, n] + [0] * 253)) + bytes(mask))

    toks = array.array("I" if a.magic == 20240801 else "H", ((7919 * i + 11) % a.mod for i in range(a.count)))
    for s in a.set:
        i, v = (int(x) for x in s.split("="))
        toks[i] = v
    if sys.byteorder == "big":
        toks.byteswap()

    header = [0] * 256
    header[0] = a.magic
    header[1] = a.version
    header[2] = a.count if a.header_count is None else a.header_count
    data = struct.pack("<256i", *header) + toks.tobytes() + b"\0" * a.extra
    if a.truncate:
        data = data[:-a.truncate]
    with open(a.out, "wb") as f:
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
