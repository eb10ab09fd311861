#!/usr/bin/env python3
"""Turns text or JSONL into token files mtrun trains on, with the field's own
tokenizer code (Hugging Face transformers / tokenizers) and a local tokenizer:
a model directory holding tokenizer.json and tokenizer_config.json. Nothing is
downloaded.

Pretraining (--kind text): each document (a .txt file whole, or the "text"
field of each JSONL line) is tokenized and followed by the tokenizer's EOS
token; the documents are joined into OUT.bin.

Instruction tuning (--kind alpaca or messages; --kind auto tells them apart by
the first record): each record becomes a conversation rendered with the
tokenizer's own chat template, followed by EOS. Alpaca records hold
instruction / input / output (a user turn, then an assistant turn); messages
records hold "messages" (role / content) or ShareGPT's "conversations"
(from / value, human / gpt). Beside OUT.bin goes OUT.mask: one byte per token,
1 where the token counts as a target (the assistant's turns after their
header, i.e. after what the template's generation prompt renders, by
default; all turns with --train-on-all), 0 elsewhere; mtrun reads it as
the loss mask.

Token files are llm.c's: a header of 256 little-endian int32 (magic, version,
token count), then the tokens: uint16 (magic 20240520, version 1) when the
vocabulary fits, else uint32 (Llama-3's magic 20240801, version 7). The mask
file has the same header with magic 20240902, version 1, then the bytes.
See runtime/data.h.

With --val-fraction F the last F of the documents go to OUT_val.bin (and
OUT_val.mask), for mtrun --val-data.

Beside the tokens go the tokenizer and its vocabulary, for what mtrun does
with the model afterwards:
  OUT.tokenizer/   the tokenizer as transformers saves it (tokenizer.json,
                   tokenizer_config.json, its chat template ...); mtrun
                   --export DIR copies these files into the model folder
  OUT.docs         where each document starts: the mask's header with magic
                   20241205, then a byte a token, 1 at a document's (a
                   conversation's) first token; mtrun keeps attention within
                   each document of a packed row
  OUT.vocab.json   {"tokens": [...], "bos_token_id", "eos_token_id",
                   "pad_token_id"}: each token id's bytes as hexadecimal
                   pairs (a special token's its text), which mtrun
                   --sample-every decodes with
(and the same for OUT_val).

usage: prepare_data.py --tokenizer DIR --out PREFIX [--kind auto|text|alpaca|messages]
                       [--val-fraction F] [--train-on-all] INPUT...
"""
import argparse
import json
import os
import sys

import numpy as np

GPT2_MAGIC, LLAMA3_MAGIC, MASK_MAGIC, DOCS_MAGIC = 20240520, 20240801, 20240902, 20241205


def header(magic, version, count):
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2] = magic, version, count
    return h.tobytes()


def write_tokens(path, toks, vocab):
    wide = vocab > 65536
    data = np.asarray(toks, dtype="<u4" if wide else "<u2")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header(LLAMA3_MAGIC, 7, len(data)) if wide else header(GPT2_MAGIC, 1, len(data)))
        f.write(data.tobytes())
    os.replace(tmp, path)


def write_mask(path, mask, magic=MASK_MAGIC):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header(magic, 1, len(mask)))
        f.write(np.asarray(mask, dtype=np.uint8).tobytes())
    os.replace(tmp, path)


def token_bytes(tok):
    """Each token id's bytes: byte-level BPE maps bytes to printable characters
    (GPT-2's table), SentencePiece writes a space as U+2581 and a byte it has
    no piece for as <0xNN>; a special token stands for its text."""
    backend = getattr(tok, "backend_tokenizer", None)
    byte_level = backend is not None and "ByteLevel" in json.dumps(json.loads(backend.to_str()).get("decoder") or {})
    if byte_level:  # GPT-2's bytes_to_unicode, inverted
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        unbyte = {chr(c): b for b, c in zip(bs, cs)}
    special = set(tok.all_special_ids)
    out = []
    for i, piece in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))):
        piece = piece or ""
        if i in special:
            raw = piece.encode()
        elif byte_level and all(ch in unbyte for ch in piece):
            raw = bytes(unbyte[ch] for ch in piece)
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            raw = bytes([int(piece[3:5], 16)])
        else:
            raw = piece.replace("\u2581", " ").encode()
        out.append(raw.hex())
    return out


def write_sidecars(out, tok, vocab_hex):
    """OUT.tokenizer/ (the tokenizer's own files) and OUT.vocab.json."""
    tok.save_pretrained(out + ".tokenizer")
    ids = {k: getattr(tok, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    tmp = out + ".vocab.json.tmp"
    with open(tmp, "w") as f:
        json.dump({"tokens": vocab_hex, **ids}, f)
    os.replace(tmp, out + ".vocab.json")


def records(paths):
    """(path, line number, record) of every input: a .txt file is one {"text": ...} record."""
    for path in paths:
        if not path.endswith(".jsonl") and not path.endswith(".json"):
            yield path, 0, {"text": open(path, encoding="utf-8").read()}
            continue
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield path, n, json.loads(line)
                    except json.JSONDecodeError as e:
                        sys.exit(f"{path}:{n}: error: not JSON: {e}")


def conversation(rec, where):
    """The record as chat messages [{"role", "content"}]."""
    if "instruction" in rec and "output" in rec:  # alpaca
        prompt = rec["instruction"] + (("\n\n" + rec["input"]) if rec.get("input") else "")
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": rec["output"]}]
    if "messages" in rec:
        return [{"role": m["role"], "content": m["content"]} for m in rec["messages"]]
    if "conversations" in rec:  # ShareGPT
        roles = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
        return [{"role": roles.get(m["from"], m["from"]), "content": m["value"]} for m in rec["conversations"]]
    sys.exit(f"{where}: error: an instruction record needs instruction/output (alpaca), messages (role/content) "
             f"or conversations (from/value)")


def render(tok, msgs, train_on_all):
    """Tokens of the conversation through the chat template, and the mask: a
    message's tokens are those its prefix adds to the rendering of the
    messages before it (templates render prefixes as prefixes)."""
    def tokens(part, prompt=False):
        out = tok.apply_chat_template(part, tokenize=True, add_generation_prompt=prompt)
        if hasattr(out, "keys"):  # a BatchEncoding from some transformers versions on
            out = out["input_ids"]
        return list(out)

    ids, mask = [], []
    for i, m in enumerate(msgs):
        upto = tokens(msgs[:i + 1])
        if upto[:len(ids)] != ids:
            raise ValueError("the chat template does not render a conversation's prefix as its prefix")
        counts = 1 if (train_on_all or m["role"] == "assistant") else 0
        head = len(ids)  # the assistant's header (its generation prompt) is given, not learnt
        if m["role"] == "assistant" and not train_on_all:
            prompt = tokens(msgs[:i], prompt=True) if i else []
            if prompt[:len(ids)] == ids and upto[:len(prompt)] == prompt:
                head = len(prompt)
        mask += [0] * (head - len(ids)) + [counts] * (len(upto) - head)
        ids = upto
    return ids, mask


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", help=".txt files (one document each) or .jsonl files")
    ap.add_argument("--tokenizer", required=True, help="a directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--out", required=True, help="writes OUT.bin (and OUT.mask for instruction data)")
    ap.add_argument("--kind", choices=["auto", "text", "alpaca", "messages"], default="auto")
    ap.add_argument("--val-fraction", type=float, default=0.0)
    ap.add_argument("--train-on-all", action="store_true", help="every turn counts, not only the assistant's")
    a = ap.parse_args()
    if not 0 <= a.val_fraction < 1:
        sys.exit(f"prepare_data: error: --val-fraction {a.val_fraction} is not in [0, 1)")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(a.tokenizer, f)):
            sys.exit(f"{os.path.join(a.tokenizer, f)}: error: missing; --tokenizer names a local model directory")
    for path in a.inputs:
        if not os.path.isfile(path):
            sys.exit(f"{path}: error: no such file")

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoTokenizer  # the field's own loader: tokenizer.json through `tokenizers`
    from tqdm import tqdm
    tok = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
    if tok.eos_token_id is None:
        sys.exit(f"{a.tokenizer}: error: the tokenizer has no eos_token (tokenizer_config.json)")
    vocab = len(tok)

    recs = list(records(a.inputs))
    kind = a.kind
    if kind == "auto":
        first = recs[0][2] if recs else {}
        kind = "text" if "text" in first else "alpaca" if "instruction" in first else "messages"
    if kind != "text" and not getattr(tok, "chat_template", None):
        sys.exit(f"{a.tokenizer}: error: instruction data needs the tokenizer's chat_template (tokenizer_config.json)")

    docs = []  # (ids, mask or None) per document
    size = sum(os.path.getsize(p) for p in a.inputs)
    for path, n, rec in tqdm(recs, desc="tokenizing", unit="doc", disable=size < (8 << 20) or None, file=sys.stderr):
        where = f"{path}:{n}" if n else path
        if kind == "text":
            if "text" not in rec:
                sys.exit(f"{where}: error: a pretraining record needs a \"text\" field")
            docs.append((tok.encode(rec["text"], add_special_tokens=False) + [tok.eos_token_id], None))
        else:
            try:
                ids, mask = render(tok, conversation(rec, where), a.train_on_all)
            except ValueError as e:
                sys.exit(f"{where}: error: {e}")
            docs.append((ids + [tok.eos_token_id], mask + [0]))

    vocab_hex = token_bytes(tok)
    nval = int(len(docs) * a.val_fraction + 0.5) if a.val_fraction > 0 else 0
    if nval and nval == len(docs):
        sys.exit(f"prepare_data: error: --val-fraction {a.val_fraction} leaves no training documents of {len(docs)}")
    for suffix, part in (("", docs[:len(docs) - nval]), ("_val", docs[len(docs) - nval:])):
        if not part:
            continue
        toks = [t for ids, _ in part for t in ids]
        write_tokens(a.out + suffix + ".bin", toks, vocab)
        write_sidecars(a.out + suffix, tok, vocab_hex)
        write_mask(a.out + suffix + ".docs", [int(i == 0) for ids, _ in part for i in range(len(ids))], DOCS_MAGIC)
        line = f"{a.out}{suffix}.bin: {len(part)} documents, {len(toks)} tokens ({'uint32' if vocab > 65536 else 'uint16'}, vocabulary {vocab})"
        if kind != "text":
            mask = [m for _, ms in part for m in ms]
            write_mask(a.out + suffix + ".mask", mask)
            line += f"; {a.out}{suffix}.mask: {sum(mask)} tokens count, {100 * (1 - sum(mask) / len(mask)):.1f}% masked"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
