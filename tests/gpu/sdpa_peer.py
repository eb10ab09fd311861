#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention, forward plus backward, at the
shapes gpu_check times mt's attention (B 1, H 32, KVH 8, causal, bf16), on
each backend that runs: flash, cuDNN, memory-efficient (and the math one on
the CPU). tests/gpu/run.sh runs it on the GPU beside gpu_check, so that mt's
attention has a ratio against a peer measured on the same card in the same
session; the suite runs it on the CPU at tiny shapes (sdpa_peer_cpu).

usage: sdpa_peer.py [--device cuda|cpu] [--D 64,128,256] [--T 2048,...,16384]
                    [--B 1] [--H 32] [--KVH 8] [--reps N] [--check-T N]
                    [--deadline S] [--perturb X] [--expand]

Each backend is first checked at T --check-T (512) against a float64 reference
on the same inputs (forward y and dq, dk, dv, normwise relative error under
2e-2 in bf16, 1e-5 in f32); a backend that fails is reported and not timed.
It is then timed warmed (two rounds), over --reps rounds, the median, with
CUDA events on a GPU (the host clock on the CPU). One line a shape and
backend:

  attention_time kernel=sdpa_flash D=128 T=4096 B=1 H=32 KVH=8 causal=1 ms=1.234 tflops=...

(FLOPs counted as compiler/schedule/cost.c and gpu_check count them: 4 B H D a
visible pair forward, 2.5 times that backward.) A backend that takes no
grouped heads runs with the key and value heads repeated, and its kernel
name says so (sdpa_cudnn+expand); one that cannot run a shape says
`attention_skip kernel=... D= T= reason=...`. Shapes left when
--deadline seconds have passed are skipped with a line saying so.
--perturb X scales the timed backends' outputs by 1+X before the check (a
test that the check can fail); --expand takes the repeated-heads path on
every backend (a test of that path). Exit status 0 when every backend that ran
passed its check, 1 otherwise.
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
            ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION), ("sdpa_math", SDPBackend.MATH)]


def inputs(B, H, KVH, T, D, dtype, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    mk = lambda h: torch.randn(B, h, T, D, generator=g).to(device=device, dtype=dtype)  # (B, h, T, D)
    return mk(H), mk(KVH), mk(KVH), mk(H)  # q, k, v, dy


def fwd_bwd(backend, q, k, v, dy, scale_out=1.0, expand=False):
    """y and the gradients of q, k, v for the upstream gradient dy. With
    expand, the key and value heads are repeated to the query heads first
    (inside the autograd graph) for a backend that takes no grouped heads."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    kk, vv = k, v
    if expand:
        rep = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    with sdpa_kernel(backend):
        y = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=not expand) * scale_out
    y.backward(dy)
    return y.detach(), q.grad, k.grad, v.grad


def reference(q, k, v, dy):
    """Plain attention in float64 on the CPU: softmax(q k^T / sqrt(D) + causal mask) v."""
    q, k, v, dy = (t.detach().double().cpu() for t in (q, k, v, dy))
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    rep = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)  # (B, H, T, D)
    T = q.shape[2]
    s = q @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = torch.softmax(s, -1) @ vv
    y.backward(dy)
    return y.detach(), q.grad, k.grad, v.grad


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm())


def time_ms(backend, q, k, v, dy, reps, device, expand):
    times = []
    for i in range(reps + 2):  # two warm-up rounds
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fwd_bwd(backend, q, k, v, dy, expand=expand)
            b.record()
            torch.cuda.synchronize()
            ms = a.elapsed_time(b)
        else:
            t0 = time.perf_counter()
            fwd_bwd(backend, q, k, v, dy, expand=expand)
            ms = (time.perf_counter() - t0) * 1e3
        if i >= 2:
            times.append(ms)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--D", default="64,128,256")
    ap.add_argument("--T", default="2048,4096,8192,16384")
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=32)
    ap.add_argument("--KVH", type=int, default=8)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--check-T", type=int, default=512, help="the length of the check against float64")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds from start after which shapes are skipped")
    ap.add_argument("--perturb", type=float, default=0.0)
    ap.add_argument("--expand", action="store_true", help="repeat the key and value heads for every backend")
    a = ap.parse_args()
    t_start = time.monotonic()
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("sdpa_peer: no CUDA device", file=sys.stderr)
        return 1
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    Ds = [int(x) for x in a.D.split(",")]
    Ts = sorted(int(x) for x in a.T.split(","))
    names = [n for n, _ in BACKENDS if dev == "cpu" or n != "sdpa_math"]  # math on a GPU: materialises T x T
    print(f"sdpa_peer: torch {torch.__version__}, {torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}, "
          f"{dtype}, B {a.B} H {a.H}/{a.KVH} causal; backends {', '.join(names)}")
    failed = 0
    for D in Ds:
        ok = {}
        Tc = min(a.check_T, min(Ts))
        q, k, v, dy = inputs(a.B, a.H, a.KVH, Tc, D, dtype, dev, D)
        ref = reference(q, k, v, dy)
        for name, be in BACKENDS:
            if name not in names:
                continue
            got, why = None, ""
            for expand in (True,) if a.expand else (False, True):  # grouped heads as they are, else repeated
                try:
                    got = fwd_bwd(be, q, k, v, dy, 1.0 + a.perturb, expand)
                    break
                except RuntimeError as e:  # this backend cannot run this shape here
                    why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            if got is None:
                print(f"attention_skip kernel={name} D={D} T={Tc} reason={why!r}")
                continue
            err = max(rel(x, r) for x, r in zip(got, ref))
            if err <= tol:
                ok[name] = expand
            print(f"attention_check kernel={name}{'+expand' if expand else ''} D={D} T={Tc} rel_err={err:.2e} "
                  f"tol={tol:g} {'ok' if err <= tol else 'FAIL'}")
            failed += err > tol
        del ref
        for T in Ts:
            if time.monotonic() - t_start > a.deadline:
                print(f"attention_skip D={D} T={T} reason='deadline of {a.deadline:.0f} s passed'")
                continue
            q, k, v, dy = inputs(a.B, a.H, a.KVH, T, D, dtype, dev, T + D)
            flops = 4 * 0.5 * T * T * a.B * a.H * D * 3.5
            for name, be in BACKENDS:
                if name not in ok:
                    continue
                kernel = name + ("+expand" if ok[name] else "")
                try:
                    ms = time_ms(be, q, k, v, dy, a.reps, dev, ok[name])
                except RuntimeError as e:
                    print(f"attention_skip kernel={kernel} D={D} T={T} reason={str(e).splitlines()[0][:120]!r}")
                    continue
                print(f"attention_time kernel={kernel} D={D} T={T} B={a.B} H={a.H} KVH={a.KVH} causal=1 "
                      f"ms={ms:.4f} tflops={flops / ms / 1e9:.1f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
