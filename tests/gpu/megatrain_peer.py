#!/usr/bin/env python3
"""MegaTrain's own code (github.com/DLYuanGod/MegaTrain, its `infinity`
package, carried to the GPU machine by tests/gpu/prebuild.sh and never part
of this repository) training Llama 3.2 1B at mt's batch and sequence, so
that mt's tokens/s has a ratio against a peer measured in the same session.

usage: megatrain_peer.py --megatrain DIR [--batch 16] [--seq 4096] [--steps 4]
                         [--layers N] [--dry-run]

DIR holds the `infinity` package. The step is MegaTrain's examples/sft/
train.py loop, offline: the model is transformers' LlamaForCausalLM built
from Llama 3.2 1B's published configuration (written below: nothing is
downloaded; random weights, bf16 on the CPU as train.py loads them), wrapped
in infinity's CPUMasterModel with train.py's defaults (checkpoint every 4
layers, 12 gradient slabs, PyTorch's expandable segments); each step is
forward_and_backward on random tokens (every label counted), gradient
clipping at 1.0, the optimizer,
_sync_params_to_gpu and zero_grad, timed with the host clock as train.py
times it. What the lent image lacks of MegaTrain's requirements, and what
runs instead (as train.py itself falls back): flash-attn (so
attn_implementation "sdpa", PyTorch's flash or cuDNN kernel) and DeepSpeed
(so torch.optim.AdamW on the CPU instead of DeepSpeedCPUAdam; MegaTrain's
paper used DeepSpeed's). One line a step:

  megatrain_step step=1 s=3.21 tokens_per_s=20415 loss=11.93

--layers N makes the model N layers at width 64; --dry-run builds the
configurations and the model, prints the launch and stops. The suite runs
the steps on the CPU at --layers 2 with a stand-in for the infinity package
(tests/gpu/fixture/megatrain_stub: megatrain_peer_stub). Exit status 0 when
every step ran.
"""
import argparse
import os
import sys
import time

# Llama 3.2 1B (meta-llama/Llama-3.2-1B's config.json), as examples/llama3.2-1b.mt
LLAMA32_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                  rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, hidden_act="silu",
                  rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                  bos_token_id=128000, eos_token_id=128001)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatrain", required=True, help="the folder holding MegaTrain's infinity package")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--layers", type=int, default=0, help="a smaller model (width 64) of this many layers")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.megatrain, "infinity")):
        print(f"megatrain_peer: {a.megatrain}: no infinity package here (tests/gpu/prebuild.sh carries it)",
              file=sys.stderr)
        return 1
    sys.dont_write_bytecode = True  # no __pycache__ beside the package (the source tree's stand-in too)
    sys.path.insert(0, os.path.abspath(a.megatrain))
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # as train.py sets it
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from infinity import CPUMasterModel, CPUMasterConfig

    cfg = dict(LLAMA32_1B)
    if a.layers:
        cfg.update(num_hidden_layers=a.layers, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, vocab_size=512, bos_token_id=1, eos_token_id=2)
    mcfg = LlamaConfig(**cfg)
    mcfg._attn_implementation = "sdpa"
    # train.py's defaults; dataset_path only satisfies the config's check (no dataset is read)
    tcfg = CPUMasterConfig(model_name="llama3.2-1b (local config, random weights)", dataset_path="random-tokens",
                           batch_size=a.batch, max_seq_len=a.seq, num_steps=a.steps, learning_rate=1e-5,
                           attn_implementation="sdpa", checkpoint_interval=4, num_grad_slabs=12,
                           dtype=torch.bfloat16, trust_remote_code=False)
    print(f"megatrain_peer: torch {torch.__version__}; Llama {cfg['num_hidden_layers']} layers x "
          f"{cfg['hidden_size']}, batch {a.batch} x seq {a.seq}, attention sdpa, optimizer torch AdamW (CPU), "
          f"checkpoint every {tcfg.checkpoint_interval}, {tcfg.num_grad_slabs} gradient slabs", flush=True)
    t0 = time.perf_counter()
    torch.manual_seed(tcfg.seed)
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 (as train.py loads it), not f32 then cast
    with torch.device("cpu"):
        hf = LlamaForCausalLM(mcfg)
    torch.set_default_dtype(torch.float32)
    n = sum(p.numel() for p in hf.parameters())
    print(f"megatrain_peer: model built in {time.perf_counter() - t0:.1f} s, {n} parameters", flush=True)
    if a.dry_run:
        print("megatrain_peer: dry run: CPUMasterModel(hf, config), then per step forward_and_backward, "
              "clip_grad_norm_(1.0), AdamW.step, _sync_params_to_gpu, zero_grad")
        return 0
    t0 = time.perf_counter()
    model = CPUMasterModel(hf, tcfg)
    del hf
    params = model.get_parameters()
    opt = torch.optim.AdamW(params, lr=tcfg.learning_rate, betas=(tcfg.beta1, tcfg.beta2), eps=tcfg.eps,
                            weight_decay=tcfg.weight_decay)
    print(f"megatrain_peer: CPUMasterModel ready in {time.perf_counter() - t0:.1f} s", flush=True)
    g = torch.Generator().manual_seed(1)
    for step in range(1, a.steps + 1):
        ids = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq), generator=g)
        mask = torch.ones_like(ids)
        t0 = time.perf_counter()
        loss, _, timing = model.forward_and_backward(ids, mask, ids.clone())
        torch.nn.utils.clip_grad_norm_(params, tcfg.max_grad_norm)
        opt.step()
        model._sync_params_to_gpu()
        model.zero_grad()
        opt.zero_grad()
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        print(f"megatrain_step step={step} s={s:.3f} tokens_per_s={a.batch * a.seq / s:.0f} loss={loss:.4f} "
              f"fwd_s={timing['forward']:.3f} bwd_s={timing['backward']:.3f} "
              f"peak_gb={torch.cuda.max_memory_allocated() / 1e9 if cuda else 0:.2f}", flush=True)
    model.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
