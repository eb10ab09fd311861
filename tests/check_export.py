#!/usr/bin/env python3
"""A model folder in and out, checked against transformers itself (torch, CPU).

usage: check_export.py MTC MTRUN MODE     (from the project root)
  transformers  llama-tiny, mixtral-tiny and gemma2-tiny train 3 steps and
                --export DIR: AutoModelForCausalLM loads each folder, and its
                logits on the first validation batch equal mt's (--logits)
                to 1e-4 relative to the largest; so do qwen2-7b and
                mistral-7b at tiny widths (the other two families, q/k/v
                biases and a sliding window); a model of no family mt can
                describe (gpt2-tiny) is refused before it trains; Llama 3.2
                at tiny widths, whose rope scales its frequencies, exports
                rope_parameters (rope_type llama3) and loads to mt's logits;
                llama-tiny under longrope (Phi-3's rule) exports both factor
                lists and loads to mt's logits past the original context
  shards        a folder of shards with model.safetensors.index.json (written
                by --export --shard-bytes) initialises a run to the same bits
                as the single file it came from, by folder and by index, and
                the first step's loss is the same
  fused         transformers 5's own state_dict of a Mixtral (experts fused:
                mlp.experts.gate_up_proj (E, 2F, C), down_proj (E, C, F),
                mlp.gate) loads with --init to the same weights as the
                per-expert Hub names; a fused tensor of the wrong shape is
                refused naming it
  samples       --sample-every prints a greedy and two temperature samples of
                decoded text at the steps asked; the same seed prints the
                same text twice, another seed other samples; they run the
                plan's own forward (the eval stream), whose greedy text is
                the reference executor's (MT_SAMPLE_REFERENCE=1) and whose
                --logits equal the reference's to 1e-5, f32 and bf16, and
                with a tiled tail (--tile 4)
  checkpoint    a checkpoint exported after the fact (--resume CKPT --steps 0
                --export): the bytes the run's own export wrote; --init on a
                checkpoint says what to run; a model hf_to_mt.py wrote keeps
                its source's max_position_embeddings in the export
"""
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_weights import read_safetensors  # noqa: E402
from checks import check, finish, losses, run  # noqa: E402

MODELS = ("llama", "mixtral", "gemma2")


def plan(mtc, tmp, name, batch=2):
    out = os.path.join(tmp, name + ".bin")
    p = run(mtc, f"examples/{name}-tiny.mt", "--batch", str(batch), "--seq", "32", "-o", out)
    check(p.returncode == 0, f"mtc {name}-tiny", p)
    return out


def hf_logits(folder, tokens):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True).eval()
    with torch.no_grad():
        return type(m).__name__, m(torch.tensor(tokens, dtype=torch.long)).logits.numpy()


def transformers_(mtc, mtrun, tmp):
    j = lambda *p: os.path.join(tmp, *p)
    for name in MODELS:
        pl = plan(mtc, tmp, name)
        p = run(mtrun, pl, "--steps", "3", "--export", j(name), "--logits", j(name), "--log", j("l.jsonl"))
        check(p.returncode == 0 and os.path.isfile(j(name, "config.json")), f"{name}: train, export a folder", p)
        if p.returncode:
            continue
        config = json.load(open(j(name, "config.json")))
        check(set(os.listdir(j(name))) == {"config.json", "generation_config.json", "model.safetensors"},
              f"{name}: the folder holds {sorted(os.listdir(j(name)))}")
        tokens, want = np.load(j(name + ".tokens.npy")), np.load(j(name + ".logits.npy"))
        arch, got = hf_logits(j(name), tokens)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        check(got.shape == want.shape == (2, 32, 256) and err <= 1e-4,
              f"{name}: {arch}'s logits against mt's: {err:.2e} relative")
        print(f"{name}: {arch} ({config['model_type']}) loads the export; logits {got.shape}, "
              f"largest difference {err:.2e} of the largest logit")
    # the other two families, from the 7B examples at tiny widths (Mistral's window 8 under seq 16), and
    # Llama 3.2, whose rope scales its frequencies (rope_parameters: rope_type llama3 and its fields)
    for name in ("qwen2-7b", "mistral-7b", "llama3.2-1b"):
        src = open(f"examples/{name}.mt").read()
        for k, v in {"V": "256", "C": "64", "L": "2", "NH": "4", "NKV": "2", "FFN": "96", "W": "8"}.items():
            src = re.sub(rf"(\n  {k} = )[^\n#]*", rf"\g<1>{v} ", src)
        src = src.replace("dtype = bf16", "dtype = f32")
        open(j(name + ".mt"), "w").write(src)
        pl = j(name + ".bin")
        p = run(mtc, j(name + ".mt"), "--batch", "2", "--seq", "16", "--target", "tests/tiny-gpu.target", "-o", pl)
        check(p.returncode == 0, f"mtc {name} at tiny widths", p)
        p = run(mtrun, pl, "--data", "examples/data/tinyshakespeare.txt", "--steps", "2", "--val-batches", "1",
                "--export", j(name), "--logits", j(name), "--log", j("l.jsonl"))
        check(p.returncode == 0, f"{name}: train, export a folder", p)
        if p.returncode:
            continue
        if name == "llama3.2-1b":
            rp = json.load(open(j(name, "config.json"))).get("rope_parameters", {})
            check(rp.get("rope_type") == "llama3" and rp.get("factor") == 32.0 and rp.get("low_freq_factor") == 1.0
                  and rp.get("high_freq_factor") == 4.0 and rp.get("original_max_position_embeddings") == 8192,
                  f"{name}: config.json's rope_parameters {rp}")
        tokens, want = np.load(j(name + ".tokens.npy")), np.load(j(name + ".logits.npy"))
        arch, got = hf_logits(j(name), tokens)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        check(got.shape == want.shape and err <= 1e-4, f"{name}: {arch}'s logits against mt's: {err:.2e} relative")
        print(f"{name} (tiny widths): {arch} loads the export; largest difference {err:.2e} of the largest logit")
    # longrope (Phi-3's rule) on llama-tiny: both factor lists go into rope_parameters; at seq 32, past
    # original_max_position_embeddings 16, mt and transformers both turn by the long factors
    short, long_ = [1.0 + 0.05 * i for i in range(8)], [1.5 + 0.4 * i for i in range(8)]
    rule = (", scaling = longrope, factor = 2, original_max_position_embeddings = 16, short_factor = ["
            + ", ".join(map(str, short)) + "], long_factor = [" + ", ".join(map(str, long_)) + "])")
    src = open("examples/llama-tiny.mt").read().replace("theta = theta)", "theta = theta" + rule)
    open(j("longrope.mt"), "w").write(src)
    pl = j("longrope.bin")
    p = run(mtc, j("longrope.mt"), "--batch", "2", "--seq", "32", "-o", pl)
    check(p.returncode == 0 and src.count("longrope") == 2, "mtc llama-tiny with longrope", p)
    p = run(mtrun, pl, "--data", "examples/data/tinyshakespeare.txt", "--steps", "2", "--val-batches", "1",
            "--export", j("longrope"), "--logits", j("longrope"), "--log", j("l.jsonl"))
    check(p.returncode == 0, "longrope: train, export a folder", p)
    if p.returncode == 0:
        rp = json.load(open(j("longrope", "config.json"))).get("rope_parameters", {})
        check(rp.get("rope_type") == "longrope" and np.allclose(rp.get("short_factor"), short, rtol=1e-12)
              and np.allclose(rp.get("long_factor"), long_, rtol=1e-12)
              and rp.get("original_max_position_embeddings") == 16 and rp.get("factor") == 2.0
              and abs(rp.get("attention_factor", 0) - (1 + np.log(2) / np.log(16)) ** 0.5) < 1e-9,
              f"longrope: config.json's rope_parameters {rp}")
        tokens, want = np.load(j("longrope.tokens.npy")), np.load(j("longrope.logits.npy"))
        arch, got = hf_logits(j("longrope"), tokens)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        check(got.shape == want.shape and err <= 1e-4, f"longrope: {arch}'s logits against mt's: {err:.2e} relative")
        print(f"longrope (llama-tiny, long factors at seq 32): {arch} loads the export; largest difference {err:.2e} "
              f"of the largest logit")
    # a model transformers has no config for here is refused before it trains
    pl = plan(mtc, tmp, "gpt2")
    p = run(mtrun, pl, "--steps", "3", "--export", j("gpt2"), "--log", j("g.jsonl"))
    check(p.returncode == 1 and "config.json" in p.stderr and "gpt2_tiny" in p.stderr and "step" not in p.stdout
          and not os.path.exists(j("gpt2")), "gpt2-tiny --export DIR is refused up front, naming the model", p)


def shards(mtc, mtrun, tmp):
    j = lambda *p: os.path.join(tmp, *p)
    pl = plan(mtc, tmp, "llama")
    p = run(mtrun, pl, "--steps", "3", "--export", j("one.safetensors"), "--log", j("l.jsonl"))
    check(p.returncode == 0, "train and export one file", p)
    p = run(mtrun, pl, "--steps", "0", "--init", j("one.safetensors"), "--export", j("dir"), "--shard-bytes", "100000",
            "--log", j("l.jsonl"))
    files = sorted(os.listdir(j("dir"))) if os.path.isdir(j("dir")) else []
    shard = [f for f in files if f.startswith("model-")]
    check(p.returncode == 0 and len(shard) >= 3 and "model.safetensors.index.json" in files
          and "model.safetensors" not in files, f"a sharded folder: {files}", p)
    for src in (j("dir"), j("dir", "model.safetensors.index.json")):
        out = j("back.safetensors")
        p = run(mtrun, pl, "--steps", "0", "--init", src, "--export", out, "--log", j("l.jsonl"))
        check(p.returncode == 0 and open(out, "rb").read() == open(j("one.safetensors"), "rb").read(),
              f"--init {os.path.relpath(src, tmp)} gives the single file's bits", p)
    got = {}
    for name, src in (("one", j("one.safetensors")), ("dir", j("dir"))):
        p = run(mtrun, pl, "--steps", "1", "--init", src, "--log", j(name + ".jsonl"))
        got[name] = losses(j(name + ".jsonl")) if p.returncode == 0 else []
    check(len(got["one"]) == 1 and got["one"] == got["dir"], f"the first step's loss, file and folder: {got}")
    print(f"sharded folder ({len(shard)} shards) initialises to the single file's bits; first loss {got['one']}")


def fused(mtc, mtrun, tmp):
    j = lambda *p: os.path.join(tmp, *p)
    pl = plan(mtc, tmp, "mixtral")
    p = run(mtrun, pl, "--steps", "2", "--export", j("hub"), "--log", j("l.jsonl"))
    check(p.returncode == 0, "train and export mixtral-tiny", p)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    sd = AutoModelForCausalLM.from_pretrained(j("hub"), dtype=torch.float32).state_dict()
    check("model.layers.0.mlp.experts.gate_up_proj" in sd and "model.layers.0.mlp.gate.weight" in sd
          and not any("block_sparse_moe" in k for k in sd), f"transformers 5 fuses the experts: {sorted(sd)[:8]}")
    save_file({k: v.contiguous() for k, v in sd.items()}, j("v5.safetensors"), metadata={"format": "pt"})
    p = run(mtrun, pl, "--steps", "0", "--init", j("v5.safetensors"), "--export", j("back.safetensors"),
            "--log", j("l.jsonl"))
    check(p.returncode == 0, "--init from the fused layout", p)
    if p.returncode == 0:
        a, b = read_safetensors(j("hub", "model.safetensors")), read_safetensors(j("back.safetensors"))
        check(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a),
              "the fused layout loads to the per-expert weights, bit for bit")
    bad = dict(sd)
    bad["model.layers.1.mlp.experts.gate_up_proj"] = sd["model.layers.1.mlp.experts.gate_up_proj"][:, :64].contiguous()
    save_file({k: v.contiguous() for k, v in bad.items()}, j("bad.safetensors"), metadata={"format": "pt"})
    p = run(mtrun, pl, "--steps", "0", "--init", j("bad.safetensors"), "--log", j("l.jsonl"))
    check(p.returncode == 1 and "model.layers.1.mlp.experts.gate_up_proj" in p.stderr and "[4, 64, 64]" in p.stderr,
          "a fused tensor of the wrong shape is refused, named with its shape", p)
    print("transformers 5's fused experts load to the Hub layout's bits")


def samples(mtc, mtrun, tmp):
    j = lambda *p: os.path.join(tmp, *p)
    pl = plan(mtc, tmp, "llama", batch=4)  # row 0 greedy, rows 1 and 2 the temperature samples
    outs = []
    for seed in ("1", "1", "2"):
        p = run(mtrun, pl, "--steps", "20", "--val-every", "10", "--sample-every", "10", "--seed", seed,
                "--log", j("l.jsonl"))
        lines = [l for l in p.stdout.splitlines() if l.startswith("sample ")]
        check(p.returncode == 0 and len(lines) == 6, f"--sample-every 10 over 20 steps prints 2 x 3 samples", p)
        outs.append(lines)
    first = outs[0]
    check(all(l.split(": ", 1)[0] in ("sample 10 greedy", "sample 10 temp 1", "sample 20 greedy", "sample 20 temp 1")
              for l in first), f"the samples are labelled by step and kind: {first[:2]}")
    text = "".join(l.split('" -> "', 1)[1] for l in first if '" -> "' in l)
    check(len(text) > 40 and sum(c.isalpha() or c == " " for c in text) > len(text) / 2,
          f"the samples are decoded text: {first[-3:]}")
    check(outs[0] == outs[1], "the same seed prints the same samples")
    check(outs[0] != outs[2], "another seed prints other samples")
    print("\n".join(first[-3:]))
    # the plan's forward against the reference executor, on the same weights
    env = dict(os.environ, MT_SAMPLE_REFERENCE="1")
    p = run(mtrun, pl, "--steps", "20", "--val-every", "10", "--sample-every", "10", "--seed", "1",
            "--log", j("l.jsonl"), env=env)
    ref = [l for l in p.stdout.splitlines() if l.startswith("sample ")]
    greedy = lambda ls: [l for l in ls if " greedy: " in l]
    check(p.returncode == 0 and len(greedy(first)) == 2 and greedy(ref) == greedy(first),
          f"the plan's forward samples the reference executor's greedy text: {greedy(ref)} vs {greedy(first)}", p)
    for dtype, extra in (("f32", []), ("bf16", []), ("f32", ["--tile", "4"])):
        out = os.path.join(tmp, f"l{dtype}{len(extra)}.bin")
        p = run(mtc, "examples/llama-tiny.mt", "--batch", "2", "--seq", "32", "--dtype", dtype, *extra, "-o", out)
        check(p.returncode == 0, f"mtc llama-tiny --dtype {dtype} {extra}", p)
        got = {}
        for how, e in (("plan", None), ("ref", env)):
            p = run(mtrun, out, "--steps", "3", "--logits", j(how), "--log", j("l.jsonl"), env=e)
            check(p.returncode == 0, f"{dtype} {extra} --logits through the {how}", p)
            got[how] = np.load(j(how + ".logits.npy")) if p.returncode == 0 else np.zeros(1)
        a, b = got["plan"], got["ref"]
        err = float(np.abs(a - b).max() / np.abs(b).max()) if a.shape == b.shape else 1.0
        check(err <= 1e-5, f"{dtype} {extra}: the plan's forward's logits equal the reference's: {err:.2e} relative")
        print(f"{dtype} {' '.join(extra)}: --logits through the plan's forward and the reference executor: {err:.2e}")


def checkpoint(mtc, mtrun, tmp):
    j = lambda *a: os.path.join(tmp, *a)
    pl = plan(mtc, tmp, "llama")
    common = ["--val-batches", "0", "--log", j("l.jsonl")]
    p = run(mtrun, pl, "--steps", "3", "--save", j("ck"), "--export", j("end.safetensors"), *common)
    check(p.returncode == 0, "3 steps, saved and exported", p)
    # a checkpoint exported after the fact, with nothing to train: the weights the run ended with, to the bit
    p = run(mtrun, pl, "--resume", j("ck"), "--steps", "0", "--export", j("after.safetensors"), *common)
    check(p.returncode == 0 and "nothing to train: the checkpoint is at step 3" in p.stdout
          and "done: nothing trained" in p.stdout and os.listdir(j("ck")) == ["step-000000003.ckpt"]
          and open(j("after.safetensors"), "rb").read() == open(j("end.safetensors"), "rb").read(),
          "--resume CKPT --steps 0 --export: the checkpoint's weights, the same bytes as the run's own export", p)
    # without --steps a resume runs to the end of the checkpoint's run: here nothing left, the export as it was
    p = run(mtrun, pl, "--resume", j("ck"), "--export", j("after2.safetensors"), *common)
    check(p.returncode == 0 and "to the end of the checkpoint's run, step 3" in p.stdout
          and open(j("after2.safetensors"), "rb").read() == open(j("end.safetensors"), "rb").read(),
          "--resume CKPT --export of a finished run: its weights, nothing trained", p)
    p = run(mtrun, pl, "--resume", j("ck"), "--steps", "3", *common)
    check(p.returncode == 1 and "--export PATH (with --steps 0) to write its weights" in p.stderr,
          "nothing to do, and nothing to export: refused, naming --export", p)
    # --init on a checkpoint (a file or its folder): what to run instead, not "header size ... runs past the end"
    for init in (j("ck", "step-000000003.ckpt"), j("ck")):
        p = run(mtrun, pl, "--init", init, "--steps", "1", *common)
        check(p.returncode == 1 and "an mt checkpoint" in p.stderr and "--resume" in p.stderr
              and "header size" not in p.stderr, f"--init {init}: a checkpoint, said", p)
    # a model tools/hf_to_mt.py wrote keeps its checkpoint's max_position_embeddings, not the training sequence
    src = j("hf")
    os.makedirs(src)
    with open(j("hf", "config.json"), "w") as f:
        json.dump({"model_type": "llama", "max_position_embeddings": 2048}, f)
    with open(j("m.mt"), "w") as f:
        f.write(f"# written by tools/hf_to_mt.py from {src}\n" + open("examples/llama-tiny.mt").read())
    p = run(mtc, j("m.mt"), "--batch", "2", "--seq", "32", "-o", j("m.bin"))
    check(p.returncode == 0, "mtc of a model file that names its checkpoint's folder", p)
    p = run(mtrun, j("m.bin"), "--steps", "1", "--data", "examples/data/tinyshakespeare.txt", "--init",
            j("end.safetensors"), "--export", j("out"), *common)
    config = json.load(open(j("out", "config.json"))) if p.returncode == 0 else {}
    check(config.get("max_position_embeddings") == 2048 and "max_position_embeddings 2048" in p.stdout,
          f"the export keeps the source's max_position_embeddings: {config.get('max_position_embeddings')}", p)


def main():
    mtc, mtrun, mode = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        {"transformers": transformers_, "shards": shards, "fused": fused, "samples": samples,
         "checkpoint": checkpoint}[mode](mtc, mtrun, tmp)
    sys.exit(finish(f"export {mode} checks"))


if __name__ == "__main__":
    main()
