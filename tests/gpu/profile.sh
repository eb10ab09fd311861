#!/bin/sh
# tests/gpu/profile.sh: the profile a GPU session's prediction is made from,
# written from that session's own measurements (tests/gpu/run.sh's plans
# stage):
#   profile.sh BASE HOST GPU_CHECK_LOG OUT
# BASE's figures (schedules/h200.target) but for: device memory capped at
# 16 GB; the host as mtrun --calibrate measured it in HOST (memory, cores,
# AdamW and the gradients' add); and what gpu_check printed as profile lines
# ("    KEY = VALUE   # ...") in GPU_CHECK_LOG: the cuBLAS bf16 rate on random
# operands (matrix_flops_bf16, over gemm_efficiency), flash attention's and
# the MoE kernels' shares of it. Exit status 1, naming the figure, when the
# rate, the tensor-core attention share, the MoE share or the gradients'
# add rate was not measured: no prediction from the shipped constants.
set -u
base=$1 host=$2 log=$3 out=$4
measured='matrix_flops_bf16|attention_tc_fraction|attention_tc_wide_fraction|attention_tc_narrow_fraction|attention_fp32_fraction|moe_gemm_efficiency'
hosts='host_memory|host_memory_bandwidth|host_cores|host_adamw_bandwidth|host_grads_add_bandwidth'
{
  grep -v -E "^(name|device_memory|$hosts|tier_[a-z_]*|$measured) *=" "$base"
  echo 'name = h200-lent-16g'
  echo 'device_memory = 16e9'
  grep -E "^($hosts) *=" "$host"
  sed -n -E "s/^    ($measured) = ([^ ]+) .*/\\1 = \\2/p" "$log"
} >"$out" || exit 1
for k in matrix_flops_bf16 attention_tc_fraction moe_gemm_efficiency host_grads_add_bandwidth; do
  grep -q "^$k = " "$out" || { echo "profile.sh: no $k measured in this session: no prediction"; exit 1; }
done
grep -E '^(matrix_flops_bf16|attention_[a-z_]*fraction|moe_gemm_efficiency|host_[a-z_]*bandwidth) =' "$out"
