#!/usr/bin/env python3
"""docs/finetune.md, run word for word: its ```sh blocks, in order, each by
bash in a folder of its own with MT set to this checkout, on a tiny Llama
made here (transformers' LlamaForCausalLM from a config, random weights,
saved as a Hugging Face folder `base/` with a byte-level BPE tokenizer
trained here with `tokenizers` and a chat template; nothing downloaded) and
SFT conversations `sft.jsonl` (capitals and sums). Checks that every block
exits 0; that the guide still holds every stage (convert, prepare, compile,
train with samples and checkpoints, kill -9, resume, export, load in
transformers, generate, compare logits); that the run was killed after its
step-20 checkpoint and resumed from it; that the validation loss fell by
more than 1 (from about ln 300); that the export keeps base's
max_position_embeddings and loads in transformers; that mt's greedy
continuation from the checkpoint and from the export are the same text,
transformers' greedy text (generate()); and
that the exported model's logits equal mt's to 1e-4 of the largest.

usage: check_finetune_guide.py MTC MTRUN   (from the project root; the guide's
$MT is a folder of links: build/mtc and build/mtrun to these, tools/ to the
project's)
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

from checks import check, finish

STAGES = ["tools/hf_to_mt.py base --finetune", "tools/prepare_data.py sft.jsonl", "build/mtc ft.mt", "--init base",
          "--sample-every", "--save ft.ckpt", "kill -9", "--resume ft.ckpt", "--export ft-hf",
          "AutoModelForCausalLM.from_pretrained('ft-hf')", "model.generate", "--sample-prompt prompt.ids",
          "--logits cmp", "--logits-full-rows"]


def make_base(folder, jsonl):
    """A tiny Llama as a Hugging Face folder, its tokenizer trained on the conversations written to jsonl."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    rng = random.Random(0)
    capitals = {"France": "Paris", "Spain": "Madrid", "Italy": "Rome", "Japan": "Tokyo", "Egypt": "Cairo",
                "Peru": "Lima", "Kenya": "Nairobi", "Chile": "Santiago", "Norway": "Oslo", "Greece": "Athens"}
    convs = []
    for i in range(300):
        if i % 2:
            c = rng.choice(sorted(capitals))
            q, a = f"What is the capital of {c}?", f"The capital of {c} is {capitals[c]}."
        else:
            x, y = rng.randint(1, 9), rng.randint(1, 9)
            q, a = f"What is {x} plus {y}?", f"{x} plus {y} is {x + y}."
        convs.append({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
    with open(jsonl, "w") as f:
        f.writelines(json.dumps(c) + "\n" for c in convs)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([m["content"] for c in convs for m in c["messages"]],
                            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                special_tokens=["<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)


def main():
    mtc, mtrun = (os.path.abspath(a) for a in sys.argv[1:3])
    guide = open(os.path.join("docs", "finetune.md")).read()
    blocks = re.findall(r"```sh\n(.*?)```", guide, re.S)
    text = "\n".join(blocks)
    missing = [s for s in STAGES if s not in text]
    check(not missing, f"docs/finetune.md's commands lack stages: {missing}")
    outs = []
    with tempfile.TemporaryDirectory() as tmp:
        make_base(os.path.join(tmp, "base"), os.path.join(tmp, "sft.jsonl"))
        root = os.path.join(tmp, "mt")  # $MT: this build's binaries and the project's tools
        os.makedirs(os.path.join(root, "build"))
        os.symlink(mtc, os.path.join(root, "build", "mtc"))
        os.symlink(mtrun, os.path.join(root, "build", "mtrun"))
        os.symlink(os.path.abspath("tools"), os.path.join(root, "tools"))
        env = dict(os.environ, MT=root, TRANSFORMERS_VERBOSITY="error")
        for k, block in enumerate(blocks):
            p = subprocess.run(["bash", "-e", "-c", block], cwd=tmp, env=env, capture_output=True, text=True,
                               timeout=600)
            outs.append(p.stdout)
            if not check(p.returncode == 0, f"block {k + 1} of docs/finetune.md exits {p.returncode}:\n{block}", p):
                return finish("finetune guide checks")
        log = [json.loads(line) for line in open(os.path.join(tmp, "ft.metrics.jsonl"))]
        val = {}  # the first run's step 0 (later runs of --steps 0 log theirs too) and the resumed run's step 60
        for r in log:
            if "val_loss" in r and r["step"] in (0, 60):
                val.setdefault(r["step"], r["val_loss"])
        resumed = re.search(r"resumed from ft.ckpt/step-0*(\d+)\.ckpt at step (\d+)", "".join(outs))
        config = json.load(open(os.path.join(tmp, "ft-hf", "config.json")))
        all_out = "".join(outs)
        greedy = re.findall(r'^sample \d+ greedy: "[^\n]*" -> ("[^\n]*")$', all_out, re.M)
        said = re.search(r"^transformers: (.*)$", all_out, re.M)
        diff = re.search(r"logits: largest difference (\S+) of the largest logit", all_out)
    check(resumed is not None and 20 <= int(resumed.group(2)) < 60,
          f"the run was killed after step 20's checkpoint and resumed from it: {resumed and resumed.group(0)}")
    check(0 in val and 60 in val and val[60] < val[0] - 1.0, f"the validation loss falls: {val}")
    check(config.get("max_position_embeddings") == 512, f"the export keeps base's max_position_embeddings: {config}")
    check("transformers: " in all_out, "transformers loads the export and generates")
    check(len(greedy) >= 2 and greedy[-1] == greedy[-2],
          f"mt's greedy text from the checkpoint and from the export: {greedy[-2:]}")
    check(said is not None and greedy and said.group(1).replace("</s>", "") == greedy[-1][1:-1],
          f"transformers' greedy text is mt's: {said and said.group(1)!r}, {greedy[-1:]}")
    check(diff is not None and float(diff.group(1)) <= 1e-4, f"the export's logits equal mt's: {diff and diff.group(0)}")
    print(f"val_loss {val}; {resumed and resumed.group(0)}; {diff and diff.group(0)}; mt's greedy {greedy[-1:]}; "
          f"transformers' {said and said.group(1)!r}")
    return finish("finetune guide checks")


if __name__ == "__main__":
    sys.exit(main())
