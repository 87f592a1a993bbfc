"""PyTorch peers for the benchmark suite: the same cases as the Kiln side (shapes.cases()), timed the same way.

Command (on the GPU machine):
    /opt/torch/.venv/bin/python bench/suite/torch_peers.py --out torch_peers.json \
        [--families f1,f2|none] [--cases id1,id2] [--block] [--no-compile] [--no-tunableop] \
        [--samples N] [--compile-timeout-s S] [--time-budget-s S] [--kiln-store STORE]

What is measured, in this order (so a run stopped at its time limit keeps the cheap numbers of every case):
  1. limits: a dense bf16 matmul (torch.mm 8192^3 -> matmul_bf16_tflops) and an HBM copy (dst.copy_(src) of
     2 GiB, read + write bytes counted -> copy_tbps);
  2. eager pass over the selected cases: eager (and per family: SDPA backends, TunableOp GEMMs, mm-only);
  3. the transformer block in eager (--block);
  4. with --kiln-store (the store the Kiln side tuned into): the plan Kiln serves for each case from that store,
     called as a torch op (kiln.torch.op; the `kiln` package on PYTHONPATH) and timed by time_gpu below, the
     harness that times PyTorch: `kiln_harness_ms`, beside Kiln's own timer's figure in the Kiln side's file, so
     the two sides can be compared on one timer (docs/measure.md "One harness for both sides"); before the
     compiles, which are the slow part that a time budget cuts;
  5. torch.compile pass over the selected cases (mode="max-autotune-no-cudagraphs", dynamic=False);
  6. the block compiled without and with CUDA graphs (mode="max-autotune").
The JSON file (--out) is rewritten atomically (tmp + os.replace) after every measurement. Every measurement
is in its own try/except: a failure is stored as entry["errors"][key] = "ExcType: msg" and the run goes on.

Timing (time_gpu, the same rules as Kiln's Timer, docs/measure.md): warm-up (>= 3 calls and >= 10 ms, each
synchronised, the L2 flush included); then per sample: flush L2 by writing a 256 MiB scratch buffer (0/1
alternating, before the start event, not timed), torch.cuda._sleep() so that the GPU is busy while the host
enqueues (the stand-in for Kiln's blocking kernel: it hides PyTorch's host launch cost; its length is
max(100 us, 1.5 x the measured host enqueue time of one call + 20 us)), start event, the call, stop event,
synchronise; sample = elapsed time. The median is reported in ms, with n. Default 50 samples, 10 when one
call takes more than 5 ms. time_wall: the wall time per call of a loop of calls with one sync at the end
(host overhead included; used for the block).
"""
import argparse
import datetime
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

METHOD = ("GPU time = median of cudaEvent-timed samples; per sample: L2 flushed by writing a 256 MiB scratch "
          "buffer (0/1 alternating, untimed), torch.cuda._sleep(max(100us, 1.5 x host enqueue time + 20us)) "
          "so the host launch cost is hidden, start event, call, stop event, sync. Warm-up >= 3 calls and "
          ">= 10 ms. 50 samples (10 when a call takes > 5 ms). Wall = loop of calls / iters, one sync at the end.")
FLUSH_BYTES = 256 << 20
CYCLES_PER_US = 2000          # torch.cuda._sleep spins SM cycles; at < 2 GHz it only sleeps longer
COMPILE_FAMILIES = {"conv_bias_relu", "matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe",
                    "layer_norm", "rms_norm", "sdpa_band"}
KILN_HARNESS_FAMILIES = {"conv_bias_relu", "matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe",
                         "layer_norm", "rms_norm", "sdpa"}
TUNABLE_FAMILIES = {"matmul_bias_gelu", "matmul", "matmul_amax"}
DEV = "cuda"

# ---------------------------------------------------------------------------------------------- timing
_scratch = None


def _flush_buffer():
    global _scratch
    if _scratch is None:
        _scratch = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=DEV)
    return _scratch


def time_gpu(fn, samples):
    """GPU time of fn() (see the module docstring). Returns {"ms": median, "n", "min_ms", "sleep_us", ...}."""
    scratch = _flush_buffer()
    enqueue, call = [], []
    t_begin = time.perf_counter()
    while len(call) < 3 or (time.perf_counter() - t_begin < 0.010 and len(call) < 1000):
        scratch.fill_(len(call) & 1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        enqueue.append(t1 - t0)
        call.append(time.perf_counter() - t0)
    enqueue_us = statistics.median(enqueue[-3:]) * 1e6
    if min(call) * 1e3 > 5.0:
        samples = min(samples, 10)
    sleep_us = min(max(100.0, 1.5 * enqueue_us + 20.0), 50_000.0)
    cycles = int(sleep_us * CYCLES_PER_US)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(samples):
        scratch.fill_(i & 1)            # cold L2, before the start event
        torch.cuda._sleep(cycles)       # the GPU is busy while the host enqueues the sample
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return {"ms": statistics.median(times), "n": len(times), "min_ms": min(times),
            "sleep_us": round(sleep_us, 1), "enqueue_us": round(enqueue_us, 1)}


def time_wall(fn, iters):
    """Wall time per call (ms) of a loop of iters calls, synchronised once at the end (host cost included)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / iters


def first_call_s(fn):
    """Wall seconds of one synchronised call (compilation, TunableOp tuning)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------- the run
class Run:
    """Holds the result document, writes it after every measurement and prints progress lines."""

    def __init__(self, args):
        self.args, self.path, self.t0 = args, args.out, time.perf_counter()
        self.doc = {"meta": {}, "limits": {}, "cases": [], "block": []}

    def elapsed(self):
        return time.perf_counter() - self.t0

    def log(self, msg):
        print(f"[{self.elapsed():7.1f}s] {msg}", file=sys.stderr, flush=True)

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1, default=str)   # never fail on an odd value
        os.replace(tmp, self.path)

    def measure(self, entry, label, key, body):
        """Runs body(entry) under try/except; body writes its values into entry["torch"]. Saves afterwards."""
        budget = self.args.time_budget_s
        if budget and self.elapsed() > budget:
            entry.setdefault("skipped", []).append(key)
            self.log(f"{label} {key}: skipped (time budget)")
            return
        t0 = time.perf_counter()
        try:
            body(entry)
            shown = {k: v for k, v in entry["torch"].items() if k.startswith(key.rsplit("_", 1)[0])}
            self.log(f"{label} {key}: {json.dumps(shown)} ({time.perf_counter() - t0:.1f}s)")
        except Exception as e:  # noqa: BLE001 - every failure is data
            entry["errors"][key] = f"{type(e).__name__}: {str(e)[:1500]}"
            self.log(f"{label} {key}: ERROR {entry['errors'][key][:300]}")
        self.save()


def put(entry, key, res):
    """Stores a time_gpu result: the median under key, the rest under entry["timing"][key]."""
    entry["torch"][key] = res["ms"]
    entry.setdefault("timing", {})[key] = {k: v for k, v in res.items() if k != "ms"}


def free():
    gc.collect()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- meta, limits
def meta(argv):
    m = {"argv": argv, "start_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(), "method": METHOD,
         "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "python": sys.version.split()[0]}
    try:
        m["cudnn"] = torch.backends.cudnn.version()
        p = torch.cuda.get_device_properties(0)
        m["device"] = {"name": p.name, "sms": p.multi_processor_count, "memory_bytes": p.total_memory,
                       "l2_bytes": getattr(p, "L2_cache_size", None), "cc": f"{p.major}.{p.minor}"}
    except Exception as e:  # noqa: BLE001
        m["device_error"] = f"{type(e).__name__}: {e}"
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        f = [s.strip() for s in q.stdout.strip().splitlines()[0].split(",")]
        m["nvidia_smi"] = dict(zip(["gpu_name", "driver_version", "clocks_sm", "clocks_max_sm", "clocks_mem"], f))
    except Exception as e:  # noqa: BLE001
        m["nvidia_smi_error"] = f"{type(e).__name__}: {e}"
    try:   # settings that change the numbers
        mm = torch.backends.cuda.matmul
        m["bf16_reduced_precision_reduction"] = bool(mm.allow_bf16_reduced_precision_reduction)
        import torch._inductor.config as ic
        m["inductor_max_autotune_gemm_backends"] = str(ic.max_autotune_gemm_backends)
    except Exception as e:  # noqa: BLE001
        m["settings_error"] = f"{type(e).__name__}: {e}"
    return m


def measure_limits(run):
    lim, s = run.doc["limits"], run.args.samples
    lim.setdefault("errors", {})
    try:
        n = 8192
        a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=DEV, dtype=torch.bfloat16) / math.sqrt(n)
        c = torch.empty(n, n, device=DEV, dtype=torch.bfloat16)
        r = time_gpu(lambda: torch.mm(a, b, out=c), s)
        lim.update({"matmul_shape_mkn": [n, n, n], "matmul_ms": r["ms"], "matmul_n": r["n"],
                    "matmul_bf16_tflops": 2.0 * n ** 3 / (r["ms"] * 1e-3) / 1e12})
        run.log(f"limits matmul_bf16_tflops: {lim['matmul_bf16_tflops']:.1f} ({r['ms']:.3f} ms)")
        del a, b, c
    except Exception as e:  # noqa: BLE001
        lim["errors"]["matmul"] = f"{type(e).__name__}: {e}"
    free()
    try:
        size = 2 << 30
        src = torch.empty(size, dtype=torch.uint8, device=DEV).fill_(1)
        dst = torch.empty(size, dtype=torch.uint8, device=DEV)
        r = time_gpu(lambda: dst.copy_(src), s)
        lim.update({"copy_buffer_bytes": size, "copy_bytes_counted": 2 * size, "copy_ms": r["ms"], "copy_n": r["n"],
                    "copy_tbps": 2.0 * size / (r["ms"] * 1e-3) / 1e12})
        run.log(f"limits copy_tbps: {lim['copy_tbps']:.2f} ({r['ms']:.3f} ms)")
        del src, dst
    except Exception as e:  # noqa: BLE001
        lim["errors"]["copy"] = f"{type(e).__name__}: {e}"
    free()
    if lim["errors"]:
        run.log(f"limits: ERROR {json.dumps(lim['errors'])[:300]}")
    run.save()


# ---------------------------------------------------------------------------------------------- the cases
def build(case):
    """Inputs (a tuple) and the op (a function of them) of one case; the op returns its outputs."""
    f, p = case["family"], case["params"]
    bf16 = torch.bfloat16
    if f == "conv_bias_relu":
        cl = torch.channels_last
        x = torch.randn(p["n"], p["c"], p["h"], p["w"], device=DEV, dtype=torch.float16).to(memory_format=cl)
        w = (torch.randn(p["k"], p["c"], p["r"], p["s"], device=DEV, dtype=torch.float16)
             / math.sqrt(p["c"] * p["r"] * p["s"])).to(memory_format=cl)
        bias = torch.randn(p["k"], device=DEV, dtype=torch.float16)
        stride, pad = p["stride"], p["pad"]

        def op(x, w, bias):
            return F.relu(F.conv2d(x, w, bias, stride, pad))
        return (x, w, bias), op
    if f in ("matmul_bias_gelu", "matmul", "matmul_amax"):
        m, k, n = p["m"], p["k"], p["n"]
        a = torch.randn(m, k, device=DEV, dtype=bf16)
        b = torch.randn(k, n, device=DEV, dtype=bf16) / math.sqrt(k)   # [K, N] row-major, as Kiln's b
        if f == "matmul_bias_gelu":
            bias = torch.randn(n, device=DEV, dtype=bf16)

            def op(a, b, bias):
                return F.gelu(F.linear(a, b.t(), bias), approximate="none")
            return (a, b, bias), op
        if f == "matmul":
            def op(a, b):
                return a @ b
            return (a, b), op

        def op(a, b):
            y = a @ b
            return y, y.abs().amax().float()
        return (a, b), op
    if f == "fp8_recipe":
        m, k, n = p["m"], p["k"], p["n"]
        a = torch.randn(m, k, device=DEV, dtype=bf16).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=DEV, dtype=bf16).to(torch.float8_e4m3fn).t()   # [K, N] column-major
        sa = torch.tensor(1.0, device=DEV, dtype=torch.float32)
        sb = torch.tensor(1.0, device=DEV, dtype=torch.float32)

        def op(a, b, sa, sb):
            y = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
            amax = y.abs().amax().float()
            return y, 448.0 / amax
        return (a, b, sa, sb), op
    if f == "sdpa":
        shape = (p["b"], p["h"], p["s"], p["d"])
        q, k, v = (torch.randn(*shape, device=DEV, dtype=bf16) for _ in range(3))
        causal, scale = p["causal"], 1.0 / math.sqrt(p["d"])

        def op(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return (q, k, v), op
    if f == "sdpa_band":
        return band_inputs(p)
    if f in ("layer_norm", "rms_norm"):
        t, hid = p["tokens"], p["hidden"]
        x = torch.randn(t, hid, device=DEV, dtype=bf16)
        g = 1.0 + 0.1 * torch.randn(hid, device=DEV, dtype=bf16)
        if f == "layer_norm":
            beta = 0.1 * torch.randn(hid, device=DEV, dtype=bf16)

            def op(x, g, beta):
                return F.layer_norm(x, (hid,), g, beta, 1e-5)
            return (x, g, beta), op

        def op(x, g):
            return F.rms_norm(x, (hid,), g, 1e-5)
        return (x, g), op
    raise ValueError(f"unknown family {f}")


def band_keep(p):
    """The keys each query sees under a causal band (shapes.band_pairs), as a [sq, skv] bool mask."""
    shift = p["skv"] - p["sq"] if p["bottom_right"] else 0
    diag = torch.arange(p["sq"], device=DEV)[:, None] + shift
    j = torch.arange(p["skv"], device=DEV)[None, :]
    keep = j <= diag
    if p["left_bound"]:
        keep &= j > diag - p["left_bound"]
    return keep


def band_inputs(p):
    """q, k, v of an sdpa_band case and PyTorch's SDPA over them with the band as a boolean mask (its default
    backend choice; the backends one by one in eager_pass). Grouped heads through enable_gqa; a decode step
    (one query aligned bottom-right) sees every key, so it takes no mask."""
    q = torch.randn(p["b"], p["h"], p["sq"], p["d"], device=DEV, dtype=torch.bfloat16)
    k, v = (torch.randn(p["b"], p["hk"], p["skv"], p["d"], device=DEV, dtype=torch.bfloat16) for _ in range(2))
    scale = 1.0 / math.sqrt(p["d"])
    keep = band_keep(p)
    mask = None if bool(keep.all()) else keep

    def op(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=p["hk"] != p["h"])
    return (q, k, v), op


def flex_pass(run, entry, case):
    """FlexAttention under torch.compile with the band as its mask_mod (block-sparse: it skips the blocks the band
    masks whole), PyTorch's way to run a sliding window fast."""
    label, s, p = case["id"], run.args.samples, case["params"]

    def body(e):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        (q, k, v), _ = band_inputs(p)
        shift, left = (p["skv"] - p["sq"] if p["bottom_right"] else 0), p["left_bound"]

        def band(b, h, i, j):
            keep = j <= i + shift
            return keep & (j > i + shift - left) if left else keep
        block = create_block_mask(band, None, None, p["sq"], p["skv"], device=DEV)
        torch._dynamo.reset()
        flex = torch.compile(flex_attention)
        scale = 1.0 / math.sqrt(p["d"])
        call = lambda: flex(q, k, v, block_mask=block, scale=scale, enable_gqa=p["hk"] != p["h"])  # noqa: E731
        e["torch"]["flex_compile_time_s"] = first_call_s(call)
        put(e, "flex_ms", time_gpu(call, s))
    run.measure(entry, label, "flex_ms", body)
    torch._dynamo.reset()
    free()


def tunable_setup():
    """TunableOp settings, once: a fresh results file (so nothing is read from an earlier run), short tuning."""
    tun = torch.cuda.tunable
    tun.set_filename(os.path.join(tempfile.mkdtemp(prefix="kiln_tunableop_"), "tunableop_results.csv"))
    tun.set_max_tuning_duration(30)      # ms per candidate solution
    tun.set_max_tuning_iterations(20)
    tun.enable(False)


def tunable_results():
    try:
        return [",".join(str(x) for x in r) for r in torch.cuda.tunable.get_results()]
    except Exception:  # noqa: BLE001
        return []


def eager_pass(run, entry, case):
    """Eager measurements of one case (and its SDPA backends, TunableOp, mm-only variants)."""
    label, s, f = case["id"], run.args.samples, case["family"]
    try:
        inputs, op = build(case)
    except Exception as e:  # noqa: BLE001
        entry["errors"]["inputs"] = f"{type(e).__name__}: {e}"
        run.log(f"{label} inputs: ERROR {entry['errors']['inputs']}")
        run.save()
        return
    if f in ("sdpa", "sdpa_band"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def backend(key, be):
            def body(e):
                with sdpa_kernel(be):
                    put(e, key, time_gpu(lambda: op(*inputs), s))
            run.measure(entry, label, key, body)
        backend("cudnn_ms", SDPBackend.CUDNN_ATTENTION)
        backend("flash_ms", SDPBackend.FLASH_ATTENTION)
        if f == "sdpa_band":  # a mask: flash takes none, the memory-efficient kernel does
            backend("efficient_ms", SDPBackend.EFFICIENT_ATTENTION)
    run.measure(entry, label, "eager_ms", lambda e: put(e, "eager_ms", time_gpu(lambda: op(*inputs), s)))
    if f == "matmul_amax":
        a, b = inputs
        run.measure(entry, label, "mm_only_eager_ms",
                    lambda e: put(e, "mm_only_eager_ms", time_gpu(lambda: a @ b, s)))
    if f in TUNABLE_FAMILIES and not run.args.no_tunableop:
        def body(e):
            tun = torch.cuda.tunable
            before = set(tunable_results())
            tun.enable(True)
            tun.tuning_enable(True)
            try:
                e["torch"]["tunableop_tune_s"] = first_call_s(lambda: op(*inputs))   # the call that tunes
                put(e, "tunableop_ms", time_gpu(lambda: op(*inputs), s))
            finally:
                tun.enable(False)
            e["tunableop_new_results"] = sorted(set(tunable_results()) - before)
        run.measure(entry, label, "tunableop_ms", body)
    del inputs, op


KILN_SERVED = ("store", "segments", "memory")  # what the tuned plan comes from; anything else is not it


def kiln_inputs(graph):
    """Inputs of a Kiln graph in declaration order, for timing only: each its own shape, strides and dtype;
    normal values (a 1-element tensor, a scale, is 1.0)."""
    out = []
    for t in graph.inputs:
        dtype = kiln_torch().torch_dtype(t["dtype"])
        x = torch.empty_strided(t["shape"], t["strides"], dtype=dtype, device=DEV)
        if x.numel() == 1:
            x.fill_(1.0)
        else:
            x.copy_(torch.randn(t["shape"], device=DEV).mul_(0.5))
        out.append(x)
    return out


def kiln_torch():
    import kiln.torch  # noqa: PLC0415 - only with --kiln-store
    return kiln.torch


def kiln_pass(run, entry, case):
    """The plan Kiln serves for this case from --kiln-store, as a torch op, timed by this file's time_gpu."""
    label, s = case["id"], run.args.samples

    def body(e):
        import kiln  # noqa: PLC0415
        kt = kiln_torch()
        graph = kiln.load(case["spec"])
        call = kt.op(graph, store=run.args.kiln_store, name=f"suite_{case['id']}")
        inputs = kiln_inputs(graph)
        call(*inputs)  # the first call obtains the plan (and verifies it on first use)
        p = kt.plan(call, *inputs)
        e["kiln_harness"] = {"source": p.source, "config": p.config, "why": p.why}
        if p.source not in KILN_SERVED:
            raise RuntimeError(f"Kiln's Planner served a plan from '{p.source}', not the tuned one ({p.why}): "
                               "was this case tuned into the store?")
        put(e, "kiln_harness_ms", time_gpu(lambda: call(*inputs), s))
    run.measure(entry, label, "kiln_harness_ms", body)
    free()


def compile_pass(run, entry, case):
    """torch.compile(mode="max-autotune-no-cudagraphs") of one case: the first call and then GPU time."""
    label, s = case["id"], run.args.samples

    def body(e):
        inputs, op = build(case)
        torch._dynamo.reset()
        cfn = torch.compile(op, mode="max-autotune-no-cudagraphs", dynamic=False)
        e["torch"]["compile_time_s"] = first_call_s(lambda: cfn(*inputs))
        if e["torch"]["compile_time_s"] > run.args.compile_timeout_s:
            e["compile_over_timeout"] = True
        put(e, "compile_ms", time_gpu(lambda: cfn(*inputs), s))
    run.measure(entry, label, "compile_ms", body)
    torch._dynamo.reset()
    free()


# ---------------------------------------------------------------------------------------------- the block
class Block(torch.nn.Module):
    """The bf16 pre-norm transformer block of shapes.block_specs (causal attention, GELU(erf) MLP).
    Weights are stored [K, N] row-major as on the Kiln side; they are Parameters so that CUDA graphs
    (mode="max-autotune") treat them as static inputs and do not copy them."""

    def __init__(self):
        super().__init__()
        H, M, bf16 = shapes.HIDDEN, shapes.MLP, torch.bfloat16

        def par(*shape, scale=1.0, shift=0.0):
            return torch.nn.Parameter(shift + scale * torch.randn(*shape, device=DEV, dtype=bf16),
                                      requires_grad=False)
        self.ln1_g, self.ln1_b = par(H, scale=0.1, shift=1.0), par(H, scale=0.1)
        self.ln2_g, self.ln2_b = par(H, scale=0.1, shift=1.0), par(H, scale=0.1)
        self.wqkv = par(H, 3 * H, scale=H ** -0.5)
        self.wo = par(H, H, scale=H ** -0.5)
        self.w1, self.b1 = par(H, M, scale=H ** -0.5), par(M, scale=0.1)
        self.w2 = par(M, H, scale=M ** -0.5)

    def forward(self, x):
        B, S, H = x.shape
        nh = shapes.HEADS
        h1 = F.layer_norm(x, (H,), self.ln1_g, self.ln1_b, 1e-5)
        qkv = h1 @ self.wqkv                                           # [B, S, 3H]
        q, k, v = qkv.view(B, S, 3, nh, H // nh).permute(2, 0, 3, 1, 4).unbind(0)   # [B, nh, S, D] views
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=(H // nh) ** -0.5)
        o = o.transpose(1, 2).reshape(B, S, H)
        x2 = o @ self.wo + x
        h2 = F.layer_norm(x2, (H,), self.ln2_g, self.ln2_b, 1e-5)
        u = F.gelu(h2 @ self.w1 + self.b1, approximate="none")
        return u @ self.w2 + x2


def block_entries(run):
    if not run.doc["block"]:
        for (bt, tok) in shapes.BLOCK_SHAPES:
            run.doc["block"].append({"batch": bt, "tokens": tok, "flops": shapes.block_flops(bt, tok),
                                     "weight_bytes": shapes.block_weight_bytes(), "torch": {}, "errors": {}})
    return run.doc["block"]


def wall_iters(entry, key):
    """About 2 s of calls at the measured GPU time, 20..200."""
    ms = entry["torch"].get(key) or 1.0
    return max(20, min(200, int(2000.0 / max(ms, 0.01))))


def block_eager(run, model):
    s = run.args.samples
    for e in block_entries(run):
        label = f"block b{e['batch']} t{e['tokens']}"
        x = torch.randn(e["batch"], e["tokens"], shapes.HIDDEN, device=DEV, dtype=torch.bfloat16)

        def body(e, x=x):
            put(e, "eager_ms", time_gpu(lambda: model(x), s))
            e["torch"]["eager_wall_ms"] = time_wall(lambda: model(x), wall_iters(e, "eager_ms"))
        run.measure(e, label, "eager_ms", body)
        del x
        free()


def block_compiled(run, model):
    s = run.args.samples
    for e in block_entries(run):
        label = f"block b{e['batch']} t{e['tokens']}"
        for tag, mode in (("compile_nocg", "max-autotune-no-cudagraphs"), ("compile_cg", "max-autotune")):
            def body(e, tag=tag, mode=mode):
                x = torch.randn(e["batch"], e["tokens"], shapes.HIDDEN, device=DEV, dtype=torch.bfloat16)
                torch._dynamo.reset()
                cfn = torch.compile(model, mode=mode, dynamic=False)
                if tag == "compile_cg":
                    try:   # x at a fixed address: CUDA graphs then replay without copying it in
                        torch._dynamo.mark_static_address(x)
                    except Exception as ex:  # noqa: BLE001
                        e.setdefault("notes", []).append(f"mark_static_address: {type(ex).__name__}: {ex}")

                    def call():
                        torch.compiler.cudagraph_mark_step_begin()
                        cfn(x)
                else:
                    def call():
                        cfn(x)
                e["torch"][f"{tag}_compile_s"] = first_call_s(call)
                if e["torch"][f"{tag}_compile_s"] > run.args.compile_timeout_s:
                    e[f"{tag}_over_timeout"] = True
                for _ in range(5):    # CUDA graphs: warm-up run, recording, replays
                    call()
                torch.cuda.synchronize()
                put(e, f"{tag}_ms", time_gpu(call, s))
                e["torch"][f"{tag}_wall_ms"] = time_wall(call, wall_iters(e, f"{tag}_ms"))
            run.measure(e, label, f"{tag}_ms", body)
            torch._dynamo.reset()
            free()


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the JSON file, rewritten after every measurement")
    ap.add_argument("--families", default="", help="comma-separated families, or 'none' (default: all)")
    ap.add_argument("--cases", default="", help="comma-separated case ids (default: all of the families)")
    ap.add_argument("--block", action="store_true", help="also measure the transformer block")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--no-tunableop", action="store_true", help="skip TunableOp")
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--compile-timeout-s", type=float, default=120.0,
                    help="a compile longer than this is flagged (it cannot be interrupted)")
    ap.add_argument("--time-budget-s", type=float, default=0.0,
                    help="skip measurements that would start after this many seconds (0: no budget)")
    ap.add_argument("--kiln-store", default="",
                    help="the store the Kiln side tuned into: also time Kiln's served plans in this harness")
    return ap.parse_args(argv)


def select(args):
    cs = shapes.cases()
    if args.families:
        fams = {f.strip() for f in args.families.split(",") if f.strip()}
        cs = [c for c in cs if c["family"] in fams]
    if args.cases:
        ids = {i.strip() for i in args.cases.split(",") if i.strip()}
        unknown = ids - {c["id"] for c in shapes.cases()}
        if unknown:
            print(f"warning: unknown case ids {sorted(unknown)}", file=sys.stderr)
        cs = [c for c in cs if c["id"] in ids]
    return cs


def main(argv):
    args = parse_args(argv)
    run = Run(args)
    sel = select(args)
    torch.set_grad_enabled(False)
    torch.backends.cudnn.benchmark = True
    run.doc["meta"] = meta(sys.argv)
    run.doc["meta"].update({"samples": args.samples, "flush_bytes": FLUSH_BYTES, "compile_dynamic": False,
                            "compile_mode": "max-autotune-no-cudagraphs (block also max-autotune)",
                            "cudnn_benchmark": True})
    run.doc["cases"] = [dict({k: v for k, v in c.items() if k != "spec"}, torch={}, errors={}) for c in sel]
    run.log(f"{len(sel)} cases, block={args.block}, compile={not args.no_compile}, "
            f"tunableop={not args.no_tunableop}; torch {torch.__version__}")
    run.save()
    measure_limits(run)
    if not args.no_tunableop:
        try:
            tunable_setup()
        except Exception as e:  # noqa: BLE001
            run.doc["meta"]["tunableop_error"] = f"{type(e).__name__}: {e}"
            args.no_tunableop = True
    for case, entry in zip(sel, run.doc["cases"]):
        eager_pass(run, entry, case)
        free()    # after eager_pass returned, so its tensors are unreferenced
    model = None
    if args.block:
        try:
            model = Block()
            block_eager(run, model)
        except Exception as e:  # noqa: BLE001
            run.doc["meta"]["block_error"] = f"{type(e).__name__}: {e}"
            run.log(f"block: ERROR {run.doc['meta']['block_error']}")
    if args.kiln_store:
        run.doc["meta"]["kiln_store"] = args.kiln_store
        for case, entry in zip(sel, run.doc["cases"]):
            if case["family"] in KILN_HARNESS_FAMILIES and "inputs" not in entry["errors"]:
                kiln_pass(run, entry, case)
    if not args.no_compile:
        for case, entry in zip(sel, run.doc["cases"]):
            if case["family"] in COMPILE_FAMILIES and "inputs" not in entry["errors"]:
                compile_pass(run, entry, case)
            if case["family"] == "sdpa_band" and "inputs" not in entry["errors"]:
                flex_pass(run, entry, case)
        if model is not None:
            block_compiled(run, model)
    run.doc["meta"]["end_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    run.doc["meta"]["elapsed_s"] = run.elapsed()
    run.save()
    run.log(f"done -> {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
