"""Per-call overhead of Kiln from Python (issue 34's benchmark; docs/python.md "Cost of a call").

One small graph (matmul + bias + GELU, bf16, [1, tokens, d] x [1, d, h]) so that launching dominates, called in a
loop by each contestant, all in one process on one GPU:
  cpp_planner      the C++ Planner: obtain() (a memory hit) + execute(), looped in C++ (kiln._kiln._time_cpp_calls)
  kiln_plan_call   plan(x=..., w=..., bias=..., y=...) on a plan obtained once, output preallocated
  kiln_torch_op    op(x, w, bias), the function kiln.torch.op returns (eager: the kernel at once, no dispatcher):
                   dims from the shapes, plan from the cache, output allocated, workspace from the pool
                   (kiln._torch_native's C++ call where it was built for this torch: kiln.torch.eager_path())
                   (that call object itself where kiln._torch_native is built: no Python function around it)
  kiln_torch_op_gil_held  kiln_torch_op with the GIL kept while the plan is enqueued (what releasing it costs)
  kiln_torch_op_python_path  the same eager call through kiln._kiln's path (tensors read and the output allocated
                   through Python objects: what runs where kiln._torch_native is not built)
  kiln_torch_dispatcher  torch.ops.kiln.<op>(x, w, bias): the same kernel through torch's dispatcher (what
                   torch.compile's graphs call)
  fe_python        cuDNN Frontend's Python graph.execute() on the same graph (heuristic plan), output preallocated
  torch_eager      F.gelu(F.linear(x, w^T, bias)) (cuBLAS + a pointwise kernel)
  torch_compile    the same under torch.compile
Parts (not contestants; to see where a call's time goes): reading 3 input tensors (kiln._kiln._describe_tensor),
torch's current stream (kiln._kiln._stream_of), torch.empty_strided of the output, and a no-op custom op with a
Python CUDA kernel through the dispatcher; where kiln._torch_native is built, the op's whole call looped in C++ and
its pieces (the checks that decide it runs at once, torch's current stream, the capture query, the GIL's release,
the whole call with its outputs written into kept buffers: the call less torch's allocation), each looped in C++
(kiln._torch_native._probe_parts); and the C++ baseline's pieces (obtain, obtain_held, execute) looped in C++
(kiln._kiln._time_cpp_parts).
Method: per contestant, 300 warm-up calls; then R=25 rounds, each running every contestant for N=1000 calls in an
order rotated round by round (so that drift in the host falls on all alike); a contestant's host time per call in a
round is (perf_counter after the N-th call is issued - before the first) / N, with CUDA events around it giving its
GPU time per call; "above C++" is the median over rounds of the difference from the C++ baseline's time in the same
round. A round whose GPU time per call is more than 1.1x its host time was bound by the GPU (the queue
grew), not the launch path, and is flagged. Reported: the median over rounds (and p10/p90), in microseconds.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

import kiln
import kiln.torch

F = torch.nn.functional


def spec(tokens: int, d: int, h: int) -> dict:
    return {
        "name": f"overhead_mlp_{d}x{h}", "io_dtype": "bf16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
        "dynamic": {"tokens": tokens},
        "tensors": {"x": {"dims": [1, "tokens", d]}, "w": {"dims": [1, d, h]}, "bias": {"dims": [1, 1, h]}},
        "nodes": [
            {"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["mm_out"]},
            {"name": "add_bias", "op": "bias_add", "inputs": ["mm_out", "bias"], "outputs": ["biased"]},
            {"name": "gelu", "op": "gelu_erf", "inputs": ["biased"], "outputs": ["y"]},
        ],
        "outputs": ["y"],
    }


def one_round(call, n: int) -> tuple:
    """n calls: (host us per call, from before the first is issued to after the n-th; GPU us per call, by events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    t1 = time.perf_counter()
    end.record()
    end.synchronize()
    return (t1 - t0) / n * 1e6, start.elapsed_time(end) * 1e3 / n


def rounds(call, n: int, r: int) -> dict:
    for _ in range(300):
        call()
    torch.cuda.synchronize()
    host, gpu = [], []
    for _ in range(r):
        h, g = one_round(call, n)
        host.append(h)
        gpu.append(g)
    return summary(host, gpu)


def summary(host: list, gpu: list) -> dict:
    q = statistics.quantiles(host, n=10)
    return {"median_us": statistics.median(host), "p10_us": q[0], "p90_us": q[-1],
            "gpu_us_per_call": statistics.median(gpu),
            # Bound by the GPU: its events span more than the calls took to issue (the queue grew: the host time then
            # measures enqueueing, not a call's cost). A GPU that keeps up spans about the host time, so the earlier
            # test (GPU >= 0.9x host) flagged every round (seen on the H100).
            "gpu_bound_rounds": sum(1 for h, g in zip(host, gpu) if g > 1.1 * h), "rounds": len(host)}


def fe_contestant(x, w, bias, y):
    """cuDNN Frontend's own Python API on the same graph, or why it cannot run here."""
    try:
        import cudnn  # type: ignore[import-not-found]
    except ImportError as e:
        return None, f"cudnn (nvidia-cudnn-frontend) not importable: {e}"
    try:
        handle = cudnn.create_handle()
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        X = g.tensor(name="x", dim=list(x.shape), stride=list(x.stride()), data_type=cudnn.data_type.BFLOAT16)
        W = g.tensor(name="w", dim=list(w.shape), stride=list(w.stride()), data_type=cudnn.data_type.BFLOAT16)
        B = g.tensor(name="bias", dim=list(bias.shape), stride=list(bias.stride()), data_type=cudnn.data_type.BFLOAT16)
        mm = g.matmul(name="mm", A=X, B=W)
        biased = g.bias(name="bias_add", input=mm, bias=B)
        Y = g.gelu(name="gelu", input=biased)
        Y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        pack = {X: x, W: w, B: bias, Y: y}
        return (lambda: g.execute(pack, ws, handle=handle)), f"cudnn frontend {cudnn.__version__}"
    except Exception as e:  # noqa: BLE001 - reported in the results
        return None, f"cuDNN Frontend's Python graph did not build: {e!r}"


def parts(x, w, bias, y, n: int, r: int, op, runner, prepared, dyn_shape) -> dict:
    """Host time per call of the pieces a Kiln call from Python is made of (medians over rounds, microseconds)."""
    lib = torch.library.Library("kiln_overhead_bench", "FRAGMENT")
    lib.define("noop(Tensor x) -> Tensor")
    lib.impl("noop", lambda t: t, "CUDA")
    noop = torch.ops.kiln_overhead_bench.noop
    describe, stream_of = kiln._kiln._describe_tensor, kiln._kiln._stream_of
    shape, stride, dtype, device = tuple(y.shape), y.stride(), y.dtype, y.device
    pieces = {
        "read_3_tensors": lambda: (describe(x, "x"), describe(w, "w"), describe(bias, "bias")),
        "current_stream": lambda: stream_of(None),
        "torch_empty_strided": lambda: torch.empty_strided(shape, stride, dtype=dtype, device=device),
        "dispatcher_python_kernel_noop": lambda: noop(x),
        "empty_loop": lambda: None,
    }
    native = getattr(kiln.torch, "_native", None)
    if native is not None:  # an output allocated, wrapped and dropped in C++ (kiln._torch_native's share of a call)
        pieces["native_output_alloc_wrap_free"] = lambda: native._probe_output(1)
    out = {k: rounds(f, n, r)["median_us"] for k, f in pieces.items()}
    if native is not None:  # the same looped in C++ (no Python call around each): median of r rounds of n
        out["native_output_alloc_wrap_free_in_cpp"] = statistics.median(
            native._probe_output(n) / n * 1e6 for _ in range(r))
        call = op if isinstance(op, native.Call) else native.Call(runner, op.op, kiln._kiln._torch_bridge())
        native._probe_parts(call, (x, w, bias), 300)
        torch.cuda.synchronize()
        probes = [native._probe_parts(call, (x, w, bias), n) for _ in range(r)]
        torch.cuda.synchronize()
        for k in probes[0]:
            out[f"native_{k}_in_cpp"] = statistics.median(p[k] / n * 1e6 for p in probes)
    # The C++ baseline's pieces (obtain, obtain_held, execute), each looped in C++: medians of r rounds of n
    cpp = [kiln._kiln._time_cpp_parts(prepared, dyn_shape, None, n, x=x, w=w, bias=bias, y=y) for _ in range(r)]
    for k in cpp[0]:
        out[f"cpp_{k}_in_cpp"] = statistics.median(p[k] / n * 1e6 for p in cpp)
    lib._destroy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="Kiln's per-call overhead from Python")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--h", type=int, default=256)
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("-r", type=int, default=25)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(1, a.tokens, a.d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1, a.d, a.h, device="cuda", dtype=torch.bfloat16) / a.d**0.5
    bias = torch.randn(1, 1, a.h, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(1, a.tokens, a.h, device="cuda", dtype=torch.bfloat16)
    s = spec(a.tokens, a.d, a.h)
    planner = kiln.Planner()
    prepared = planner.prepare(s)
    shape = {"tokens": a.tokens}
    plan = planner.obtain(prepared, shape)
    op = kiln.torch.op(s, planner=planner)
    w_t = w[0].t().contiguous()  # nn.Linear's [out, in]
    bias_1d = bias.reshape(-1)

    def eager():
        return F.gelu(F.linear(x, w_t, bias_1d))

    compiled = torch.compile(eager)
    ref = F.gelu(x.float() @ w.float() + bias.float())
    checks = {}
    plan(x=x, w=w, bias=bias, y=y)
    checks["kiln_plan_call"] = (y.float() - ref).abs().max().item()
    checks["kiln_torch_op"] = (op(x, w, bias).float() - ref).abs().max().item()
    runner = kiln.torch._ops[op.__name__][2]
    checks["kiln_torch_op_python_path"] = (runner.eager(op.op, x, w, bias).float() - ref).abs().max().item()
    checks["torch_compile"] = (compiled().float() - ref).abs().max().item()

    results = {"contestants": {}}
    n, r = a.n, a.r
    # Every contestant as a round of n calls returning (host us per call, GPU us per call).

    def timed(call):
        def a_round():
            return one_round(call, n)
        a_round.warm = call
        return a_round

    def cpp_round():  # the C++ baseline's host time is measured in C++
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        secs = kiln._kiln._time_cpp_calls(prepared, shape, None, n, x=x, w=w, bias=bias, y=y)
        end.record()
        end.synchronize()
        return secs / n * 1e6, start.elapsed_time(end) * 1e3 / n
    cpp_round.warm = lambda: kiln._kiln._time_cpp_calls(prepared, shape, None, 1, x=x, w=w, bias=bias, y=y)

    contestants = {"cpp_planner": cpp_round, "kiln_plan_call": timed(lambda: plan(x=x, w=w, bias=bias, y=y)),
                   "kiln_torch_op": timed(lambda: op(x, w, bias))}
    native = getattr(kiln.torch, "_native", None)
    gil_kept = {"kiln_torch_op_gil_held"}
    if native is not None:
        contestants["kiln_torch_op_gil_held"] = timed(lambda: op(x, w, bias))
    contestants["kiln_torch_op_python_path"] = timed(lambda: runner.eager(op.op, x, w, bias))
    contestants["kiln_torch_dispatcher"] = timed(lambda: op.op(x, w, bias))
    fe, fe_note = fe_contestant(x, w, bias, torch.empty_like(y))
    results["fe_python"] = fe_note
    if fe is not None:
        contestants["fe_python"] = timed(fe)
    contestants["torch_eager"] = timed(eager)
    contestants["torch_compile"] = timed(compiled)
    # Interleaved: each round runs every contestant once, in an order rotated round by round, so that drift in the
    # host (clocks, other tenants) falls on all of them alike; "above_cpp_us" is the median over rounds of each
    # round's difference from the C++ baseline in the same round.
    names = list(contestants)
    for name in names:
        kiln._kiln._set_bridge_releases_gil(name not in gil_kept)
        for _ in range(300):
            contestants[name].warm()
    torch.cuda.synchronize()
    host = {k: [] for k in names}
    gpu = {k: [] for k in names}
    for i in range(r):
        for name in names[i % len(names):] + names[:i % len(names)]:
            kiln._kiln._set_bridge_releases_gil(name not in gil_kept)
            h, g = contestants[name]()
            host[name].append(h)
            gpu[name].append(g)
    kiln._kiln._set_bridge_releases_gil(True)
    c = results["contestants"]
    for name in names:
        c[name] = summary(host[name], gpu[name])
    results["parts"] = parts(x, w, bias, y, n, r, op, runner, prepared, shape)
    results["above_cpp_us"] = {k: statistics.median(h - b for h, b in zip(host[k], host["cpp_planner"])) for k in names}
    results["max_abs_error_vs_fp32_reference"] = checks
    results["eager_path"] = kiln.torch.eager_path()
    results["plan"] = {"source": plan.source, "config": plan.config, "workspace_bytes": plan.workspace_bytes}
    results["graph"] = {"tokens": a.tokens, "d": a.d, "h": a.h, "dtype": "bf16"}
    results["method"] = __doc__.split("Method: ")[1].strip()
    results["environment"] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "python": platform.python_version(), "kiln": kiln.__version__}
    print(json.dumps(results, indent=2))
    print("parts: " + ", ".join(f"{k} {v:.2f} us" for k, v in results["parts"].items()), file=sys.stderr)
    for k, v in c.items():
        print(f"{k:16s} {v['median_us']:7.2f} us/call (p10 {v['p10_us']:.2f}, p90 {v['p90_us']:.2f}; "
              f"GPU {v['gpu_us_per_call']:.2f} us/call, {v['gpu_bound_rounds']}/{v['rounds']} rounds GPU-bound)"
              f"  {results['above_cpp_us'][k]:+.2f} vs C++", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
