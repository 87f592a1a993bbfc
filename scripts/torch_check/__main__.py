"""Cross-check Kiln's outputs against PyTorch, spec by spec, with Kiln's own error measures.

    python scripts/torch_check.py --kiln build-gpu/kiln --out OUT_DIR examples/*.json

Per spec: `kiln validate SPEC --normalized -` gives the graph Kiln validated (docs/normalized-graph.md);
seeded random inputs in Kiln's ranges are written in Kiln's raw encoding; `kiln run SPEC --inputs DIR
--save-outputs DIR` computes the outputs; PyTorch computes the same graph from the same inputs (fp32, TF32
off), rounding every written tensor to its dtype and carrying magnitudes (reference_math.h); each output is
judged by kiln::measure_error against the tolerance kiln::check_outputs gives it. Results in
OUT_DIR/torch_check.json. Exit codes: EXIT_CODES below (--help lists them); docs/numerics.md "Cross-check
against PyTorch" says more.

The kiln binary is always needed: it reads every spec. --skip-kiln skips only `kiln run` and compares the
PyTorch interpreter in fp32 against itself in fp64 (a self-test; with --device cpu it needs no GPU).

PyTorch is imported only once the arguments are good (import_torch, and where a function computes with it):
--help, a usage error and a spec kiln refuses need no PyTorch.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

from .normalized import NormalizedError, last_line, normalize  # standard library only

# The checker's exit codes: a spec kiln refuses is neither a numerics mismatch nor bad usage of this script.
EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3
EXIT_CODES = f"""exit codes:
  {EXIT_OK}  every output Passed
  {EXIT_MISMATCH}  a numerics mismatch: an output is Incorrect, or Failed once kiln accepted its spec (kiln run or
     PyTorch failed, an output unreadable); also a failed encoding self-check, or kiln validate failing
     otherwise (killed, the environment, a bug)
  {EXIT_USAGE}  bad usage: an argument, no kiln binary, a missing spec, no PyTorch, no CUDA for --device cuda,
     --out not creatable
  {EXIT_REFUSED}  kiln refused a spec (kiln validate exited 2, bad input, or 5, not supported; the spec's row is
     Failed with kiln's exit code and message) and nothing else went wrong ({EXIT_MISMATCH} wins when both happen)"""

KILN_EXIT = {1: "a check failed", 2: "bad input or usage", 3: "environment", 4: "corruption", 5: "not supported",
             6: "stale plan refused", 7: "made by a newer Kiln", 10: "internal error", 130: "interrupted"}


def run_kiln(args, spec, in_dir, out_dir):
    # The output folder is the checker's own (a kept one from an earlier run is written over).
    cmd = [args.kiln, "run", spec, "--inputs", in_dir, "--save-outputs", out_dir, "--force"]
    if args.allow_tf32:
        cmd.append("--allow-tf32")
    cmd += args.kiln_arg
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"cmd": cmd, "exit_code": None, "seconds": time.time() - t0,
                "error": f"kiln run timed out after {args.timeout} s"}
    rec = {"cmd": cmd, "exit_code": p.returncode, "seconds": round(time.time() - t0, 3),
           "stdout": p.stdout[-4000:], "stderr": p.stderr[-4000:]}
    if p.returncode != 0:
        why = last_line(p.stderr) or last_line(p.stdout)
        rec["error"] = f"kiln run exited {p.returncode} ({KILN_EXIT.get(p.returncode, '?')}): {why}"
    return rec


def import_torch():
    """PyTorch, or None (said on stderr) when this Python has none."""
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch alone is enough here
    try:
        import torch
    except ImportError:
        print("torch_check needs PyTorch (e.g. /opt/torch/.venv/bin/python)", file=sys.stderr)
        return None
    return torch


def sync(device):
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def describe(tensors):
    return {t.name: {"dims": t.dims, "strides": t.strides, "dtype": t.dtype} for t in tensors}


def fail_rows(spec, g, reason):
    if g is None:
        return [{"spec": spec, "output": "-", "dtype": "-", "elements": 0, "verdict": "Failed", "reason": reason}]
    return [{"spec": spec, "output": t.name, "dtype": t.dtype, "elements": t.elements, "verdict": "Failed",
             "reason": reason} for t in g.output_tensors()]


def write_file(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def output_row(spec, t, o, e, tol):
    row = {"spec": spec, "output": t.name, "dtype": t.dtype, "elements": e["count"], "max_abs": e["max_abs"],
           "max_rel": e["max_rel"], "nmse": e["nmse"], "verdict": e["verdict"], "nan_count": e["nan_count"],
           "mismatch_count": e["mismatch_count"], "worst_index": e["worst_index"], "nmse_limit": e["nmse_limit"],
           "nmse_allowance": e["nmse_allowance"], "tolerance": tol, "reduction_length": o.reduction_length}
    if e["verdict"] != "Passed":
        why = []
        if e["nan_count"]:
            why.append(f"{e['nan_count']} NaN/Inf where the reference is finite")
        if e["mismatch_count"]:
            band = f"atol={tol['atol']:.2e} rtol={tol['rtol']:.2e}" + (
                f" acc={tol['acc_coeff']:.2e}*M" if tol["acc_coeff"] else "")
            why.append(f"{e['mismatch_count']}/{e['count']} outside {band} (worst at index {e['worst_index']})")
        if not (e["nmse"] <= e["nmse_limit"]):
            why.append(f"nmse {e['nmse']:.2e} > {e['nmse_limit']:.2e}")
        row["reason"] = "; ".join(why)
    return row


def check_spec(args, spec, files_dir):
    """One spec: returns (rows, record)."""
    rec = {"spec": spec}
    try:
        g, text = normalize(args.kiln, spec)
    except NormalizedError as e:
        if e.exit_code is None:  # kiln could not be run, was killed, or wrote no JSON
            return fail_rows(spec, None, f"spec: {e}"), rec
        rec["kiln_validate_exit_code"] = e.exit_code
        what = "kiln refused the spec" if e.refused else "kiln validate failed"
        rows = fail_rows(spec, None, f"{what} (exit {e.exit_code}, {KILN_EXIT.get(e.exit_code, '?')}): {e}")
        rows[0]["kiln_exit_code"] = e.exit_code
        rows[0]["refused"] = e.refused
        return rows, rec
    import torch

    from .compare import measure_error
    from .ops import run_graph_torch
    from .tensors import DTYPES, decode_tensor, encode_tensor, make_inputs

    rec["graph"] = g.name
    rec["outputs"] = describe(g.output_tensors())
    inputs = make_inputs(g, args.seed, args.device)
    candidate, cand_what = None, None
    with tempfile.TemporaryDirectory(prefix="torch_check_") as tmp:
        base = files_dir if files_dir else tmp
        in_dir, out_dir = os.path.join(base, "inputs"), os.path.join(base, "kiln_outputs")
        os.makedirs(in_dir, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        if files_dir:
            write_file(files_dir, "normalized.json", text.encode())
        for i, v in inputs.items():
            t = g.tensors[i]
            write_file(in_dir, t.name + ".bin", encode_tensor(v, DTYPES[t.dtype], t.dims, t.strides, args.device))
        rec["inputs"] = describe(g.tensors[i] for i in inputs)
        if not args.skip_kiln:
            k = run_kiln(args, spec, in_dir, out_dir)
            rec["kiln"] = k
            if "error" in k:
                return fail_rows(spec, g, k["error"]), rec
            print(f"    kiln: {last_line(k['stdout'])}", flush=True)
            try:
                candidate = {}
                for t in g.output_tensors():
                    with open(os.path.join(out_dir, t.name + ".bin"), "rb") as f:
                        candidate[t.index] = decode_tensor(f.read(), DTYPES[t.dtype], t.dims, t.strides, args.device)
            except (OSError, ValueError) as e:
                return fail_rows(spec, g, f"kiln output: {e}"), rec
            cand_what = "kiln"
    ref_dtype = torch.float64 if args.compute == "fp64" else torch.float32
    bound = args.tolerance == "bound"
    try:
        if candidate is None:  # --skip-kiln: the interpreter in fp32 is the candidate, fp64 the reference
            t0 = time.time()
            candidate, _ = run_graph_torch(g, inputs, args.device, torch.float32)
            sync(args.device)
            rec["torch_fp32_seconds"] = round(time.time() - t0, 3)
            cand_what, ref_dtype = "torch-fp32", torch.float64
        t0 = time.time()
        ref, mags = run_graph_torch(g, inputs, args.device, ref_dtype, magnitudes=bound)
        sync(args.device)
        rec["torch_seconds"] = round(time.time() - t0, 3)
    except Exception as e:  # noqa: BLE001 - any PyTorch failure is this spec's Failed row
        return fail_rows(spec, g, f"torch: {type(e).__name__}: {e}"), rec
    if files_dir:  # the PyTorch results in Kiln's encoding, beside the inputs and kiln's outputs
        for t in g.output_tensors():
            write_file(os.path.join(files_dir, "torch_outputs"), t.name + ".bin",
                       encode_tensor(ref[t.index], DTYPES[t.dtype], t.dims, t.strides, args.device))
            if mags is not None:
                write_file(os.path.join(files_dir, "torch_magnitudes"), t.name + ".bin",
                           encode_tensor(mags[t.index], DTYPES["fp32"], t.dims, t.strides, args.device))
    rec["candidate"] = cand_what
    rec["reference"] = "torch-" + ("fp64" if ref_dtype == torch.float64 else "fp32")
    rows = []
    for o in g.outputs:
        t = g.tensors[o.tensor]
        tol = o.tolerance_for(bound, args.allow_tf32, args.tolerance_scale)
        e = measure_error(candidate[t.index], ref[t.index], tol,
                          mags[t.index] if bound and not DTYPES[t.dtype].is_int else None)
        rows.append(output_row(spec, t, o, e, tol))
    del candidate, ref, mags
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows, rec


def fmt(v):
    return f"{v:.2e}" if isinstance(v, float) else "-"


def print_table(rows):
    head = ["spec", "output", "dtype", "elements", "max_abs", "max_rel", "nmse", "verdict"]
    table = [[r["spec"], r["output"], r["dtype"], str(r["elements"]), fmt(r.get("max_abs")), fmt(r.get("max_rel")),
              fmt(r.get("nmse")), r["verdict"] + (f": {r['reason']}" if r.get("reason") else "")] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(head)]
    widths[-1] = len(head[-1])
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    print(line(head))
    print(line(["-" * w for w in widths]))
    for row in table:
        print(line(row))


def git_revision():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        p = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return p.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def kiln_doctor(kiln):
    try:
        p = subprocess.run([kiln, "doctor", "--json"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"exit_code": p.returncode, "stdout": p.stdout[-2000:], "stderr": p.stderr[-2000:]}


def disable_tf32():
    """The reference must be more accurate than what it judges: no TF32 in PyTorch's fp32 conv/matmul.
    PyTorch >= 2.9 has per-backend fp32_precision, and refuses a mix of it with the legacy flags."""
    import torch

    b = torch.backends
    if hasattr(b.cuda.matmul, "fp32_precision") and hasattr(getattr(b, "cudnn", None), "conv"):
        b.cuda.matmul.fp32_precision = "ieee"
        b.cudnn.conv.fp32_precision = "ieee"
        return "cuda.matmul and cudnn.conv fp32_precision=ieee"
    b.cuda.matmul.allow_tf32 = False
    b.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return "allow_tf32=False (matmul, cudnn)"


def positive_finite(text):
    """argparse type: a finite number > 0 (a NaN scale would pass every output)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'")
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got '{text}'")
    return v


def seed_value(text):
    """argparse type: a seed as Kiln takes one (kiln run --seed): a whole number from 0 to 2^64-1, in decimal."""
    if not (text.isascii() and text.isdigit()) or int(text) >= 1 << 64:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {(1 << 64) - 1}, got '{text}'")
    return int(text)


def exit_code(rows, encoding_failures):
    """EXIT_CODES: a mismatch (or a failure after kiln accepted the spec) before a refusal, a refusal before OK."""
    if encoding_failures or any(r["verdict"] != "Passed" and not r.get("refused") for r in rows):
        return EXIT_MISMATCH
    return EXIT_REFUSED if any(r.get("refused") for r in rows) else EXIT_OK


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="torch_check.py", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="+", help="spec JSON files (docs/spec.md)")
    ap.add_argument("--kiln", default=os.environ.get("KILN", "build-gpu/kiln"), help="kiln binary, always needed: "
                    "`kiln validate --normalized` reads every spec, and `kiln run` runs it unless --skip-kiln "
                    "(default: $KILN or build-gpu/kiln)")
    ap.add_argument("--out", default="out/torch_check", help="folder for torch_check.json (default: %(default)s)")
    ap.add_argument("--seed", type=seed_value, default=1,
                    help="seed of the random inputs, 0 to 2^64-1 (default: %(default)s)")
    ap.add_argument("--device", default="cuda", help="where PyTorch computes: cuda (default), cuda:N or cpu")
    ap.add_argument("--compute", choices=["fp32", "fp64"], default="fp32",
                    help="PyTorch reference precision (default fp32, TF32 off)")
    ap.add_argument("--skip-kiln", action="store_true", help="no `kiln run` (the binary still reads the specs): "
                    "compare the PyTorch interpreter in fp32 against itself in fp64 (self-test)")
    ap.add_argument("--allow-tf32", action="store_true",
                    help="pass --allow-tf32 to kiln run and judge fp32 outputs with the TF32 tolerance")
    ap.add_argument("--tolerance-scale", type=positive_finite, default=1.0,
                    help="multiply atol, rtol and the accumulation coefficient (CheckOptions::tolerance_scale)")
    ap.add_argument("--tolerance", choices=["bound", "legacy"], default="bound",
                    help="bound (default): Kiln's check with magnitudes, the accumulation bound; legacy: "
                    "check_outputs from values alone (plain fp32 atol and nmse x K/64)")
    ap.add_argument("--kiln-arg", action="append", default=[],
                    help="extra argument for kiln run, repeatable (e.g. --kiln-arg=--use-store)")
    ap.add_argument("--keep-files", action="store_true",
                    help="keep the normalized graph, inputs, kiln's and PyTorch's outputs (Kiln's encoding) under "
                    "OUT/files/<n>_<spec>/{normalized.json,inputs,kiln_outputs,torch_outputs}/")
    ap.add_argument("--timeout", type=positive_finite, default=900,
                    help="seconds allowed per kiln run, a positive number (default 900)")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    path = shutil.which(args.kiln) if os.sep not in args.kiln else args.kiln
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        print(f"torch_check: kiln binary '{args.kiln}' not found or not executable (--kiln PATH: it reads every "
              "spec, with --skip-kiln too)", file=sys.stderr)
        return EXIT_USAGE
    args.kiln = os.path.abspath(path)
    for s in args.specs:
        if not os.path.isfile(s):
            why = "is a folder, not a spec file" if os.path.isdir(s) else "not found"
            print(f"torch_check: spec '{s}' {why}", file=sys.stderr)
            return EXIT_USAGE
    torch = import_torch()
    if torch is None:
        return EXIT_USAGE
    from .tensors import check_encoding

    try:
        torch.device(args.device)
    except (RuntimeError, ValueError) as e:
        print(f"torch_check: --device {args.device}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_check: CUDA is not available to this PyTorch; use --device cpu", file=sys.stderr)
        return EXIT_USAGE
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print(f"torch_check: cannot create --out '{args.out}': {e}", file=sys.stderr)
        return EXIT_USAGE
    if sys.byteorder != "little":
        print("torch_check: Kiln's raw files are little-endian; byte views here assume a little-endian host",
              file=sys.stderr)
    tf32_setting = disable_tf32()

    gpu = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else None
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
          f"device {args.device}" + (f": {gpu}" if gpu else ""))
    print(f"kiln: {args.kiln}" + (" (kiln run skipped: PyTorch fp32 vs fp64 self-test)" if args.skip_kiln else ""))
    enc_fail = check_encoding(args.device)
    print("encoding self-check (host_tensor_test.cc values, every fp16/bf16/fp8 bit pattern): " +
          ("ok" if not enc_fail else "FAILED: " + "; ".join(enc_fail[:5])))
    meta = {"argv": sys.argv, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "torch_cudnn": torch.backends.cudnn.version(), "device": args.device, "gpu": gpu,
            "python": platform.python_version(), "host": platform.node(), "git": git_revision(),
            "kiln": None if args.skip_kiln else args.kiln, "kiln_validate": args.kiln, "seed": args.seed,
            "compute": args.compute, "skip_kiln": args.skip_kiln, "allow_tf32": args.allow_tf32,
            "tolerance_scale": args.tolerance_scale, "tolerance": args.tolerance, "torch_tf32": tf32_setting,
            "encoding_self_check": enc_fail or "ok", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if not args.skip_kiln:
        meta["kiln_doctor"] = kiln_doctor(args.kiln)

    rows, specs = [], []
    for i, spec in enumerate(args.specs):
        print(f"[{i + 1}/{len(args.specs)}] {spec}", flush=True)
        files_dir = None
        if args.keep_files:
            stem = os.path.splitext(os.path.basename(spec))[0]
            files_dir = os.path.join(args.out, "files", f"{i:02d}_{stem}")
        r, rec = check_spec(args, spec, files_dir)
        rows += r
        specs.append(rec)
    print()
    print_table(rows)
    bad = [r for r in rows if r["verdict"] != "Passed"]
    ok = not bad and not enc_fail
    refused = sorted({r["spec"] for r in rows if r.get("refused")})
    code = exit_code(rows, enc_fail)
    result = {"meta": meta, "rows": rows, "specs": specs,
              "summary": {"rows": len(rows), "passed": len(rows) - len(bad), "not_passed": len(bad),
                          "refused_specs": refused, "ok": ok, "exit_code": code}}
    path = os.path.join(args.out, "torch_check.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, allow_nan=True)
        f.write("\n")
    print(f"\n{len(rows) - len(bad)}/{len(rows)} outputs agree" +
          (f"; kiln refused {len(refused)} spec(s)" if refused else "") + f"; results in {path}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
