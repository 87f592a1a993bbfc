#!/usr/bin/env bash
# Row-length probe (issue 31): relu over [1, R, N] bf16 through `kiln run`, for the innermost extent N at which
# cuDNN 9.19's pointwise engines stop launching (relu over [1, 2^29] failed with
# CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER while [1, 65536, 32768] ran).
#   bench/probes/row_probe.sh KILN OUT_DIR
set -uo pipefail
kiln="${1:?usage: row_probe.sh KILN OUT_DIR}"; out="${2:?OUT_DIR}"; mkdir -p "$out"
for dims in "[1, 131072]" "[1, 131071]" "[1, 262144]" "[1, 1048576]" "[1, 4194304]" "[1, 16777216]" "[1, 16777215]" \
            "[1, 33554432]" "[1, 67108864]" "[1, 134217728]" "[1, 268435456]" "[2, 268435456]" "[1, 1, 2, 134217728]" \
            "[64, 4194304]" "[1, 65535]" "[1, 65536]" "[1, 65537]"; do
  n=$(echo "$dims" | tr -d '[] ' | tr ',' 'x')
  printf '{"name": "row_%s", "io_dtype": "bf16", "tensors": {"x": {"dims": %s}}, "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]}\n' "$n" "$dims" >"$out/row_$n.json"
  timeout 60 "$kiln" run "$out/row_$n.json" >"$out/row_$n.log" 2>&1; rc=$?
  printf '%-24s exit %-3s %s\n' "$dims" "$rc" "$(grep -v '^\s*$' "$out/row_$n.log" | tail -1 | cut -c1-160)"
done
