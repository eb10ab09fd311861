#!/usr/bin/env python3
"""LoRA (mtc --lora) held to peft, and frozen parameters.

A tiny Llama (examples/llama-tiny.mt's shapes) with LoRA on q_proj and v_proj,
rank 4, alpha 8, starts from the same weights in mt and in torch with peft
(transformers' LlamaForCausalLM, peft's get_peft_model, its A and B written
into mt's --init file) and trains 5 steps of AdamW on the same byte rows:

- the 5 losses and the adapters' weights agree at the fp32 floor;
- every frozen base parameter comes back byte-identical (cpu backend);
- the PEFT export (--export DIR) loads with PeftModel.from_pretrained on the
  base model and gives mt's logits; the merged export (--export DIR --merge)
  loads with transformers alone and gives them too;
- `frozen` in the model file, and --freeze and --train alone: a frozen token table has no gradient in the
  graph, the plan trains as the reference executor does, and exactly the
  frozen tensors come back byte-identical;
- mtrun's host store holds a frozen parameter at its storage dtype only: its bytes allocated equal
  mtc --summary's host_bytes for a LoRA plan in f32 and bf16; the NVMe tier holds none of it, and trains
  as RAM does;
- mtc --lora and --freeze refuse what they cannot do, with exit status 1, and
  mtrun refuses an adapter export that would lose a trained parameter, or a
  routing bias its router's bias_update moves (tests/models/moe-router-tiny.mt
  with LoRA: refused by name before training; its FILE.safetensors export
  holds the biases, moved).

usage: check_lora.py MTC MTRUN
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file as load_st, save_file as save_st

from checks import check, finish

DATA = "examples/data/tinyshakespeare.txt"
B, T, STEPS, LR, WD = 4, 32, 5, 3e-3, 0.1
RANK, ALPHA = 4, 8
CONFIG = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
          "max_position_embeddings": 128, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1}


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def model_text():
    """llama-tiny.mt with a constant learning rate and no clipping, so that torch's AdamW is the same run."""
    text = open("examples/llama-tiny.mt").read()
    new = text.replace("schedule = cosine(warmup = 20, min_lr = 0.1)", "schedule = constant").replace(
        "clip = 1.0", "clip = 0")
    if "schedule = constant" not in new or "clip = 0" not in new:
        sys.exit("examples/llama-tiny.mt's train section no longer reads as check_lora.py rewrites it")
    return new


def peft_model():
    import transformers
    from peft import LoraConfig, get_peft_model
    transformers.logging.set_verbosity_error()
    cfg = transformers.LlamaConfig(**CONFIG)
    torch.manual_seed(11)
    base = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        for name, p in base.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if p.dim() == 1 else 0.1 * torch.randn_like(p))
    base_state = {k: v.detach().clone() for k, v in base.state_dict().items()}
    lcfg = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    return get_peft_model(base, lcfg), base_state


def mt_name(peft_name):
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight -> mt's checkpoint name."""
    return peft_name.removeprefix("base_model.model.").replace(".default.", ".")


def rows(step):
    """mtrun's training batch of a step (1-based): B rows of T+1 bytes, each T after the one before."""
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    at = (step - 1) * B * T
    x = np.stack([raw[at + b * T: at + b * T + T + 1] for b in range(B)])
    return torch.tensor(x[:, :-1]), torch.tensor(x[:, 1:])


def torch_train(model):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=WD)
    losses = []
    for step in range(1, STEPS + 1):
        x, y = rows(step)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def refusals(mtc, model):
    for flags, says in [(["--lora", "rank=4,targets=nope_proj"], "names no weight"),
                        (["--freeze", "*"], "nothing to train"),
                        (["--freeze", "no.such.*"], "names no parameter"),
                        (["--lora", "rank=0,targets=q_proj"], "rank=")]:
        p = run(mtc, model, *flags)
        want = 2 if says == "rank=" else 1
        check(p.returncode == want and says in p.stderr, f"mtc {' '.join(flags)}: exit {p.returncode}, want {want} "
              f"and '{says}'", p)
    # GPT-2's Conv1D weights multiply as stored: LoRA refuses them, at the use, with the line and a caret
    p = run(mtc, "examples/gpt2-tiny.mt", "--lora", "rank=2,targets=c_attn")
    check(p.returncode == 1 and "examples/gpt2-tiny.mt:" in p.stderr and "is used here other than as x @ transpose"
          in p.stderr and "^" in p.stderr, "mtc gpt2-tiny --lora targets=c_attn", p)


def frozen_embedding(mtc, mtrun, model, init_path, tmp):
    """--freeze on the token table of a plan with no LoRA (and --train giving one norm back after a --freeze
    '*norm*'): no scatter-add for it in the graph, the plan trains as the reference executor does, and the
    frozen tensors come back byte-identical while every trained one moved."""
    flags = ["--freeze", "*embed_tokens*", "--freeze", "*norm*", "--train", "model.norm.weight"]
    p = run(mtc, model, *flags, "--batch", B, "--seq", T, "--dtype", "f32", "--target", "tiny-2layers", "--dump-graph")
    if check(p.returncode == 0, "mtc --freeze --dump-graph", p):
        check("embed_bwd" not in p.stdout, "a frozen token table still gets embed_bwd (its gradient)")
    plan = os.path.join(tmp, "frozen.bin")
    p = run(mtc, model, *flags, "--batch", B, "--seq", T, "--dtype", "f32", "--target", "tiny-2layers", "-o", plan)
    if not check(p.returncode == 0, "mtc --freeze", p):
        return
    base = {k: v for k, v in load_st(init_path).items() if "lora_" not in k}
    plain = os.path.join(tmp, "plain.safetensors")
    save_st(base, plain)
    losses = {}
    for mode in ("plan", "reference"):
        log, out = os.path.join(tmp, f"f-{mode}.jsonl"), os.path.join(tmp, f"f-{mode}.safetensors")
        extra = ["--reference"] if mode == "reference" else []
        p = run(mtrun, plan, "--steps", 3, "--data", DATA, "--init", plain, "--no-save", "--val-every", 100,
                "--val-batches", 1, "--device", "cpu", "--log", log, "--export", out, *extra)
        if not check(p.returncode == 0, f"mtrun --freeze ({mode})", p):
            return
        losses[mode] = [json.loads(l)["loss"] for l in open(log) if '"loss"' in l and "val_loss" not in l]
        got = load_st(out)
        for k, v in base.items():
            same = got[k].numpy().tobytes() == v.numpy().tobytes()
            frozen = "embed_tokens" in k or ("norm" in k and k != "model.norm.weight")
            check(same == frozen, f"--freeze ({mode}): {k} {'changed' if frozen else 'did not train'}")
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses["plan"], losses["reference"]))
    check(len(losses["plan"]) == 3 and worst < 1e-5, f"--freeze: the plan's losses {losses['plan']} are not the "
          f"reference executor's {losses['reference']}")


def store_bytes(mtc, mtrun, model, tmp):
    """mtrun's host store holds a frozen parameter at its storage dtype only (no fp32 master, moments or
    gradients): the bytes its banner says it allocated equal mtc --summary's host_bytes, in f32 and bf16."""
    for dtype in ("f32", "bf16"):
        flags = [model, "--lora", f"rank={RANK},alpha={ALPHA},targets=q_proj,v_proj", "--batch", B, "--seq", T,
                 "--dtype", dtype, "--target", "tiny-2layers"]
        p = run(mtc, *flags, "--summary", "--json")
        if not check(p.returncode == 0, f"mtc --summary --json ({dtype})", p):
            continue
        want = json.loads(p.stdout)["host_bytes"]
        plan = os.path.join(tmp, f"bytes-{dtype}.bin")
        p = run(mtc, *flags, "-o", plan)
        if not check(p.returncode == 0, f"mtc --lora ({dtype})", p):
            continue
        p = run(mtrun, plan, "--data", DATA, "--steps", 1, "--no-save", "--log", os.path.join(tmp, f"bytes-{dtype}.jsonl"))
        got = [l for l in p.stdout.splitlines() if "bytes allocated" in l]
        check(p.returncode == 0 and len(got) == 1 and f"({want} bytes allocated" in got[0],
              f"{dtype}: mtrun's host store is not mtc's host_bytes ({want}) for a LoRA plan: {got}", p)


def tier_frozen(mtc, mtrun, model, tmp):
    """The NVMe tier (--tier-dir) holds no frozen parameter's moments or master: a LoRA plan's tier file holds
    the adapters' moments only (16 KB, not main's 0.75 MB), and 4 steps with the tier, and with a frozen k_proj
    under tier=master (tests/tiny-tier-master.target), lose what they lose in RAM, bit for bit."""
    l8 = os.path.join(tmp, "l8.mt")
    text = open(model).read().replace("  L = 2                # layers", "  L = 8                # layers")
    if not check("L = 8" in text, "check_lora.py's 8-layer rewrite of llama-tiny no longer applies"):
        return
    open(l8, "w").write(text)
    for name, flags, most in (
            ("lora", [model, "--lora", f"rank={RANK},alpha={ALPHA},targets=q_proj,v_proj", "--batch", B, "--seq", T,
                      "--dtype", "bf16", "--target", "tiny-2layers"], 0.05),
            ("master", [l8, "--freeze", "*k_proj*", "--dtype", "bf16", "--target", "tests/tiny-tier-master.target"],
             None)):
        plan = os.path.join(tmp, f"tier-{name}.bin")
        p = run(mtc, *flags, "-o", plan)
        if not check(p.returncode == 0, f"mtc ({name})", p):
            continue
        losses = {}
        for where in ("ram", "tier"):
            d = os.path.join(tmp, f"tier-{name}-{where}")
            os.makedirs(d)
            p = run(mtrun, plan, "--data", DATA, "--steps", 4, "--no-save", "--log", d + ".jsonl",
                    *(["--tier-dir", d] if where == "tier" else []))
            if not check(p.returncode == 0, f"{name}: mtrun in {where}", p):
                break
            losses[where] = [l.split("tok/s")[0].rsplit(" ", 2)[0] for l in p.stdout.splitlines() if "/4  loss" in l]
            tier = [l for l in p.stdout.splitlines() if l.startswith("  tier ")]
            if where == "tier":
                check(len(tier) == 1 and ("tier=master" in p.stdout) == (name == "master"), f"{name}: {tier}", p)
            if where == "tier" and most and tier:
                mb = float(tier[0].split(" MB (scratch")[0].rsplit(" ", 1)[1])
                check(mb < most, f"{name}: the tier file is {mb} MB, holding frozen parameters' moments")
        else:
            check(len(losses["ram"]) == 4 and losses["ram"] == losses["tier"],
                  f"{name}: the tier's losses {losses['tier']} are not RAM's {losses['ram']}")


def dsl_frozen(mtc, tmp):
    """`frozen` in the model file: the param is frozen (--summary counts it at 4 bytes); --train trains it again;
    a model all of whose params are frozen is refused."""
    text = model_text()
    marked = text.replace('param lm_head "lm_head.weight" [V, C]', 'param lm_head "lm_head.weight" [V, C] frozen')
    path = os.path.join(tmp, "marked.mt")
    open(path, "w").write(marked)
    check(marked != text, "examples/llama-tiny.mt's lm_head no longer reads as check_lora.py marks it")
    p = run(mtc, path, "--summary")
    check(p.returncode == 0 and "of them frozen (no gradient, moments or master): 16,384 elements at 4 B/param"
          in p.stdout, "mtc --summary of a model with `frozen` on lm_head", p)
    p = run(mtc, path, "--train", "lm_head", "--summary")
    check(p.returncode == 0 and "frozen" not in p.stdout, "mtc --train lm_head of a model that marks it frozen", p)
    p = run(mtc, path, "--freeze", "*")
    check(p.returncode == 1 and "nothing to train" in p.stderr, "mtc --freeze '*'", p)


def adapter_refusal(mtc, mtrun, model, tmp):
    """A LoRA plan that trains a norm too: --export DIR (the PEFT adapter) would lose it, refused before training."""
    plan = os.path.join(tmp, "lora-norm.bin")
    p = run(mtc, model, "--lora", "rank=2,targets=q_proj", "--train", "model.norm.weight", "--batch", B, "--seq", T,
            "--target", "tiny-2layers", "-o", plan)
    if not check(p.returncode == 0, "mtc --lora --train", p):
        return
    p = run(mtrun, plan, "--steps", 1, "--data", DATA, "--no-save", "--device", "cpu", "--log",
            os.path.join(tmp, "r.jsonl"), "--export", os.path.join(tmp, "lost"))
    check(p.returncode == 1 and "would be lost" in p.stderr and "step      1" not in p.stdout,
          "mtrun --export DIR of a LoRA plan that trains a norm: not refused before training", p)
    moved_bias_refusal(mtc, mtrun, tmp)
    adapter_without_config(mtc, mtrun, tmp)


def adapter_without_config(mtc, mtrun, tmp):
    """A LoRA plan of a model mt cannot describe as a config.json (tests/models/sinks-tiny.mt): --export DIR writes
    the PEFT adapter, which has no config.json, so it is not refused for want of one; --merge, which writes the
    whole model with its config.json, is."""
    plan, out = os.path.join(tmp, "lora-sinks.bin"), os.path.join(tmp, "sinks-adapter")
    p = run(mtc, "tests/models/sinks-tiny.mt", "--lora", "rank=2,targets=q_proj", "--batch", 1, "--seq", 16,
            "--target", "tiny-2layers", "-o", plan)
    if not check(p.returncode == 0, "mtc --lora of sinks-tiny", p):
        return
    common = ["--steps", 1, "--data", DATA, "--no-save", "--device", "cpu", "--log", os.path.join(tmp, "s.jsonl")]
    p = run(mtrun, plan, *common, "--export", out)
    ok = check(p.returncode == 0 and os.path.exists(os.path.join(out, "adapter_model.safetensors")),
               "mtrun --export DIR of a LoRA plan of a model without a config.json: no PEFT adapter", p)
    p = run(mtrun, plan, *common, "--export", out + "-merged", "--merge")
    ok &= check(p.returncode == 1 and "config.json" in p.stderr and "step      1" not in p.stdout,
                "mtrun --export DIR --merge of that plan: not refused for its config.json before training", p)
    if ok:
        print("LoRA of a model without a config.json: the adapter folder written, --merge refused by name")


def moved_bias_refusal(mtc, mtrun, tmp):
    """A LoRA plan of a router whose bias_update moves its routing bias (tests/models/moe-router-tiny.mt): the PEFT
    adapter cannot carry the moved buffer, so --export DIR is refused before training, naming it; a
    FILE.safetensors export holds it, moved from where it started."""
    plan, st = os.path.join(tmp, "lora-router.bin"), os.path.join(tmp, "router.safetensors")
    p = run(mtc, "tests/models/moe-router-tiny.mt", "--lora", "rank=2,targets=q_proj", "--batch", 1, "--seq", 16,
            "--target", "tiny-2layers", "-o", plan)
    if not check(p.returncode == 0, "mtc --lora of moe-router-tiny", p):
        return
    common = ["--data", DATA, "--no-save", "--device", "cpu", "--log", os.path.join(tmp, "b.jsonl")]
    p = run(mtrun, plan, "--steps", 1, *common, "--export", os.path.join(tmp, "lost-bias"))
    check(p.returncode == 1 and "'e_bias'" in p.stderr and "balance rule" in p.stderr and "--merge" in p.stderr
          and "step      1" not in p.stdout and not os.path.exists(os.path.join(tmp, "lost-bias")),
          "mtrun --export DIR of a LoRA plan whose router moves its bias: not refused by name before training", p)
    biases = []
    for steps in (0, 2):
        p = run(mtrun, plan, "--steps", steps, *common, "--export", st)
        if check(p.returncode == 0, f"mtrun --steps {steps} --export FILE.safetensors of that plan", p):
            biases.append({k: v for k, v in load_st(st).items() if k.endswith("e_score_correction_bias")})
    check(len(biases) == 2 and len(biases[0]) == 2 and
          all(not torch.equal(biases[0][k], biases[1][k]) for k in biases[0]),
          f"the FILE.safetensors export lacks the moved biases: {biases}")
    print(f"LoRA with a moved routing bias: --export DIR refused by name; the file export holds "
          f"{sorted(biases[0]) if biases else []}, moved")


def explain_405b(mtc):
    """--explain of llama3-405b with LoRA on h200: host memory near 2 bytes a base parameter, no NVMe tier."""
    p = run(mtc, "examples/llama3-405b.mt", "--target", "h200", "--lora", "rank=16,targets=q_proj,v_proj",
            "--summary", "--json")
    if not check(p.returncode == 0, "mtc llama3-405b --lora --summary --json", p):
        return
    s = json.loads(p.stdout)
    per = s["host_bytes"] / s["params_total"]
    check(1.99 < per < 2.1, f"llama3-405b with LoRA: {per:.3f} host bytes a parameter, want about 2")
    # (--remat layer --tile 1: one remat's search, seconds rather than minutes; the store is the same for all)
    p = run(mtc, "examples/llama3-405b.mt", "--target", "h200", "--lora", "rank=16,targets=q_proj,v_proj",
            "--explain", "--remat", "layer", "--tile", "1", timeout=600)
    if check(p.returncode == 0, "mtc llama3-405b --lora --explain", p):
        store = [l for l in p.stdout.splitlines() if l.startswith("  host store:")]
        check(len(store) == 1 and "all in RAM (813.3 GB of 1500)" in store[0] and "NVMe" not in p.stdout,
              "llama3-405b with LoRA on h200: the host store is not 813.3 GB all in RAM", p)
        check("frozen: 405.9 G parameters at 2 bytes each" in p.stdout, "--explain does not say the frozen bytes", p)


def main():
    mtc, mtrun = sys.argv[1:3]
    from safetensors.torch import save_file, load_file
    from peft import PeftModel
    import transformers
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny.mt")
        open(model, "w").write(model_text())
        refusals(mtc, model)
        peft, base_state = peft_model()
        init = {k: v.contiguous() for k, v in base_state.items()}
        for name, p in peft.named_parameters():
            if "lora_" in name:
                init[mt_name(name)] = p.detach().clone().contiguous()
        init_path = os.path.join(tmp, "init.safetensors")
        save_file(init, init_path)
        want = torch_train(peft)

        plan = os.path.join(tmp, "lora.bin")
        p = run(mtc, model, "--lora", f"rank={RANK},alpha={ALPHA},targets=q_proj,v_proj", "--batch", B, "--seq", T,
                "--dtype", "f32", "--target", "tiny-2layers", "-o", plan)
        if not check(p.returncode == 0, "mtc --lora", p):
            return finish()
        log, out, adapter, merged, lg = (os.path.join(tmp, n) for n in ("m.jsonl", "out.safetensors", "adapter",
                                                                         "merged", "lg"))
        common = ["--steps", STEPS, "--data", DATA, "--init", init_path, "--no-save", "--val-every", 100,
                  "--val-batches", 1, "--device", "cpu"]
        p = run(mtrun, plan, *common, "--log", log, "--export", out, "--logits", lg)
        if not check(p.returncode == 0, "mtrun of the LoRA plan", p):
            return finish()
        got = [json.loads(l)["loss"] for l in open(log) if '"loss"' in l and "val_loss" not in l]
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, want)) if len(got) == STEPS else float("inf")
        print(f"losses: mt {got}\n        peft {want}\n        worst relative difference {worst:.2e}")
        check(worst < 2e-6, f"mt's LoRA losses differ from peft's by {worst:.2e} (relative)")

        trained = load_file(out)
        peft_state = {mt_name(k): v for k, v in peft.named_parameters() if "lora_" in k}
        worst_w = max(rel(trained[k].numpy(), v.detach().numpy()) for k, v in peft_state.items())
        print(f"adapters: worst relative difference {worst_w:.2e} over {len(peft_state)} tensors")
        check(worst_w < 1e-5, f"mt's LoRA adapters differ from peft's by {worst_w:.2e}")
        for k, v in base_state.items():
            check(trained[k].numpy().tobytes() == v.numpy().tobytes(), f"frozen {k} changed in training")

        # the PEFT export on the base model, and the merged export alone, against mt's logits
        tokens, logits = np.load(lg + ".tokens.npy"), np.load(lg + ".logits.npy")
        for extra, folder in (([], adapter), (["--merge"], merged)):
            p = run(mtrun, plan, *common, "--log", os.path.join(tmp, "e.jsonl"), "--export", folder, *extra)
            check(p.returncode == 0, f"mtrun --export {' '.join(extra)}", p)
        cfg = transformers.LlamaConfig(**CONFIG)
        base = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
        base.load_state_dict(base_state)
        loaded = PeftModel.from_pretrained(base, adapter).eval()
        full = transformers.AutoModelForCausalLM.from_pretrained(merged, attn_implementation="eager",
                                                                 dtype=torch.float32).eval()
        with torch.no_grad():
            x = torch.tensor(tokens, dtype=torch.long)
            for what, m in (("peft's PeftModel on the PEFT export", loaded), ("the merged export", full)):
                e = rel(m(input_ids=x).logits.numpy(), logits)
                print(f"{what}: logits within {e:.2e} of mt's")
                check(e < 1e-5, f"{what}: logits differ from mt's by {e:.2e}")
        frozen_embedding(mtc, mtrun, model, init_path, tmp)
        adapter_refusal(mtc, mtrun, model, tmp)
        dsl_frozen(mtc, tmp)
        store_bytes(mtc, mtrun, model, tmp)
        tier_frozen(mtc, mtrun, model, tmp)
    explain_405b(mtc)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
