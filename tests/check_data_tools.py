#!/usr/bin/env python3
"""tools/prepare_data.py and the masked loss, end to end, with no network:

- a small BPE tokenizer is trained here with Hugging Face `tokenizers` on the
  bundled text and saved as a local model directory (tokenizer.json,
  tokenizer_config.json with an EOS token and a chat template);
- the script turns the text into a pretraining token file and two
  instruction sets (alpaca and messages layouts) into token files with loss
  masks; llama-tiny trains on each with mtrun;
- the mask counts exactly the assistant turns' tokens;
- the first step's loss on masked data equals numpy's masked mean of the
  same weights (written as safetensors, loaded with --init), attention kept
  within each record by the document starts (alpaca.docs);
- two micro-batches of unequal counted tokens (accumulate = 2) give the loss
  and the update of the one batch holding both;
- tools/plot_metrics.py draws the logs into a PNG.

usage: check_data_tools.py MTC MTRUN    (from the project root)
"""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_weights import llama_loss, llama_tiny_weights, write_safetensors  # noqa: E402
from checks import check, finish, losses, run  # noqa: E402

CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def read_file(path, magic_width):
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:1024], "<i4")
    return head, np.frombuffer(raw[1024:], magic_width[int(head[0])])


def make_tokenizer(d, text):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<unk>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=250, special_tokens=specials, show_progress=False))
    os.makedirs(d)
    tok.save(os.path.join(d, "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|eos|>", "unk_token": "<unk>",
               "chat_template": CHAT}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    return tok.get_vocab_size()


def main():
    mtc, mtrun = sys.argv[1:3]
    prep = [sys.executable, "tools/prepare_data.py"]
    text = open("examples/data/tinyshakespeare.txt", encoding="utf-8").read()
    lines = [l for l in text.splitlines() if l.strip()]
    with tempfile.TemporaryDirectory() as t:
        j = lambda *p: os.path.join(t, *p)
        vocab = make_tokenizer(j("tok"), text[:300000])
        check(vocab <= 256, f"the test tokenizer's vocabulary {vocab} fits llama-tiny's 256")
        widths = {20240520: "<u2", 20240801: "<u4", 20240902: "u1"}

        # pretraining text
        open(j("a.txt"), "w").write(text[:200000])
        open(j("b.txt"), "w").write(text[200000:260000])
        p = run(*prep, "--tokenizer", j("tok"), "--out", j("pre"), j("a.txt"), j("b.txt"))
        check(p.returncode == 0 and "2 documents" in p.stdout and "tokens" in p.stdout, "prepare pretraining text", p)
        head, toks = read_file(j("pre.bin"), widths)
        check(head[0] == 20240520 and head[2] == len(toks) and not os.path.exists(j("pre.mask")),
              "a uint16 llm.c token file, no mask")
        check(int((toks == 1).sum()) == 2 and toks[-1] == 1, "the documents are joined by EOS (id 1), one after each")
        vocab_json = json.load(open(j("pre.vocab.json")))
        text_back = b"".join(bytes.fromhex(vocab_json["tokens"][x]) for x in toks if x != 1).decode()
        check("".join(text_back.split()) == "".join(text[:260000].split()) and vocab_json["eos_token_id"] == 1,
              "pre.vocab.json decodes the tokens back to the text (up to the spaces Metaspace puts before a "
              "document), and names the EOS")
        check(os.path.isfile(j("pre.tokenizer", "tokenizer.json")), "the tokenizer is kept beside the tokens")
        sp_model = bytes(range(256)) * 4  # as a SentencePiece tokenizer.model would be: binary, NULs inside
        open(j("pre.tokenizer", "tokenizer.model"), "wb").write(sp_model)
        # a byte-level BPE (GPT-2's byte table) decodes to the same bytes, multi-byte characters included
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
        bl = Tokenizer(models.BPE())
        bl.pre_tokenizer, bl.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        btext = text[:20000] + " café ☃ naïve"
        bl.train_from_iterator([btext], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|eos|>"], show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        os.makedirs(j("bltok"))
        bl.save(j("bltok", "tokenizer.json"))
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|eos|>"},
                  open(j("bltok", "tokenizer_config.json"), "w"))
        open(j("bl.txt"), "w").write(btext)
        p = run(*prep, "--tokenizer", j("bltok"), "--out", j("bl"), j("bl.txt"))
        _, btoks = read_file(j("bl.bin"), widths) if p.returncode == 0 else (None, [])
        bv = json.load(open(j("bl.vocab.json"))) if p.returncode == 0 else {"tokens": []}
        check(p.returncode == 0 and b"".join(bytes.fromhex(bv["tokens"][x]) for x in btoks[:-1]) == btext.encode(),
              "a byte-level BPE's vocabulary decodes its tokens to the text's bytes", p)
        plan = j("tiny.bin")
        p = run(mtc, "examples/llama-tiny.mt", "--batch", "2", "--seq", "32", "-o", plan)
        check(p.returncode == 0, "mtc llama-tiny", p)
        p = run(mtrun, plan, "--data", j("pre.bin"), "--steps", "20", "--val-every", "20", "--log", j("pre.jsonl"),
                "--sample-every", "20", "--export", j("model"))
        l = losses(j("pre.jsonl")) if p.returncode == 0 else []
        check(p.returncode == 0 and len(l) == 20 and l[-1] < l[0], f"llama-tiny trains on the pretraining file: {l}", p)
        said = [x for x in p.stdout.splitlines() if x.startswith("sample 20 ")]
        prompt = said[0].split('" -> "')[0][len('sample 20 greedy: "'):] if said else "?"
        check(len(said) == 2 and all('" -> "' in x for x in said) and len(prompt) > 10 and
              prompt.replace("\\n", "\n") in text_back,
              f"--sample-every decodes the tokens with pre.vocab.json: {said}", p)
        from transformers import AutoTokenizer
        check(os.path.isfile(j("model", "tokenizer.json")) and
              json.load(open(j("model", "generation_config.json"))).get("eos_token_id") == 1 and
              AutoTokenizer.from_pretrained(j("model"), local_files_only=True).eos_token_id == 1 and
              open(j("model", "tokenizer.model"), "rb").read() == sp_model,
              "--export DIR copies the tokenizer (a binary file byte for byte) and its EOS into the model folder", p)

        # instruction data, both layouts
        with open(j("alpaca.jsonl"), "w") as f:
            for i in range(0, 400, 2):
                f.write(json.dumps({"instruction": "Continue:", "input": lines[i], "output": lines[i + 1]}) + "\n")
        with open(j("chat.jsonl"), "w") as f:
            for i in range(0, 300, 3):
                f.write(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": lines[i]},
                                                 {"role": "assistant", "content": lines[i + 1]},
                                                 {"role": "user", "content": "And?"},
                                                 {"role": "assistant", "content": lines[i + 2]}]}) + "\n")
        with open(j("sharegpt.jsonl"), "w") as f:
            f.write(json.dumps({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yes"}]}) + "\n")
        for name, src in (("alpaca", "alpaca.jsonl"), ("chat", "chat.jsonl"), ("sg", "sharegpt.jsonl")):
            p = run(*prep, "--tokenizer", j("tok"), "--out", j(name), j(src))
            check(p.returncode == 0 and "masked" in p.stdout, f"prepare {src}", p)
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(j("tok"), local_files_only=True)
        for name, want in (("alpaca", [lines[i + 1] for i in range(0, 400, 2)]),
                           ("chat", [x for i in range(0, 300, 3) for x in (lines[i + 1], lines[i + 2])]),
                           ("sg", ["yes"])):
            head, toks = read_file(j(name + ".bin"), widths)
            mhead, mask = read_file(j(name + ".mask"), widths)
            check(mhead[0] == 20240902 and mhead[2] == len(toks) == len(mask), f"{name}: a mask of one byte a token")
            # the counted tokens, run by run, are exactly the assistant turns (with their end marker)
            runs, cur = [], []
            for x, m in zip(toks, mask):
                if m:
                    cur.append(int(x))
                elif cur:
                    runs.append(cur)
                    cur = []
            got = [hf.decode(r).replace("<|end|>", "").strip() for r in runs]
            check(got == [w.strip() for w in want], f"{name}: the mask counts the assistant turns: {got[:3]} vs {want[:3]}")
        p = run(mtrun, plan, "--data", j("alpaca.bin"), "--steps", "5", "--val-every", "5", "--log", j("sft.jsonl"))
        check(p.returncode == 0 and "mask " + j("alpaca.mask") in p.stdout and len(losses(j("sft.jsonl"))) == 5,
              "llama-tiny trains on the instruction set with its mask", p)
        p = run(mtrun, plan, "--data", j("chat.bin"), "--steps", "3", "--val-every", "3", "--log", j("sft2.jsonl"))
        check(p.returncode == 0, "and on the messages set", p)

        # the masked first-step loss against numpy, with the same weights
        rng = np.random.default_rng(7)
        W = llama_tiny_weights(mtc, t, rng)
        write_safetensors(j("w.safetensors"), [(n, "F32", w) for n, w in W.items()])
        head, toks = read_file(j("alpaca.bin"), widths)
        _, mask = read_file(j("alpaca.mask"), widths)
        B, T = 2, 32
        x = toks[:B * T + 1].astype(np.int64)
        m = mask[1:B * T + 1].astype(np.float64)
        _, starts = read_file(j("alpaca.docs"), {20241205: "u1"})
        seg = []  # each position's document start in its row: attention stays within a conversation
        for b in range(B):
            s = 0
            for i in range(T):
                s = i if i and starts[b * T + i] else s
                seg.append(s)
        seg = np.array(seg).reshape(B, T)
        check(seg.max() > 0 and int(starts.sum()) == 200, f"alpaca.docs marks the 200 records' starts, some inside "
              f"the first rows: {seg.max(axis=1)}")
        counts = [int(m[b * T:(b + 1) * T].sum()) for b in range(B)]
        check(0 < counts[0] != counts[1] > 0, f"the two rows count unequal tokens: {counts}")
        num = sum(llama_loss(W, 2, 4, 2, 10000.0, x[b * T:(b + 1) * T], x[b * T + 1:(b + 1) * T + 1],
                             mask=m[b * T:(b + 1) * T], segments=seg[b]) * counts[b] for b in range(B)) / sum(counts)
        unmasked = np.mean([llama_loss(W, 2, 4, 2, 10000.0, x[b * T:(b + 1) * T], x[b * T + 1:(b + 1) * T + 1])
                            for b in range(B)])
        for extra in ([], ["--reference"]):
            p = run(mtrun, plan, "--data", j("alpaca.bin"), "--init", j("w.safetensors"), "--steps", "1",
                    "--val-batches", "0", "--log", j("m.jsonl"), *extra)
            got = losses(j("m.jsonl"))[0] if p.returncode == 0 else float("nan")
            check(abs(got - num) <= 1e-6 * abs(num), f"masked first-step loss {got!r} vs numpy {num!r} "
                  f"(unmasked {unmasked:.6f}) {' '.join(extra)}", p)
            print(f"masked loss{' (reference)' if extra else ''}: mtrun {got:.9f}, numpy {num:.9f}, "
                  f"relative {abs(got - num) / abs(num):.2e}")

        # accumulate = 2 micro-batches of 1 row against 1 batch of 2 rows: steps 1 and 2 (the update) agree
        src = open("examples/llama-tiny.mt").read().replace("  batch = 16\n", "  batch = 16\n  accumulate = 2\n")
        src = src.replace('"data/tinyshakespeare.txt"', '"' + os.path.abspath("examples/data/tinyshakespeare.txt") + '"')
        open(j("acc.mt"), "w").write(src)
        acc = j("acc.bin")
        p = run(mtc, j("acc.mt"), "--batch", "1", "--seq", "32", "-o", acc)
        check(p.returncode == 0, "mtc llama-tiny with accumulate = 2", p)
        out = {}
        for name, pl in (("one", plan), ("acc", acc)):
            p = run(mtrun, pl, "--data", j("alpaca.bin"), "--init", j("w.safetensors"), "--steps", "2",
                    "--val-batches", "0", "--log", j(name + ".jsonl"))
            check(p.returncode == 0, f"two steps, {name}", p)
            out[name] = losses(j(name + ".jsonl")) if p.returncode == 0 else []
        a, b = out["one"], out["acc"]
        check(len(a) == 2 and len(b) == 2 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)),
              f"accumulating 2 unequal micro-batches equals the one batch: {a} vs {b}")
        print(f"one batch {a}, two micro-batches {b}")

        # tools/plot_metrics.py draws logs into a PNG
        p = run(sys.executable, "tools/plot_metrics.py", j("pre.jsonl"), j("sft.jsonl"), "-o", j("plot.png"))
        check(p.returncode == 0 and open(j("plot.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n",
              "plot_metrics.py writes a PNG of two logs", p)
        p = run(sys.executable, "tools/plot_metrics.py", j("nothing.jsonl"), "-o", j("bad.png"))
        check(p.returncode != 0 and "nothing.jsonl" in p.stderr and not os.path.exists(j("bad.png")),
              "plot_metrics.py refuses a missing log", p)

    sys.exit(finish())


if __name__ == "__main__":
    main()
