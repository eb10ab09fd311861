#!/usr/bin/env python3
"""bench/sass_table.py: the static table of the attention kernels' SASS.

    bench/sass_table.py EMU_CHECK [--out FILE] [--check FILE] [--bin DIR]

EMU_CHECK is the build's tests/emu_check: `emu_check --nvrtc DIR` compiles
every attention kernel a plan can run (compiler/emit/cuda/attention_tc.cuh at
head sizes 64, 128, 256 and 192/128, causal and full, with and without the
options; attention.cuh, the fallback, at 64, 128 and 256) with NVRTC for
sm_90 as mtc does, and writes the cubin and each entry point's launch
(threads, dynamic shared memory). This script reads the cubin with NVIDIA's
cuobjdump (registers, static shared and local memory) and nvdisasm (the
SASS), and prints the table (bench/ATTENTION_SASS.md is its output), or
writes it to FILE (--out), or fails when FILE differs from it (--check; exit
status 3, with a line saying so, when FILE was made by another NVRTC).

The columns, per entry point:
  loop instrs   instructions in its inner loop: the loop (a backward branch
                and the code from its target to it) holding the most matrix
                instructions (the fp32 template, none: the most shared
                loads), the shortest of those
  HMMA, LDSM, LDS, LDG, LDGSTS  matrix instructions, ldmatrix, other shared
                loads, global loads and cp.async copies in it
  ldsm/mma      LDSM / HMMA: ldmatrix per matrix instruction (the issue's
                0.5 / 0.67 / 0.75 at D 128)
  lds/mma       (LDSM + LDS) / HMMA: all shared loads per matrix instruction
  regs          registers a thread
  spills        local loads and stores (LDL, STL) in the whole kernel, with
                its local memory bytes: both 0 when nothing spills
  warps/SM      resident warps an SM on sm_90 (65536 registers, allocated in
                256 a warp; 228 KiB of shared memory, 1 KiB of it reserved a
                block; at most 64 warps and 32 blocks)
The cuobjdump and nvdisasm come from PyPI (pip install nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm) or the toolkit; --bin DIR names where they are.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Kernels known to spill, and why: the check fails on any other. attention.cuh's fp32 bwd_dkdv keeps a
# key's dk and dv rows (2 x 256 floats at D 256) across a warp's lanes in registers: 255 and spilling
# (f32 plans, or bf16 ones at head sizes the tensor cores do not take, at D 256).
KNOWN_SPILLS = {"mt_attn_bwd_dkdv_f32_d256_causal", "mt_attn_bwd_dkdv_bf16_d256_causal"}
SM90 = {"regs": 65536, "reg_unit": 256, "warps": 64, "blocks": 32, "smem": 228 * 1024, "smem_reserved": 1024}


def tool(name, bindir):
    """The path of NVIDIA's tool name: in bindir, on PATH, in the PyPI wheel, in /usr/local/cuda."""
    cands = [os.path.join(bindir, name)] if bindir else []
    on_path = shutil.which(name)
    if on_path:
        cands.append(on_path)
    try:
        import nvidia  # the wheels' namespace package

        for base in nvidia.__path__:
            for sub in ("cu13", "cu12", "cuda_cuobjdump", "cuda_nvdisasm"):
                cands.append(os.path.join(base, sub, "bin", name))
    except ImportError:
        pass
    cands.append(os.path.join("/usr/local/cuda/bin", name))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit(f"sass_table: no {name} found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or --bin DIR)")


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"sass_table: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return p.stdout


def resources(cuobjdump, cubin):
    """{function: {REG, SHARED, LOCAL, STACK}} from cuobjdump -res-usage."""
    out, fn = {}, None
    for line in run([cuobjdump, "-res-usage", cubin]).splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            fn = m.group(1)
            continue
        if fn and "REG:" in line:
            out[fn] = {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", line)}
            fn = None
    return out


INSTR = re.compile(r"/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*);")


def functions(nvdisasm, cubin):
    """{function: (instructions [(addr, opcode, operands)], labels {name: addr})}."""
    out, fn, ins, labels, pending = {}, None, [], {}, []
    for line in run([nvdisasm, "-c", cubin]).splitlines():
        m = re.match(r"\s*\.section\s+\.text\.(\S+?),", line)
        if m:
            fn, ins, labels, pending = m.group(1), [], {}, []
            out[fn] = (ins, labels)
            continue
        if fn is None:
            continue
        m = re.match(r"(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = INSTR.search(line)
        if m:
            addr = int(m.group(1), 16)
            for lab in pending:
                labels[lab] = addr
            pending = []
            ins.append((addr, m.group(2), m.group(3)))
    return out


def is_mma(op):
    return op.startswith("HMMA")


def is_lds(op):
    return op.startswith("LDS") and not op.startswith("LDSM")


def inner_loop(ins, labels):
    """The instructions of the loop with the most matrix instructions (then shared loads; the shortest of
    those), or []."""
    best = None
    index = {a: i for i, (a, _, _) in enumerate(ins)}
    for i, (addr, op, rest) in enumerate(ins):
        if not op.startswith("BRA"):
            continue
        m = re.search(r"\((\.L_x_\d+)\)", rest)
        if not m or m.group(1) not in labels or labels[m.group(1)] > addr:
            continue
        body = ins[index[labels[m.group(1)]] : i + 1]
        if len(body) < 2:  # the trap's jump to itself
            continue
        key = (sum(is_mma(o) for _, o, _ in body), sum(o.startswith("LDS") for _, o, _ in body), -len(body))
        if best is None or key > best[0]:
            best = (key, body)
    return best[1] if best else []


def warps_per_sm(regs, threads, smem):
    warps_block = (threads + 31) // 32
    per_warp = -(-regs * 32 // SM90["reg_unit"]) * SM90["reg_unit"]
    by_regs = (SM90["regs"] // per_warp) // warps_block if per_warp else SM90["blocks"]
    by_smem = SM90["smem"] // (smem + SM90["smem_reserved"])
    blocks = min(SM90["blocks"], SM90["warps"] // warps_block, by_regs, by_smem)
    return blocks * warps_block


def table(emu_check, bindir):
    cuobjdump, nvdisasm = tool("cuobjdump", bindir), tool("nvdisasm", bindir)
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([emu_check, "--nvrtc", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            sys.exit(f"sass_table: {emu_check} --nvrtc {d} failed ({p.returncode}):\n{p.stdout}")
        cubin = os.path.join(d, "attention_sm_90.cubin")
        with open(os.path.join(d, "kernels.tsv")) as f:
            rows = [line.rstrip("\n").split("\t") for line in f]
        res, fns = resources(cuobjdump, cubin), functions(nvdisasm, cubin)
    nvrtc = rows[0][1]
    lines = [
        "# The attention kernels' SASS on sm_90",
        "",
        f"Generated by `bench/sass_table.py` from NVRTC {nvrtc}'s sm_90 cubin (the options mtc passes), read with",
        "cuobjdump and nvdisasm; do not edit. The columns are the script's docstring's: the inner loop is the",
        "loop holding the most matrix instructions (HMMA); lds/mma is its shared loads (LDSM and LDS) per",
        "HMMA; spills the kernel's local loads and stores; warps/SM what registers and shared memory let",
        "reside on an sm_90 SM. `opts`: window, scale, soft-cap and a chunk of 8192 baked in.",
        "",
        "| kernel | template | D/Dv | causal | opts | dtype | loop instrs | HMMA | LDSM | LDS | LDG | LDGSTS "
        "| ldsm/mma | lds/mma | regs | spills | smem B | warps/SM |",
        "| --- | --- | --- | --- | --- | --- | " + "---: | " * 12 + "---: |",
    ]
    spilling = []
    for sym, tmpl, kind, D, Dv, causal, opts, dtype, threads, smem in rows[1:]:
        if sym not in res or sym not in fns:
            sys.exit(f"sass_table: {sym} is not in the cubin")
        r, (ins, labels) = res[sym], fns[sym]
        loop = inner_loop(ins, labels)
        mma = sum(is_mma(o) for _, o, _ in loop)
        ldsm = sum(o.startswith("LDSM") for _, o, _ in loop)
        lds = sum(is_lds(o) for _, o, _ in loop)
        ldg = sum(o.startswith("LDG") and not o.startswith("LDGSTS") for _, o, _ in loop)
        ldgsts = sum(o.startswith("LDGSTS") for _, o, _ in loop)
        local = sum(o.startswith(("LDL", "STL")) for _, o, _ in ins)
        total_smem = int(smem) + r.get("SHARED", 0)
        if (local or r.get("LOCAL", 0)) and sym not in KNOWN_SPILLS:
            spilling.append(sym)
        ratios = f"{ldsm / mma:.2f} | {(ldsm + lds) / mma:.2f}" if mma else "- | -"
        lines.append(
            f"| {kind} | {tmpl} | {D}/{Dv} | {'yes' if causal == '1' else 'no'} | {'yes' if opts == '1' else 'no'} "
            f"| {dtype} | {len(loop)} | {mma} | {ldsm} | {lds} | {ldg} | {ldgsts} | {ratios} | {r['REG']} "
            f"| {local} ({r.get('LOCAL', 0)} B) | {total_smem} | {warps_per_sm(r['REG'], int(threads), total_smem)} |"
        )
    lines += ["", "Known to spill (bench/sass_table.py's KNOWN_SPILLS): " + ", ".join(sorted(KNOWN_SPILLS)) + ".", ""]
    return "\n".join(lines), nvrtc, spilling


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("emu_check")
    ap.add_argument("--out")
    ap.add_argument("--check")
    ap.add_argument("--bin")
    a = ap.parse_args()
    text, nvrtc, spilling = table(a.emu_check, a.bin)
    if spilling:
        print(f"sass_table: FAIL: {len(spilling)} kernels spill: {', '.join(spilling)}")
    if a.check:
        with open(a.check) as f:
            old = f.read()
        m = re.search(r"from NVRTC (\S+)'s", old)
        if not m or m.group(1) != nvrtc:
            print(f"sass_table: {a.check} was made by NVRTC {m.group(1) if m else '?'}, this is NVRTC {nvrtc}: not compared")
            return 3
        if old != text:
            print(f"sass_table: FAIL: {a.check} is not this script's output for the current kernels; regenerate it "
                  f"with bench/sass_table.py EMU_CHECK --out {a.check}")
            return 1
        entries = text.count("\n| ") - 2  # less the header and its rule
        print(f"sass_table: {a.check} is the script's output ({entries} entry points)")
    elif a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 1 if spilling else 0


if __name__ == "__main__":
    sys.exit(main())
