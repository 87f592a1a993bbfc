#!/usr/bin/env bash
# Extent probe (issue 31, "limits that are not only op counts"): which large tensors cuDNN 9.19's engines run
# on this GPU, through `kiln run` (first-use verification on: the plan is checked against the device
# reference before it runs for the caller). One line per case: name, shape, exit code, Kiln's last line.
#   bench/probes/extent_probe.sh KILN OUT_DIR [CASE...]   (default: every case)
set -uo pipefail
kiln="${1:?usage: extent_probe.sh KILN OUT_DIR [CASE...]}"; out="${2:?OUT_DIR}"; shift 2
mkdir -p "$out/specs"
spec() {  # NAME JSON
  printf '%s\n' "$2" >"$out/specs/$1.json"
}
relu() {  # NAME DTYPE DIMS
  spec "$1" "{\"name\": \"$1\", \"io_dtype\": \"$2\", \"tensors\": {\"x\": {\"dims\": $3}},
    \"nodes\": [{\"name\": \"r\", \"op\": \"relu\", \"inputs\": [\"x\"], \"outputs\": [\"y\"]}], \"outputs\": [\"y\"]}"
}
# Elements versus bytes versus the innermost extent: bf16 and fp32 at and under 2^31 bytes, 2-D and 3-D.
relu relu_bf16_1x2p30m64 bf16 "[1, 1073741760]"
relu relu_bf16_1x2p29 bf16 "[1, 536870912]"
relu relu_fp32_1x2p29 fp32 "[1, 536870912]"
relu relu_fp32_1x2p29m64 fp32 "[1, 536870848]"
relu relu_bf16_2p15x2p15 bf16 "[32768, 32768]"
relu relu_bf16_1x2p15x2p15 bf16 "[1, 32768, 32768]"
relu relu_bf16_1x2p15x2p15m1 bf16 "[1, 32768, 32767]"
relu relu_fp16_2p16x2p15 fp16 "[65536, 32768]"
relu relu_bf16_2p14x2p16 bf16 "[1, 16384, 65536]"
spec matmul_bf16_2p30_out '{"name": "matmul_bf16_2p30_out", "io_dtype": "bf16",
  "tensors": {"a": {"dims": [1, 32768, 8192]}, "b": {"dims": [1, 8192, 32768]}},
  "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["c"]}], "outputs": ["c"]}'
spec matmul_bf16_2p31_out '{"name": "matmul_bf16_2p31_out", "io_dtype": "bf16",
  "tensors": {"a": {"dims": [1, 65536, 4096]}, "b": {"dims": [1, 4096, 32768]}},
  "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["c"]}], "outputs": ["c"]}'
spec layer_norm_bf16_2p31 '{"name": "layer_norm_bf16_2p31", "io_dtype": "bf16",
  "tensors": {"x": {"dims": [131072, 16384, 1, 1], "layout": "NCHW"},
              "g": {"dims": [1, 16384, 1, 1], "layout": "NCHW", "dtype": "fp32"},
              "b": {"dims": [1, 16384, 1, 1], "layout": "NCHW", "dtype": "fp32"}},
  "nodes": [{"name": "ln", "op": "layer_norm", "inputs": ["x", "g", "b"], "outputs": ["y"], "epsilon": 1e-05}],
  "outputs": ["y"]}'
spec conv_bf16_2p30 '{"name": "conv_bf16_2p30", "io_dtype": "bf16",
  "tensors": {"x": {"dims": [32, 128, 512, 512], "layout": "NHWC"}, "w": {"dims": [128, 128, 3, 3], "layout": "NHWC"}},
  "nodes": [{"name": "c", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["y"], "padding": [1, 1]}],
  "outputs": ["y"]}'
cases=("$@"); [ ${#cases[@]} -gt 0 ] || cases=($(cd "$out/specs" && ls | sed 's/\.json$//'))
for c in "${cases[@]}"; do
  s=$SECONDS
  timeout 150 "$kiln" run "$out/specs/$c.json" >"$out/specs/$c.log" 2>&1; rc=$?
  printf '%-28s exit %-3s %4ss  %s\n' "$c" "$rc" "$((SECONDS - s))" "$(grep -v '^\s*$' "$out/specs/$c.log" | tail -1 | cut -c1-300)"
done
