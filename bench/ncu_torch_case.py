"""One suite case's PyTorch peer, run for Nsight Compute: the op (eager or torch.compile max-autotune, as
bench/suite/torch_peers.py measures it) warmed up, then called once more inside the NVTX range "kiln_prof", so that
`ncu --nvtx --nvtx-include "kiln_prof/"` profiles only that call's kernels (issue 37's "profile before fixing").

    python3 bench/ncu_torch_case.py CASE_ID [--mode compile|eager]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "suite"))
import shapes  # noqa: E402
import torch_peers  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", help="a case id of bench/suite/shapes.py")
    ap.add_argument("--mode", choices=("compile", "eager"), default="compile")
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args(argv)
    cases = [c for c in shapes.cases() if c["id"] == args.case]
    if not cases:
        print(f"ncu_torch_case: no suite case '{args.case}'", file=sys.stderr)
        return 2
    inputs, op = torch_peers.build(cases[0])
    fn = op
    if args.mode == "compile":
        fn = torch.compile(op, mode="max-autotune-no-cudagraphs", dynamic=False)
    for _ in range(args.warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("kiln_prof")
    fn(*inputs)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"ncu_torch_case: {args.case} {args.mode}: profiled one call")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
