#!/usr/bin/env python3
"""Merge the benchmark suite's part files and write the report.

    python3 bench/report.py PART.json [PART.json ...] --out-dir bench/results/h200 --markdown BENCHMARKS.md

Writes into --out-dir: suite.json (the merged parts; "provenance" says which part file gave each case, the
block and each key of cold_start, dynamic and capture), summary.json ({"meta", "goals"}) and the PNG charts
(speedup, limits, coldstart, tuning_cost, block); and the Markdown report at --markdown, which names for each
figure its part file and when that part was measured, and writes no absolute path of the machine that ran a
part (bench/make_benchmarks_md.py runs this over the committed parts: the one command for BENCHMARKS.md).

Merging: cases are keyed by "id" and block entries by (batch, tokens); a later part (argv order) overrides
an earlier one per key, dicts merged recursively. A null in a later part does not erase a number that an
earlier part measured. meta: every part's meta is kept under meta["parts"] (with its file name); top-level
fields come from the last part that has them. limits: per-part values under limits["parts"]; the last
positive number is used for the fractions. Top-level "errors" of the parts are merged the same way.

Ratios: speed-up = peer_ms / kiln_ms (>1: Kiln faster); Kiln's time = kiln.served_ms, else kiln.tuned_ms.
Fraction of the matmul rate = flops / ms / 1e9 / limits.matmul_bf16_tflops (FLOP-bound families);
fraction of copy bandwidth = min_bytes / ms / 1e9 / limits.copy_tbps (every case); the limits are those
measured in the same run as the case (the part that gave its PyTorch figures), else the last part's.
A value that is missing, null or not a positive finite number is "not measured"; nothing is made up.

Exit status: 0, or 2 when an input cannot be read or parsed (the message names the file).
"""
import argparse
import collections
import json
import math
import os
import re
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

FAMILIES = ["conv_bias_relu", "matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe", "sdpa", "sdpa_band",
            "layer_norm", "rms_norm"]
FLOP_BOUND = {"conv_bias_relu", "matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe", "sdpa", "sdpa_band"}
NORMS = {"layer_norm", "rms_norm"}
MATMUL_FAMILIES = {"matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe"}
FAMILY_TITLES = {
    "conv_bias_relu": "Convolution + bias + ReLU (ResNet-50 layers, fp16 NHWC, batch 32)",
    "matmul_bias_gelu": "Matmul + bias + GELU (bf16)",
    "matmul": "Plain matmul (bf16)",
    "matmul_amax": "Matmul + AMAX (bf16)",
    "fp8_recipe": "FP8 recipe (e4m3 inputs, bf16 output, AMAX, next scale)",
    "sdpa": "Scaled dot-product attention, forward (bf16)",
    "sdpa_band": "Attention with a diagonal band: sliding window, chunked prefill, decode (bf16, causal, GQA 32/8)",
    "layer_norm": "LayerNorm (bf16, bf16 scale/bias)",
    "rms_norm": "RMSNorm (bf16, bf16 scale)",
}
# peer key in case["torch"] -> label
PEERS = [("eager_ms", "eager"), ("compile_ms", "torch.compile"), ("tunableop_ms", "TunableOp"),
         ("mm_only_eager_ms", "eager matmul only"), ("cudnn_ms", "SDPA cuDNN"), ("flash_ms", "SDPA flash"),
         ("efficient_ms", "SDPA efficient"), ("flex_ms", "FlexAttention (compiled)")]
PEER_LABEL = dict(PEERS)
# peers shown in a family's table even when none of its cases measured them
FAMILY_PEERS = {
    "conv_bias_relu": ["eager_ms", "compile_ms"],
    "matmul_bias_gelu": ["eager_ms", "compile_ms", "tunableop_ms"],
    "matmul": ["eager_ms", "compile_ms", "tunableop_ms"],
    "matmul_amax": ["eager_ms", "mm_only_eager_ms", "compile_ms", "tunableop_ms"],
    "fp8_recipe": ["eager_ms", "compile_ms", "tunableop_ms"],
    "sdpa": ["cudnn_ms", "flash_ms"],
    "sdpa_band": ["eager_ms", "cudnn_ms", "flash_ms", "efficient_ms", "flex_ms", "compile_ms"],
    "layer_norm": ["eager_ms", "compile_ms"],
    "rms_norm": ["eager_ms", "compile_ms"],
}
NM = "not measured"
GENERATOR = "python3 bench/make_benchmarks_md.py"
WHY_DEFAULT = "see docs/h200-results.md"


# ----------------------------------------------------------------------------------------------- helpers
def num(x):
    """x as a finite float, else None (bools, strings, NaN, inf and nulls are 'not measured')."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def pos(x):
    """x as a positive finite float, else None (a time of 0 cannot be divided by)."""
    x = num(x)
    return x if x is not None and x > 0 else None


def div(a, b):
    a, b = num(a), pos(b)
    if a is None or b is None:
        return None
    return a / b


def geomean(xs):
    xs = [x for x in xs if x is not None]
    if not xs or any(x <= 0 for x in xs):
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def fmt(x, unit="", sig=3):
    """sig (3) significant digits, no exponent for ordinary magnitudes; None -> 'not measured'."""
    x = num(x)
    if x is None:
        return NM
    if x == 0:
        return "0" + unit
    mag = math.floor(math.log10(abs(x)))
    if mag < -6 or mag > 12:
        return f"{x:.{sig}g}{unit}"
    digits = sig - 1 - mag
    r = round(x, digits)
    if digits <= 0:
        return f"{int(r)}{unit}"
    return f"{r:.{digits}f}{unit}"


def fx(x):
    return NM if num(x) is None else fmt(x) + "x"


def fpct(x):
    return NM if num(x) is None else fmt(100.0 * x) + "%"


def dget(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def as_dict(x):
    return x if isinstance(x, dict) else {}


def md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def deep_merge(old, new):
    """new over old, per key; dicts merged recursively; a None in new keeps old's value."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new if new is not None else old
    out = dict(old)
    for k, v in new.items():
        if k in out:
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def normalize_errors(errs, where):
    """errors as {key: message}: a list becomes {where#i: message}, a string {where: message}."""
    if errs is None:
        return {}
    if isinstance(errs, dict):
        return {str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in errs.items()}
    if isinstance(errs, list):
        return {f"{where}#{i}": (v if isinstance(v, str) else json.dumps(v)) for i, v in enumerate(errs)}
    return {where: str(errs)}


def load_shapes():
    """The suite's expected cases and block shapes (bench/suite/shapes.py), or None when it cannot load."""
    try:
        sys.path.insert(0, os.path.join(HERE, "suite"))
        sys.dont_write_bytecode = True  # leave no __pycache__ behind in the source tree
        import shapes  # noqa: E402
        cs = []
        for c in shapes.cases():
            c = dict(c)
            c.pop("spec", None)
            cs.append(c)
        return cs, list(shapes.BLOCK_SHAPES)
    except Exception as e:  # the report must still work from the JSON alone
        print(f"note: bench/suite/shapes.py not loaded ({e}); only the measured cases are reported",
              file=sys.stderr)
        return None, []


# ----------------------------------------------------------------------------------------------- merging
def part_shape_error(d):
    """What makes a part file unusable (None when it is usable): the keys the merge reads, of the wrong type."""
    for k in ("meta", "limits", "errors", "cold_start", "dynamic", "capture"):
        if d.get(k) is not None and not isinstance(d.get(k), dict):
            return f"'{k}' is a {type(d[k]).__name__}, expected an object"
    for k in ("cases", "block"):
        if d.get(k) is not None and not isinstance(d.get(k), list):
            return f"'{k}' is a {type(d[k]).__name__}, expected a list"
    for i, c in enumerate(d.get("cases") or []):
        if not isinstance(c, dict):
            return f"cases[{i}] is a {type(c).__name__}, expected an object"
        for k in ("id", "name", "family"):
            if c.get(k) is not None and not isinstance(c.get(k), str):
                return f"cases[{i}].{k} is a {type(c[k]).__name__}, expected a string"
        for k in ("kiln", "torch", "errors", "params"):
            if c.get(k) is not None and not isinstance(c.get(k), dict):
                return f"cases[{i}].{k} is a {type(c[k]).__name__}, expected an object"
    return None


def read_parts(paths):
    parts = []
    for p in paths:
        try:
            with open(p, "r", encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            print(f"error: cannot read {p}: {e}", file=sys.stderr)
            sys.exit(2)
        if not isinstance(d, dict):
            print(f"error: cannot read {p}: the top level is not a JSON object", file=sys.stderr)
            sys.exit(2)
        bad = part_shape_error(d)
        if bad:
            print(f"error: cannot use {p}: {bad}", file=sys.stderr)
            sys.exit(2)
        ids = collections.Counter(str(c.get("id") or c.get("name")) for c in d.get("cases") or [])
        dups = sorted(i for i, n in ids.items() if n > 1)
        if dups:
            print(f"warning: {p}: case id(s) {', '.join(dups)} appear more than once; the last one counts",
                  file=sys.stderr)
        parts.append((p, d))
    return parts


def merge(parts):
    meta = {}
    meta_parts = []
    limits = {}
    limits_parts = []
    cases = {}
    case_order = []
    block = {}
    block_order = []
    sections = {"cold_start": {}, "dynamic": {}, "capture": {}}
    errors = {}
    # Which part file gave what (base names): a case's files, the block's, each section key's last one.
    prov = {"cases": {}, "block": [], "cold_start": {}, "dynamic": {}, "capture": {}}
    for path, d in parts:
        base = os.path.basename(path)
        m = as_dict(d.get("meta"))
        meta_parts.append(dict(m, file=base))
        for k, v in m.items():
            if v is not None:
                meta[k] = v
        lim = as_dict(d.get("limits"))
        limits_parts.append(dict(lim, file=base))
        for k, v in lim.items():
            if pos(v) is not None:  # the last usable value; a part's bad value stays under limits["parts"]
                limits[k] = v
        for c in d.get("cases") or []:
            if not isinstance(c, dict):
                continue
            cid = c.get("id") or c.get("name")
            if cid is None:
                continue
            cid = str(cid)
            if any(pos(lim.get(k)) is not None for k in ("matmul_bf16_tflops", "copy_tbps")):
                # The limits measured in the same run as this part's figures: fractions use them.
                c = dict(c, run_limits={k: lim.get(k) for k in ("matmul_bf16_tflops", "copy_tbps")})
            if base not in prov["cases"].setdefault(cid, []):
                prov["cases"][cid].append(base)
            if cid in cases:
                cases[cid] = deep_merge(cases[cid], c)
            else:
                cases[cid] = dict(c)
                case_order.append(cid)
        for b in d.get("block") or []:
            if not isinstance(b, dict):
                continue
            key = (b.get("batch"), b.get("tokens"))
            if base not in prov["block"]:
                prov["block"].append(base)
            if key in block:
                block[key] = deep_merge(block[key], b)
            else:
                block[key] = dict(b)
                block_order.append(key)
        for s in sections:
            if isinstance(d.get(s), dict):
                sections[s] = deep_merge(sections[s], d[s])
                for k, v in d[s].items():
                    if v is not None:
                        prov[s][k] = base
        for k, v in normalize_errors(d.get("errors"), os.path.basename(path)).items():
            errors[k] = v
    meta["parts"] = meta_parts
    limits["parts"] = limits_parts
    out = {"meta": meta, "limits": limits,
           "cases": [cases[i] for i in case_order],
           "block": [block[k] for k in block_order],
           "provenance": prov}
    for s, v in sections.items():
        if v:
            out[s] = v
    if errors:
        out["errors"] = errors
    return out


# ----------------------------------------------------------------------------------------------- analysis
class Case:
    """One case of the report: the merged measurement (possibly absent) and its derived numbers."""

    def __init__(self, family, name, cid, rec, expected, limits):
        self.family, self.name, self.id = family, name, cid
        self.rec = rec or {}
        self.measured = rec is not None
        self.kiln = as_dict(self.rec.get("kiln"))
        self.torch = as_dict(self.rec.get("torch"))
        self.errors = normalize_errors(self.rec.get("errors"), "case")
        exp = expected or {}
        self.flops = num(self.rec.get("flops"))
        if self.flops is None:
            self.flops = num(exp.get("flops"))
        self.min_bytes = num(self.rec.get("min_bytes"))
        if self.min_bytes is None:
            self.min_bytes = num(exp.get("min_bytes"))
        self.params = self.rec.get("params") or exp.get("params") or {}
        self.served = pos(self.kiln.get("served_ms"))
        self.tuned = pos(self.kiln.get("tuned_ms"))
        self.kiln_ms = self.served if self.served is not None else self.tuned
        self.heuristic = pos(self.kiln.get("heuristic_ms"))
        self.speedup = {k: div(self.torch.get(k), self.kiln_ms) for k, _ in PEERS}
        self.tuned_vs_heuristic = div(self.heuristic, self.tuned)
        run = as_dict(self.rec.get("run_limits"))  # the limits of the run that measured this case, if any
        mm = pos(run.get("matmul_bf16_tflops")) or pos(limits.get("matmul_bf16_tflops"))
        bw = pos(run.get("copy_tbps")) or pos(limits.get("copy_tbps"))
        self.flop_frac = None
        if family in FLOP_BOUND and self.kiln_ms and self.flops and mm:
            self.flop_frac = self.flops / self.kiln_ms / 1e9 / mm
        self.bw_frac = None
        if self.kiln_ms and self.min_bytes and bw:
            self.bw_frac = self.min_bytes / self.kiln_ms / 1e9 / bw
        self.amax_overhead = div(self.tuned, self.kiln.get("plain_ms")) if family == "matmul_amax" else None

    def error_for(self, *keys):
        """The recorded error that explains a missing value (exact key, then 'kiln.key'/'torch.key', then a side)."""
        for k in keys:
            for cand in (k, f"kiln.{k}", f"torch.{k}", f"kiln/{k}", f"torch/{k}"):
                if cand in self.errors:
                    return self.errors[cand]
        return None


def build_cases(merged, expected_cases):
    limits = as_dict(merged.get("limits"))
    recs = {str(c.get("id") or c.get("name")): c for c in merged.get("cases", [])}
    out = []
    seen = set()
    for e in expected_cases or []:
        rec = recs.get(e["id"])
        out.append(Case(e["family"], (rec or {}).get("name") or e["name"], e["id"], rec, e, limits))
        seen.add(e["id"])
    for cid, rec in recs.items():
        if cid in seen:
            continue
        fam = rec.get("family") or "other"
        out.append(Case(fam, rec.get("name") or cid, cid, rec, None, limits))
    order = {f: i for i, f in enumerate(FAMILIES)}
    # stable: families in suite order, cases in shapes.py / appearance order within a family
    out.sort(key=lambda c: order.get(c.family, len(FAMILIES)))
    return out


def by_family(cases):
    fams = {}
    for c in cases:
        fams.setdefault(c.family, []).append(c)
    return fams


def goal(name, ratio, target, detail, direction="ge", partial=False):
    r = num(ratio)
    if r is None:
        met = None
    elif direction == "le":
        met = r <= target
    else:
        met = r >= target
    g = {"name": name, "ratio": r, "target": target, "met": met, "detail": detail, "direction": direction}
    if partial and r is not None:
        g["partial"] = True
    return g


def family_goal(name, cases, value, target, mode="geomean", direction="ge", what="ratio"):
    """A goal over a family's shapes: mode 'geomean', 'every' (min, or max for 'le')."""
    vals = [(c, value(c)) for c in cases]
    got = [(c, v) for c, v in vals if num(v) is not None and v > 0]
    missing = [c.name for c, v in vals if num(v) is None or v <= 0]
    if not cases:
        return goal(name, None, target, "no cases of this family in the suite", direction)
    if not got:
        errs = sorted({e for c in cases for e in c.errors.values()})
        d = f"not measured for any of {len(cases)} shapes"
        if errs:
            d += "; errors: " + "; ".join(errs[:3])
        return goal(name, None, target, d, direction)
    if mode == "geomean":
        r = geomean([v for _, v in got])
        lo = min(got, key=lambda cv: cv[1])
        hi = max(got, key=lambda cv: cv[1])
        d = (f"geomean of {what} over {len(got)}/{len(cases)} shapes; min {fmt(lo[1])} ({lo[0].name}), "
             f"max {fmt(hi[1])} ({hi[0].name})")
    else:
        pick = max if direction == "le" else min
        c0, r = pick(got, key=lambda cv: cv[1])
        d = f"worst {what} over {len(got)}/{len(cases)} shapes: {fmt(r)} at {c0.name}"
        d += "; per shape: " + ", ".join(f"{c.name} {fmt(v)}" for c, v in got)
    if missing:
        d += "; not measured: " + ", ".join(missing)
    return goal(name, r, target, d, direction, partial=bool(missing))


def compute_goals(cases, merged, block_shapes):
    fams = by_family(cases)
    F = lambda f: fams.get(f, [])  # noqa: E731
    sp = lambda k: (lambda c: c.speedup.get(k))  # noqa: E731
    goals = []
    goals.append(family_goal("conv_bias_relu vs eager", F("conv_bias_relu"), sp("eager_ms"), 1.6, what="speed-up"))
    goals.append(family_goal("conv_bias_relu vs torch.compile", F("conv_bias_relu"), sp("compile_ms"), 1.3,
                             what="speed-up"))
    goals.append(family_goal("matmul_bias_gelu vs eager", F("matmul_bias_gelu"), sp("eager_ms"), 1.12,
                             what="speed-up"))
    goals.append(family_goal("matmul_bias_gelu vs torch.compile", F("matmul_bias_gelu"), sp("compile_ms"), 1.0,
                             what="speed-up"))
    goals.append(family_goal("matmul_bias_gelu vs TunableOp", F("matmul_bias_gelu"), sp("tunableop_ms"), 1.0,
                             what="speed-up"))
    goals.append(family_goal("matmul fraction of matmul rate", F("matmul"), lambda c: c.flop_frac, 0.95,
                             what="achieved TFLOP/s / limits.matmul_bf16_tflops"))
    goals.append(family_goal("matmul_amax vs eager (every shape)", F("matmul_amax"), sp("eager_ms"), 1.08,
                             mode="every", what="speed-up"))
    goals.append(family_goal("matmul_amax vs torch.compile (every shape)", F("matmul_amax"), sp("compile_ms"), 1.0,
                             mode="every", what="speed-up"))
    goals.append(family_goal("fp8_recipe vs eager (every shape)", F("fp8_recipe"), sp("eager_ms"), 1.08,
                             mode="every", what="speed-up"))
    goals.append(family_goal("fp8_recipe vs torch.compile (every shape)", F("fp8_recipe"), sp("compile_ms"), 1.0,
                             mode="every", what="speed-up"))
    goals.append(family_goal("AMAX overhead (every shape)", F("matmul_amax"), lambda c: c.amax_overhead, 1.08,
                             mode="every", direction="le", what="kiln tuned_ms / plain_ms"))

    # tuned vs heuristic: the best matmul_bias_gelu shape
    mbg = F("matmul_bias_gelu")
    got = [(c, c.tuned_vs_heuristic) for c in mbg if c.tuned_vs_heuristic is not None]
    if got:
        c0, r = max(got, key=lambda cv: cv[1])
        d = (f"best heuristic_ms/tuned_ms among matmul_bias_gelu shapes: {c0.name}; per shape: "
             + ", ".join(f"{c.name} {fmt(v)}" for c, v in got))
        goals.append(goal("tuned vs heuristic where the heuristic is poor", r, 1.2, d))
    else:
        goals.append(goal("tuned vs heuristic where the heuristic is poor", None, 1.2,
                          "heuristic_ms or tuned_ms not measured for any matmul_bias_gelu shape"))

    # tuning cost: every case's tune wall time under torch.compile's compile time
    got = []
    for c in cases:
        ok = c.kiln.get("tune_exit") in (0, None)  # a failed tune's wall time is no tuning cost
        t, ct = pos(c.kiln.get("tune_wall_s")) if ok else None, pos(c.torch.get("compile_time_s"))
        if t is not None and ct is not None:
            got.append((c, ct / t))
    if got:
        c0, r = min(got, key=lambda cv: cv[1])
        d = (f"min over {len(got)} cases with both times of compile_time_s / tune_wall_s: {fmt(r)} at "
             f"{c0.family} {c0.name}")
        goals.append(goal("tuning cost vs torch.compile (every case)", r, 1.0, d))
    else:
        goals.append(goal("tuning cost vs torch.compile (every case)", None, 1.0,
                          "no case has both kiln.tune_wall_s and torch.compile_time_s"))

    errors = as_dict(merged.get("errors"))

    def sect_err(section):
        es = [f"{k}: {v}" for k, v in errors.items() if section in k]
        return ("; error: " + "; ".join(es)) if es else ""

    cs = as_dict(merged.get("cold_start"))
    load = pos(cs.get("load_ms"))
    r = num(cs.get("heuristic_build_over_load")) or div(cs.get("heuristic_build_ms"), load)
    goals.append(goal("cold start: heuristic build vs load", r, 8.0,
                      f"heuristic_build_ms {fmt(cs.get('heuristic_build_ms'))} / load_ms {fmt(load)}"
                      + ("" if r is not None else sect_err("cold_start"))))
    rload = pos(cs.get("runtime_compiled_load_ms")) or load
    r = num(cs.get("runtime_compiled_build_over_load")) or div(cs.get("runtime_compiled_build_ms"), rload)
    goals.append(goal("cold start: runtime-compiled build vs load", r, 100.0,
                      f"{cs.get('runtime_compiled_graph') or 'runtime-compiled'} (the lowest ratio of those measured): "
                      f"build {fmt(cs.get('runtime_compiled_build_ms'))} ms / load {fmt(rload)} ms"
                      + ("" if r is not None else sect_err("cold_start"))))

    dy = as_dict(merged.get("dynamic"))
    bg = as_dict(dy.get("new_shape_by_graph"))
    per = {k: as_dict(v) for k, v in bg.items() if num(as_dict(v).get("ratio")) is not None}
    if per:  # the goal holds for every graph: the lowest graph's median ratio
        r = min(num(v.get("ratio")) for v in per.values())
        text = "; ".join(f"{k}: static_build_ms {fmt(v.get('static_build_ms'))} / stopgap_first_ms "
                         f"{fmt(v.get('stopgap_first_ms'))} = {fmt(v.get('ratio'))} (medians of {v.get('sizes')} new sizes)"
                         for k, v in sorted(per.items()))
    else:
        r = div(dy.get("static_build_ms"), dy.get("stopgap_first_ms"))
        text = (f"static_build_ms {fmt(dy.get('static_build_ms'))} / stopgap_first_ms "
                f"{fmt(dy.get('stopgap_first_ms'))}")
    goals.append(goal("dynamic: static build vs stopgap first call", r, 50.0,
                      text + ("" if r is not None else sect_err("dynamic"))))
    pv = dy.get("promoted_vs_tuned")
    pv = [num(x) for x in pv] if isinstance(pv, list) else []
    pv = [x for x in pv if x is not None]
    r = max(pv) if pv else None
    goals.append(goal("dynamic: promoted within 3% of tuned", r, 1.03,
                      (f"max of promoted_vs_tuned ({dy.get('promoted_vs_tuned_from') or 'promoted_over_tuned'}) over "
                       f"{len(pv)} shapes: " + ", ".join(fmt(x) for x in pv))
                      if pv else "promoted_vs_tuned not measured" + sect_err("dynamic"), direction="le"))

    cap = as_dict(merged.get("capture"))
    goals.append(goal("capture: single graph", num(cap.get("single_speedup")), 1.8,
                      "capture.single_speedup" + ("" if num(cap.get("single_speedup")) is not None
                                                  else " not measured" + sect_err("capture"))))
    goals.append(goal("capture: chain", num(cap.get("chain_speedup")), 2.2,
                      "capture.chain_speedup" + ("" if num(cap.get("chain_speedup")) is not None
                                                 else " not measured" + sect_err("capture"))))

    goals.append(family_goal("sdpa vs cuDNN backend", F("sdpa"), sp("cudnn_ms"), 1.0, what="speed-up"))
    goals.append(family_goal("sdpa vs flash backend", F("sdpa"), sp("flash_ms"), 1.8, what="speed-up"))
    for fam in ("layer_norm", "rms_norm"):
        goals.append(family_goal(f"{fam} vs torch.compile", F(fam), sp("compile_ms"), 1.0, what="speed-up"))
        goals.append(family_goal(f"{fam} bandwidth fraction", F(fam), lambda c: c.bw_frac, 0.85,
                                 what="min_bytes/time / limits.copy_tbps"))

    # block
    blocks = block_rows(merged, block_shapes)
    for b in blocks:
        name = f"block b{b['batch']} t{b['tokens']}: Kiln graph vs best torch"
        if b["kiln_ms"] is None or b["best_torch"] is None:
            what = "Kiln graph_ms" if b["kiln_ms"] is None else "every torch mode"
            goals.append(goal(name, None, 1.0, f"{what} not measured" + ("" if b["measured"] else
                                                                         " (block shape absent)")
                              + b["err"]))
            continue
        d = (f"min(torch eager/compile no-CG/compile CG) = {fmt(b['best_torch'])} ms ({b['best_mode']}) / "
             f"Kiln graph {fmt(b['kiln_ms'])} ms")
        if b["missing_modes"]:
            d += "; not measured: " + ", ".join(b["missing_modes"])
        goals.append(goal(name, b["best_torch"] / b["kiln_ms"], 1.0, d, partial=bool(b["missing_modes"])))
    t16 = [b for b in blocks if b["tokens"] == 16]
    got = [(b, b["vs"].get("eager_ms")) for b in t16 if b["vs"].get("eager_ms") is not None]
    if got:
        b0, r = min(got, key=lambda bv: bv[1])
        goals.append(goal("block t16: Kiln graph vs eager", r, 1.3,
                          f"eager_ms / graph_ms at batch {b0['batch']}, tokens 16"))
    else:
        goals.append(goal("block t16: Kiln graph vs eager", None, 1.3,
                          "eager_ms or graph_ms not measured at tokens 16"))
    return goals


TORCH_BLOCK_MODES = [("eager_ms", "eager"), ("compile_nocg_ms", "compile (no CUDA graphs)"),
                     ("compile_cg_ms", "compile (CUDA graphs)")]


def block_rows(merged, block_shapes):
    recs = {}
    for b in merged.get("block", []):
        recs[(b.get("batch"), b.get("tokens"))] = b
    keys = list(block_shapes)
    keys += [k for k in recs if k not in keys]
    limits = as_dict(merged.get("limits"))
    mm = pos(limits.get("matmul_bf16_tflops"))
    rows = []
    for key in keys:
        key = tuple(key)
        rec = recs.get(key)
        b = rec or {}
        k, t = as_dict(b.get("kiln")), as_dict(b.get("torch"))
        kiln_ms = pos(k.get("graph_ms"))
        modes = [(label, key_, pos(t.get(key_))) for key_, label in TORCH_BLOCK_MODES]
        have = [(label, v) for label, _, v in modes if v is not None]
        best_mode, best = (min(have, key=lambda lv: lv[1]) if have else (None, None))
        errs = normalize_errors(b.get("errors"), "block")
        err = ("; error: " + "; ".join(f"{a}: {m}" for a, m in errs.items())) if errs else ""
        flops = num(b.get("flops"))
        rows.append({
            "batch": key[0], "tokens": key[1], "measured": rec is not None, "kiln": k, "torch": t,
            "kiln_ms": kiln_ms, "best_torch": best, "best_mode": best_mode,
            "missing_modes": [label for label, _, v in modes if v is None],
            "vs": {key_: div(v, kiln_ms) for _, key_, v in modes},
            "vs_best": div(best, kiln_ms),
            "flop_frac": (flops / kiln_ms / 1e9 / mm) if (flops and kiln_ms and mm) else None,
            "err": err, "errors": errs, "flops": flops,
        })
    return rows


# ----------------------------------------------------------------------------------------------- charts
def charts(cases, merged, block_shapes, out_dir):
    """Writes the PNGs; returns {chart name: path} of those written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"note: matplotlib not available ({e}); no charts written")
        return {}
    written = {}

    def save(fig, name):
        p = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(p, dpi=120)
        plt.close(fig)
        written[name] = p

    from matplotlib.ticker import FuncFormatter, NullFormatter, FixedLocator

    def plain_log_ticks(ax):
        """Log y axis with plain-number tick labels (0.5, 1, 2, 10, ...)."""
        lo, hi = ax.get_ylim()
        cands = [m * 10.0 ** e for e in range(-4, 7) for m in (1, 2, 5)]
        span = hi / max(lo, 1e-12)
        if span < 20:
            extra = (1.25, 1.5, 3, 4, 8) if span < 4 else (1.5, 3, 4, 8)
            cands = sorted(set(cands + [m * 10.0 ** e for e in range(-4, 7) for m in extra]))
        ticks = [c for c in cands if lo <= c <= hi]
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())

    def fam_separators(ax, fams_of_x, ymax_axes=1.0):
        prev = None
        start = 0
        spans = []
        for i, f in enumerate(fams_of_x + [None]):
            if f != prev:
                if prev is not None:
                    spans.append((prev, start, i - 1))
                start = i
                prev = f
        for j, (f, a, b) in enumerate(spans):
            if j:
                ax.axvline(a - 0.5, color="0.6", lw=0.8, ls=":")
            ax.text((a + b) / 2, 1.01, f, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                    fontsize=7, rotation=0)

    # 1. speed-up
    series = [(k, PEER_LABEL[k]) for k in ("eager_ms", "compile_ms", "tunableop_ms", "cudnn_ms", "flash_ms")]
    series = [(k, lab) for k, lab in series if any(c.speedup.get(k) for c in cases)]
    xs = [c for c in cases if any(c.speedup.get(k) for k, _ in series)]
    if series and xs:
        n = len(series)
        w = 0.8 / n
        fig, ax = plt.subplots(figsize=(max(10, 0.5 * len(xs) + 3), 6))
        for j, (k, lab) in enumerate(series):
            vals = [c.speedup.get(k) for c in xs]
            pos_ = [i - 0.4 + w * (j + 0.5) for i in range(len(xs))]
            ax.bar([p for p, v in zip(pos_, vals) if v], [v for v in vals if v], w, label=f"vs {lab}")
        ax.axhline(1.0, color="k", lw=1)
        ax.set_yscale("log")
        plain_log_ticks(ax)
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([c.name for c in xs], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("speed-up = peer time / Kiln time (x, log; >1: Kiln faster)")
        ax.set_xlabel("case (grouped by family; no bar: not measured)")
        ax.set_title("Kiln speed-up per case", pad=18)
        fam_separators(ax, [c.family for c in xs])
        ax.legend(fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)
        save(fig, "speedup.png")
    else:
        print("note: speedup.png skipped: no speed-up measured")

    # 2. limits
    xs = [c for c in cases if (c.family in NORMS and c.bw_frac) or (c.family not in NORMS and c.flop_frac)]
    if xs:
        fig, ax = plt.subplots(figsize=(max(10, 0.4 * len(xs) + 3), 5.5))
        vals = [100 * (c.bw_frac if c.family in NORMS else c.flop_frac) for c in xs]
        colors = ["tab:orange" if c.family in NORMS else "tab:blue" for c in xs]
        ax.bar(range(len(xs)), vals, color=colors)
        from matplotlib.patches import Patch
        ax.axhline(100, color="k", lw=1)
        ax.axhline(95, color="tab:blue", lw=0.8, ls="--")
        ax.axhline(85, color="tab:orange", lw=0.8, ls="--")
        ax.legend(handles=[Patch(color="tab:blue", label="% of matmul rate (FLOP-bound cases)"),
                           Patch(color="tab:orange", label="% of copy bandwidth (norms)"),
                           plt.Line2D([], [], color="tab:blue", ls="--", label="95% (plain matmul goal)"),
                           plt.Line2D([], [], color="tab:orange", ls="--", label="85% (norm goal)")],
                  fontsize=8, loc="upper left")
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([c.name for c in xs], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("% of limit (limits.matmul_bf16_tflops / copy_tbps)")
        ax.set_xlabel("case (grouped by family)")
        ax.set_title("Kiln's fraction of the measured limits", pad=18)
        fam_separators(ax, [c.family for c in xs])
        ax.grid(axis="y", alpha=0.3)
        save(fig, "limits.png")
    else:
        print("note: limits.png skipped: no fraction of limits (Kiln times, flops/min_bytes or limits missing)")

    # 3. cold start
    cs = as_dict(merged.get("cold_start"))
    items = [("load (store)", pos(cs.get("load_ms"))), ("heuristic build", pos(cs.get("heuristic_build_ms"))),
             ("runtime-compiled build", pos(cs.get("runtime_compiled_build_ms")))]
    items = [(lab, v) for lab, v in items if v is not None]
    if items:
        fig, ax = plt.subplots(figsize=(7, 5))
        bars = ax.bar([lab for lab, _ in items], [v for _, v in items],
                      color=["tab:green", "tab:blue", "tab:red"][:len(items)])
        for b_, (_, v) in zip(bars, items):
            ax.text(b_.get_x() + b_.get_width() / 2, v, fmt(v, " ms"), ha="center", va="bottom", fontsize=8)
        ax.set_yscale("log")
        plain_log_ticks(ax)
        ax.set_ylabel("time to obtain one plan (ms, log)")
        ax.set_title("Cold start: load from the store vs build")
        ax.tick_params(axis="x", rotation=15)
        ax.grid(axis="y", which="both", alpha=0.3)
        save(fig, "coldstart.png")
    else:
        print("note: coldstart.png skipped: cold_start not measured")

    # 4. tuning cost
    ser = [("kiln", "tune_wall_s", "Kiln tune (wall s)"), ("torch", "compile_time_s", "torch.compile (s)"),
           ("torch", "tunableop_tune_s", "TunableOp tune (s)")]
    val = lambda c, side, k: pos((c.kiln if side == "kiln" else c.torch).get(k))  # noqa: E731
    ser = [s for s in ser if any(val(c, s[0], s[1]) for c in cases)]
    xs = [c for c in cases if any(val(c, s, k) for s, k, _ in ser)]
    if xs and ser:
        n = len(ser)
        w = 0.8 / n
        fig, ax = plt.subplots(figsize=(max(10, 0.45 * len(xs) + 3), 5.5))
        for j, (side, k, lab) in enumerate(ser):
            vals = [val(c, side, k) for c in xs]
            p_ = [i - 0.4 + w * (j + 0.5) for i in range(len(xs))]
            ax.bar([p for p, v in zip(p_, vals) if v], [v for v in vals if v], w, label=lab)
        ax.set_yscale("log")
        plain_log_ticks(ax)
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([c.name for c in xs], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("time (s, log)")
        ax.set_xlabel("case (grouped by family; no bar: not measured)")
        ax.set_title("Tuning / compilation cost per case", pad=18)
        fam_separators(ax, [c.family for c in xs])
        ax.legend(fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)
        save(fig, "tuning_cost.png")
    else:
        print("note: tuning_cost.png skipped: no tuning or compile times")

    # 5. block
    rows = [b for b in block_rows(merged, block_shapes)
            if b["kiln_ms"] is not None or b["best_torch"] is not None]
    if rows:
        ser = [("kiln", "graph_ms", "Kiln (one CUDA graph)"), ("kiln", "stream_ms", "Kiln (stream)"),
               ("torch", "eager_ms", "eager"), ("torch", "compile_nocg_ms", "compile (no CUDA graphs)"),
               ("torch", "compile_cg_ms", "compile (CUDA graphs)")]
        ser = [s for s in ser if any(pos(b[s[0]].get(s[1])) for b in rows)]
        fig, axes = plt.subplots(1, len(rows), figsize=(4.5 * len(rows) + 1, 5), squeeze=False)
        colors = ["tab:blue", "tab:cyan", "tab:gray", "tab:orange", "tab:red"]
        for ax, b in zip(axes[0], rows):
            labs, vals, cols = [], [], []
            for (side, k, lab), col in zip(ser, colors):
                v = pos(b[side].get(k))
                labs.append(lab)
                vals.append(v or 0)
                cols.append(col)
                if v is None:
                    ax.text(len(labs) - 1, 0, "not\nmeasured", ha="center", va="bottom", fontsize=7)
            bars = ax.bar(range(len(labs)), vals, color=cols)
            for b_, v in zip(bars, vals):
                if v:
                    ax.text(b_.get_x() + b_.get_width() / 2, v, fmt(v), ha="center", va="bottom", fontsize=7)
            ax.set_xticks(range(len(labs)))
            ax.set_xticklabels(labs, rotation=35, ha="right", fontsize=8)
            ax.set_ylabel("GPU time per block (ms)")
            ax.set_title(f"batch {b['batch']}, {b['tokens']} tokens")
            ax.grid(axis="y", alpha=0.3)
        fig.suptitle("Transformer block (hidden 4096, bf16): GPU time per block")
        save(fig, "block.png")
    else:
        print("note: block.png skipped: block not measured")
    return written


# ----------------------------------------------------------------------------------------------- markdown
def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(md_escape(x) for x in r) + " |")
    return "\n".join(out)


def goal_value_text(g):
    """(measured, target) as text: fractions as %, ratios as x; one more digit while the rounded
    value would read the same as the target."""
    op = "≤" if g.get("direction") == "le" else "≥"
    pct = "fraction" in g["name"]
    r, t = g["ratio"], g["target"]
    if r is None:
        return NM, f"{op} {fmt(100 * t) + '%' if pct else fmt(t) + 'x'}"
    k = 100.0 if pct else 1.0
    u = "%" if pct else "x"
    sig = 3
    while sig < 6 and fmt(k * r, sig=sig) == fmt(k * t, sig=sig) and r != t:
        sig += 1
    return fmt(k * r, u, sig=sig), f"{op} {fmt(k * t, u)}"


def status_text(g):
    if g["met"] is None:
        return NM
    s = "met" if g["met"] else "**missed**"
    if g.get("partial"):
        s += " (partial data)"
    return s


def cell(c, side, key, f=fmt, mark=None):
    """A measured value, or 'not measured' (with a dagger when an error is recorded for it)."""
    d = c.kiln if side == "kiln" else c.torch
    v = pos(d.get(key)) if key.endswith(("_ms", "_s")) else num(d.get(key))  # a time of 0 or less: not measured
    if v is not None:
        return f(v)
    err = c.error_for(key, side)
    if err is not None and mark is not None:
        mark.append((c, key, err))
        return NM + " †"
    return NM


def family_section(fam, cs, notes):
    peers = list(FAMILY_PEERS.get(fam, ["eager_ms", "compile_ms"]))
    for k, _ in PEERS:
        if k not in peers and any(num(c.torch.get(k)) is not None for c in cs):
            peers.append(k)
    peers = [k for k, _ in PEERS if k in peers]
    sp_peers = [k for k in peers if k != "mm_only_eager_ms"]
    flop = fam in FLOP_BOUND
    hdr = ["shape", "Kiln ms", "heuristic ms", "tuned/heuristic (speed-up)"]
    hdr += [f"{PEER_LABEL[k]} ms" for k in peers]
    hdr += ["speed-ups", "%matmul rate", "%copy BW", "kiln tune s", "compile s"]
    has_tunable_s = any(num(c.torch.get("tunableop_tune_s")) is not None for c in cs) or fam in MATMUL_FAMILIES
    if has_tunable_s:
        hdr.append("TunableOp tune s")
    if fam == "matmul_amax":
        hdr += ["Kiln plain matmul ms", "AMAX overhead"]
    marks = []
    rows = []
    for c in cs:
        if not c.measured:
            errs = c.errors
            row = [c.name, NM + " (case absent)"] + [""] * (len(hdr) - 2)
            rows.append(row)
            continue
        kms = fmt(c.kiln_ms)
        if c.kiln_ms is None:
            err = c.error_for("served_ms", "tuned_ms", "kiln")
            if err:
                marks.append((c, "kiln", err))
                kms = NM + " †"
        else:
            choice = c.kiln.get("fusion_choice")
            unf = num(c.kiln.get("unfused_ms"))
            if unf is not None:  # Kiln runs the fused plan; the unfused chain's time shows what fusion buys
                kms += f" (unfused {fmt(unf)}{', faster' if choice == 'unfused' else ''})"
        row = [c.name, kms, cell(c, "kiln", "heuristic_ms", mark=marks), fx(c.tuned_vs_heuristic)]
        row += [cell(c, "torch", k, mark=marks) for k in peers]
        sps = [f"{PEER_LABEL[k]} {fx(c.speedup.get(k))}" for k in sp_peers if c.speedup.get(k) is not None]
        row.append(", ".join(sps) if sps else NM)
        row.append(fpct(c.flop_frac) if flop else "—")
        row.append(fpct(c.bw_frac))
        row.append(cell(c, "kiln", "tune_wall_s", mark=marks))
        row.append(cell(c, "torch", "compile_time_s", mark=marks))
        if has_tunable_s:
            row.append(cell(c, "torch", "tunableop_tune_s", mark=marks))
        if fam == "matmul_amax":
            row.append(cell(c, "kiln", "plain_ms", mark=marks))
            row.append(fx(c.amax_overhead))
        rows.append(row)
    out = [f"### {FAMILY_TITLES.get(fam, fam)} (`{fam}`)", "", table(hdr, rows), ""]
    # every recorded error of the family, whether or not a cell points at it
    errs = [(c, k, v) for c in cs for k, v in c.errors.items()]
    if errs:
        out.append("Errors recorded:")
        out.append("")
        for c, k, v in errs:
            out.append(f"- {c.name}, `{k}`: {md_escape(v)}")
        out.append("")
    win = [(c, c.kiln.get("winner"), c.kiln.get("candidates")) for c in cs if c.kiln.get("winner") is not None]
    if win:
        out.append("Winners: " + "; ".join(
            f"{c.name}: `{w}`" + (f" of {n} candidates" if num(n) is not None else "") for c, w, n in win) + ".")
        out.append("")
    return "\n".join(out)


def kv_table(d, labels, extra_ratios=()):
    rows = []
    seen = set()
    for k, lab in labels:
        seen.add(k)
        v = d.get(k)
        rows.append([lab, f"`{k}`", fmt_any(v)])
    for k, v in d.items():
        if k in seen or k == "errors":
            continue
        rows.append([k.replace("_", " "), f"`{k}`", fmt_any(v)])
    for lab, v in extra_ratios:
        rows.append([lab, "", fx(v)])
    return table(["measure", "key", "value"], rows)


def fmt_any(v):
    if isinstance(v, list):
        vs = [fmt_any(x) for x in v]
        return ", ".join(vs) if vs else NM
    if isinstance(v, dict):
        return ", ".join(f"{k}: {fmt_any(x)}" for k, x in v.items()) or NM
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v
    return fmt(v)


def argv_text(a):
    if isinstance(a, list):
        return " ".join(shlex.quote(str(x)) for x in a)
    return str(a) if a is not None else NM


# --------------------------------------------------------------------------------------- provenance, paths
REPO_DIRS = ("bench", "benchmarks", "examples", "profiles", "scripts", "apps", "src", "docs", "tests")
ABS_PATH = re.compile(r"(?<![\w.])/(?:[\w.+@-]+/)*[\w.+@-]+")


def scrub_path(p, out_dir=None):
    """An absolute path of the machine that ran a part, made machine-free: a path inside the checkout from its
    top-level folder (bench/..., examples/...), a build folder's file as BUILD/<file>, anything else as
    OUT/<path under the part's output folder> (else OUT/<its last two names>)."""
    parts = p.strip("/").split("/")
    for i, name in enumerate(parts):
        if name in REPO_DIRS and i > 0:
            return "/".join(parts[i:])
        if name.startswith("build") and i > 0 and i + 1 < len(parts):
            return "BUILD/" + "/".join(parts[i + 1:])
    if out_dir and (p + "/").startswith(out_dir.rstrip("/") + "/"):
        rest = p[len(out_dir.rstrip("/")):].strip("/")
        return "OUT/" + rest if rest else "OUT"
    return "OUT/" + "/".join(parts[-2:])


def scrub_text(text, out_dir=None):
    return ABS_PATH.sub(lambda m: scrub_path(m.group(0), out_dir), text)


def part_argv(p):
    """A part's command line as a list (some parts record it as the text of a Python list)."""
    a = p.get("argv")
    if isinstance(a, str) and a.startswith("["):
        try:
            import ast
            a = ast.literal_eval(a)
        except (ValueError, SyntaxError):
            pass
    return a


def part_out_dir(argv):
    if isinstance(argv, list) and "--out" in argv:
        i = argv.index("--out")
        if i + 1 < len(argv):
            return os.path.dirname(str(argv[i + 1]))
    return None


def part_when(p):
    """When a part was measured: its meta's start time (UTC, to the minute), else its date."""
    for k in ("started", "start_utc", "finished", "end_utc"):
        v = p.get(k)
        if isinstance(v, str) and len(v) >= 16:
            return v[:10] + " " + v[11:16] + " UTC"
    return str(p.get("date")) if p.get("date") else "—"


def part_index(merged):
    """{file: {"side", "when", "rev", "command"}} for every part of the merge."""
    idx = {}
    for p in as_dict(merged.get("meta")).get("parts") or []:
        f = str(p.get("file"))
        argv = part_argv(p)
        side = p.get("side") or ("kiln" if "-kiln" in f else "torch" if "-torch" in f else "—")
        cmd = scrub_text(argv_text(argv), part_out_dir(argv)) if argv is not None else "—"
        idx[f] = {"side": {"kiln": "Kiln", "torch": "PyTorch"}.get(side, side), "when": part_when(p),
                  "rev": p.get("git_revision") or "", "command": cmd}
    return idx


def cite(files, idx):
    """'conv-kiln.json (2026-12-01 11:23 UTC)' for each file, in order."""
    out = []
    for f in files:
        i = idx.get(f, {})
        extra = ", ".join(x for x in (i.get("when"), ("rev " + i["rev"]) if i.get("rev") else "") if x and x != "—")
        out.append(f"`{f}`" + (f" ({extra})" if extra else ""))
    return ", ".join(out) if out else NM


def goal_files(g, merged):
    """The part files a goal's figures come from."""
    prov = as_dict(merged.get("provenance"))
    pc = as_dict(prov.get("cases"))
    name = g["name"]
    fams = sorted(FAMILIES, key=len, reverse=True)
    files = []

    def add(fs):
        for f in fs:
            if f not in files:
                files.append(f)

    def fam_files(fam):
        for c in merged.get("cases", []):
            if c.get("family") == fam:
                add(pc.get(str(c.get("id") or c.get("name")), []))

    if name.startswith("cold start"):
        add(as_dict(prov.get("cold_start")).get(k) for k in ("heuristic_build_ms", "load_ms", "runtime_compiled_build_ms")
            if as_dict(prov.get("cold_start")).get(k))
    elif name.startswith("dynamic"):
        add(sorted(set(as_dict(prov.get("dynamic")).values())))
        if isinstance(as_dict(merged.get("dynamic")).get("from_file"), str):
            add([as_dict(merged.get("dynamic"))["from_file"]])  # the part copied its figures from this file
    elif name.startswith("capture"):
        add(sorted(set(as_dict(prov.get("capture")).values())))
    elif name.startswith("block"):
        add(prov.get("block") or [])
    elif name.startswith("tuning cost"):
        for fam in FAMILIES:
            fam_files(fam)
    elif name.startswith("tuned vs heuristic"):
        fam_files("matmul_bias_gelu")
    elif name.startswith("AMAX"):
        fam_files("matmul_amax")
    else:
        for fam in fams:
            if name.startswith(fam + " ") or name == fam:
                fam_files(fam)
                break
    return [f for f in files if f]


# What each figure of the runtime sections is and how it was measured (key -> (label, how)).
COLD_START_FIGURES = [
    ("load_ms", "load one stored plan (ms)",
     "plan_load_bench: store lookup + fingerprint check + checksum + deserialize of the graph named by "
     "`heuristic_build_graph`, median of 5 in one process after its first load (cuDNN's once-per-process work "
     "already paid)"),
    ("heuristic_build_ms", "build one plan from the heuristics (ms)",
     "plan_load_bench, the same graph and process: lowering + heuristics query + build, median of 5"),
    ("heuristic_build_graph", "graph of the two rows above", ""),
    ("heuristic_build_over_load", "heuristic build / load", "the two medians above"),
    ("runtime_compiled_build_ms", "build one runtime-compiled plan (ms)",
     "plan_load_bench: the runtime-compiled graph with the lowest build/load ratio; after the first build in "
     "the process cuDNN reuses the compiled kernel, so this is not a new process's 0.2-1.5 s"),
    ("runtime_compiled_load_ms", "load that plan (ms)", "plan_load_bench, median of 5"),
    ("runtime_compiled_graph", "graph of the two rows above", ""),
    ("runtime_compiled_build_over_load", "runtime-compiled build / load", "the two medians above"),
    ("runtime_compiled_per_graph", "build / load per runtime-compiled graph", "plan_load_bench"),
    ("load_100_ms", "load 100 plans at start (ms)",
     "plan_load_bench: 100 shapes of the first spec in a store, one load_all query + deserialize each"),
    ("build_100_ms", "build the same 100 plans (ms)", "plan_load_bench"),
    ("plans_at_start", "plans loaded at start", "plan_load_bench"),
    ("examples_tune_wall_s", "`kiln tune` of the examples into the store (s)", "wall clock, one process"),
    ("examples_tune_exit", "its exit code", ""),
    ("first_result_graphs", "graphs of the next two rows", ""),
    ("first_result_with_store_s", "first results, with a store (s)",
     "`kiln replay` of the examples in a new process, process start to exit, plans from the store; median of 3"),
    ("first_result_without_store_s", "first results, without a store (s)",
     "the same replay without a store: every plan from cuDNN's heuristics; median of 3"),
]
DYNAMIC_FIGURES = [
    ("stopgap_first_ms", "first execution of a new shape through a stopgap (ms)",
     "planner_bench: obtain + execute + sync of a size's first request, median over the sizes"),
    ("static_build_ms", "cold static build of the same shape (ms)", "planner_bench, median over the sizes"),
    ("sizes", "new sizes measured", ""),
    ("promoted_vs_tuned_from", "promoted vs tuned: which ratio", ""),
    ("promoted_vs_tuned", "promoted plan time / tuned plan time, per size", "planner_bench / promotion_bench"),
    ("from_file", "taken from", ""),
    ("note", "note", ""),
]
CAPTURE_FIGURES = [
    ("single_speedup", "one graph: stream launch / captured replay (x)", "capture_bench (method below)"),
    ("chain_speedup", "chain of ten graphs: stream launch / captured replay (x)", "capture_bench"),
]


def figure_table(d, prov, idx, figures):
    """measure | value | what and how | from: the section's known figures in order, then any other scalar."""
    rows = []
    known = {k for k, _, _ in figures}
    if isinstance(d.get("from_file"), str):  # the part copied these figures from another committed file
        prov = {k: v for k, v in prov.items()}
        src = d["from_file"]
        idx = dict(idx)
        for k, f in list(prov.items()):
            if k not in ("from_file", "note"):
                idx[f + " via"] = idx.get(f, {})
                prov[k] = f + " via"
        cite_one = lambda k: (f"{cite([prov[k][:-4]], idx)}, copied from `{src}` (see the note)"  # noqa: E731
                              if prov.get(k, "").endswith(" via") else cite([prov[k]] if prov.get(k) else [], idx))
    else:
        cite_one = lambda k: cite([prov[k]] if prov.get(k) else [], idx)  # noqa: E731
    for k, label, how in figures:
        if k not in d:
            continue
        v = d[k]
        if isinstance(v, dict) and not all(num(x) is not None for x in v.values()):
            continue  # shown as a table of its own
        rows.append([label, scrub_text(fmt_any(v)), how, cite_one(k)])
    for k, v in d.items():
        if k in known or k == "errors" or isinstance(v, (dict, list)):
            continue
        rows.append([k.replace("_", " "), scrub_text(fmt_any(v)), "", cite_one(k)])
    return table(["measure", "value", "what and how", "from"], rows) if rows else NM


def cold_start_details(cs, prov, idx):
    L = []
    pl = as_dict(cs.get("plan_load_bench"))
    per = [as_dict(g) for g in pl.get("per_graph") or []]
    if per:
        L.append(f"`plan_load_bench` per graph (one process, medians of {per[0].get('reps', '?')}; "
                 f"{cite([prov.get('plan_load_bench')], idx)}):")
        L.append("")
        L.append(table(["graph", "build ms", "load ms", "build / load", "plan bytes"],
                       [[g.get("graph"), fmt(g.get("build_ms_median")), fmt(g.get("load_ms_median")),
                         fx(num(g.get("build_over_load"))), fmt_any(g.get("plan_bytes"))] for g in per]))
        L.append("")
    runs = [as_dict(r) for r in cs.get("planner_cold_start") or [] if isinstance(r, dict)]
    if runs:
        L.append("`planner_cold_start`: a new process per run, each step timed from `main()` (ms, one column per "
                 f"run; spec {scrub_text(str(runs[0].get('spec')))}; {cite([prov.get('planner_cold_start')], idx)}):")
        L.append("")
        for mode in dict.fromkeys(r.get("mode") for r in runs):
            rs = [r for r in runs if r.get("mode") == mode]
            steps = list(dict.fromkeys(s.get("step") for r in rs for s in r.get("steps") or []))
            rows = []
            for st in steps:
                row = [f"{mode}: {st}"]
                for r in rs:
                    t = [s.get("took_ms") for s in r.get("steps") or [] if s.get("step") == st]
                    row.append(fmt(t[0]) if t else NM)
                rows.append(row)
            L.append(table(["step"] + [f"run {i + 1}" for i in range(len(rs))], rows))
            L.append("")
    reps = [(lab, as_dict(cs.get(k))) for lab, k in (("with a store", "replay_with_store"),
                                                     ("without a store", "replay_without_store")) if cs.get(k)]
    if reps:
        L.append(f"`kiln replay` of the examples, the last of the three runs ({cite([prov.get('replay_with_store')], idx)}):")
        L.append("")
        rows = []
        for lab, r in reps:
            lat = as_dict(r.get("latency_ms"))
            rows.append([lab, fmt_any(r.get("requests")), fmt(r.get("planner_create_ms")), fmt(r.get("wall_s")),
                         fmt(lat.get("p50")), fmt(lat.get("p90")), md_escape(str(r.get("stats") or NM))])
        L.append(table(["replay", "requests", "Planner::create ms", "replay wall s", "first execution p50 ms",
                        "p90 ms", "served"], rows))
        L.append("")
    return "\n".join(L)


def dynamic_details(dy, prov, idx):
    L = []
    bg = {k: as_dict(v) for k, v in as_dict(dy.get("new_shape_by_graph")).items()}
    via = f", copied from `{dy['from_file']}`" if isinstance(dy.get("from_file"), str) else ""
    if bg:
        L.append(f"Per graph ({cite([prov.get('new_shape_by_graph')], idx)}{via}):")
        L.append("")
        L.append(table(["graph", "cold static build ms", "stopgap first execution ms", "ratio", "new sizes"],
                       [[g, fmt(v.get("static_build_ms")), fmt(v.get("stopgap_first_ms")), fx(num(v.get("ratio"))),
                         fmt_any(v.get("sizes"))] for g, v in bg.items()]))
        L.append("")
    per = {k: as_dict(v) for k, v in as_dict(dy.get("cold_build_over_stopgap_per_size")).items()}
    if per:
        L.append("Cold static build / stopgap first execution, per size: " + "; ".join(
            f"{g}: " + ", ".join(f"{s} {fmt(r)}" for s, r in v.items()) for g, v in per.items()) + ".")
        L.append("")
    pb = as_dict(dy.get("planner_bench"))
    if pb.get("method"):
        L.append(f"planner_bench's method: {md_escape(scrub_text(str(pb['method'])))}")
        L.append("")
    return "\n".join(L)


def capture_details(cap, prov, idx):
    L = []
    cb = as_dict(cap.get("capture_bench"))
    res = [as_dict(r) for r in cb.get("results") or []]
    if res:
        L.append(f"`capture_bench` ({cite([prov.get('capture_bench')], idx)}; {fmt_any(cb.get('iters'))} executions "
                 f"per repetition, median of {fmt_any(cb.get('reps'))}):")
        L.append("")
        L.append(table(["workload", "stream us / execution", "graph us / execution", "speed-up", "goal",
                        "rebind by update us", "rebind by re-instantiation us", "plan (source)"],
                       [[r.get("workload"), fmt(r.get("stream_us_per_execution")), fmt(r.get("graph_us_per_execution")),
                         fx(num(r.get("speedup"))), fx(num(r.get("goal"))), fmt(r.get("rebind_update_us")),
                         fmt(r.get("rebind_reinstantiate_us")), f"`{r.get('plan')}` ({r.get('plan_source')})"]
                        for r in res]))
        L.append("")
    if cb.get("method"):
        L.append(f"Method: {md_escape(scrub_text(str(cb['method'])))}")
        L.append("")
    return "\n".join(L)


def same_harness_section(cases):
    """Kiln's served plans timed by PyTorch's harness (torch_peers --kiln-store), beside Kiln's own timer and the
    peers: the same timer on both sides of each ratio. Nothing where no case has the figure."""
    rows = []
    for c in cases:
        k = pos(c.torch.get("kiln_harness_ms"))
        if k is None:
            continue
        src = as_dict(c.rec.get("kiln_harness"))
        rows.append([c.family, c.name, fmt(c.kiln_ms), fmt(k), fx(div(k, c.kiln_ms)), cell(c, "torch", "eager_ms"),
                     cell(c, "torch", "compile_ms"), fx(div(c.torch.get("eager_ms"), k)),
                     fx(div(c.torch.get("compile_ms"), k)),
                     md_escape(f"{src.get('source', '?')}: {src.get('config', '?')}")])
    if not rows:
        return []
    return ["### One harness for both sides", "",
            "Kiln's served plan for each case, from the store its tune wrote, called as a torch op "
            "(`kiln.torch.op`) and timed by the PyTorch side's own `time_gpu` (the same L2 flush, sleep and "
            "events as the peers): each speed-up here has one timer on both sides. \"Kiln's timer\" is the "
            "Kiln side's figure (the Cases tables); the plan column says what the Planner served.", "",
            table(["family", "shape", "Kiln's timer ms", "Kiln, PyTorch's harness ms", "harness / timer",
                   "eager ms", "torch.compile ms", "vs eager", "vs torch.compile", "plan"], rows), ""]


def markdown(cases, merged, goals, block_shapes, chart_paths, md_path, out_dir):
    meta = as_dict(merged.get("meta"))
    limits = as_dict(merged.get("limits"))
    L = []
    gpu = meta.get("gpu")
    L.append(f"# Kiln benchmarks{(' on ' + str(gpu)) if gpu else ''}")
    L.append("")
    L.append("Kiln's tuned, fused cuDNN graphs against PyTorch (eager, torch.compile, TunableOp, SDPA backends) on "
             "convolutions, matmuls with epilogues, FP8 recipe graphs, attention and norms, a transformer block, "
             "and Kiln's cold-start, dynamic-shape and CUDA-graph-capture costs. Speed-up = PyTorch time / Kiln "
             "time (>1: Kiln is faster); Kiln's time is the plan it serves: the tuned fused plan (Kiln runs one "
             "plan per graph; the unfused chain's time is shown beside it where the tuner measured it).")
    L.append("")
    idx = part_index(merged)
    L.append(f"Generated by `{GENERATOR}` from the committed part files in `bench/results/h200/parts/` "
             "(bench/README.md \"The report\"); do not edit it by hand. Each figure names the part file it comes "
             "from and when that part was measured.")
    L.append("")
    L.append("**Method.** The two sides are timed the same way: the median of CUDA-event-timed samples, the L2 "
             "flushed before each sample outside the timed span, the host's launch cost kept out of the sample, "
             "after a warm-up (docs/measure.md).")
    L.append("")
    seen_methods = []
    for p in meta.get("parts") or []:
        m = p.get("method")
        if isinstance(m, list):
            m = " ".join(str(x) for x in m)
        if isinstance(m, dict):
            m = "; ".join(f"{k}: {v}" for k, v in m.items())
        side = idx.get(str(p.get("file")), {}).get("side", "—")
        if m and (side, m) not in seen_methods:
            seen_methods.append((side, m))
    for side, m in seen_methods:
        L.append(f"- {side} side (as its part files record it): {md_escape(scrub_text(str(m)))}")
    l2 = next((pos(as_dict(p.get("device")).get("l2_bytes")) for p in meta.get("parts") or []
               if pos(as_dict(p.get("device")).get("l2_bytes"))), None)
    fb = next((pos(p.get("flush_bytes")) for p in meta.get("parts") or [] if pos(p.get("flush_bytes"))), None)
    if l2:
        L.append(f"- L2 flush sizes: Kiln's `kiln::Timer` writes twice the device's L2 "
                 f"({fmt(2 * l2 / 2**20)} MiB here: L2 {fmt(l2 / 2**20)} MiB)"
                 + (f"; the PyTorch side writes a fixed {fmt(fb / 2**20)} MiB buffer" if fb else "")
                 + ". Both exceed the L2, so every sample starts with none of the workload's data cached.")
    L.append("")
    dates = sorted({i["when"][:10] for i in idx.values() if i["when"] != "—"})
    L.append(f"**Measured:** {' to '.join(dict.fromkeys([dates[0], dates[-1]])) if dates else NM} "
             f"(per part below).")
    L.append("")
    vrows = [[k, fmt_any(meta.get(k)) if meta.get(k) is not None else NM]
             for k in ("gpu", "driver", "cuda", "cudnn", "frontend", "torch")]
    revs = list(dict.fromkeys(i["rev"] for i in idx.values() if i["rev"]))
    vrows.append(["Kiln git revisions (of the parts that record one)", ", ".join(revs) if revs else NM])
    vrows.append(["limits.matmul_bf16_tflops", fmt(limits.get("matmul_bf16_tflops"), " TFLOP/s")])
    vrows.append(["limits.copy_tbps", fmt(limits.get("copy_tbps"), " TB/s")])
    L.append(table(["", "version / value"], vrows))
    L.append("")
    L.append(f"**Part files** ({len(idx)}; a later part overrides an earlier one per key). In the commands, "
             "`BUILD` is the build folder and `OUT` the run's output folder on the machine that ran them:")
    L.append("")
    L.append(table(["file", "side", "measured", "revision", "command"],
                   [[f"`{f}`", i["side"], i["when"], i["rev"] or "—", f"`{i['command']}`" if i["command"] != "—"
                     else "— (no measurement: " + ("the written explanations of missed goals)" if f == "why.json"
                                                   else "no command recorded)")] for f, i in idx.items()]))
    L.append("")

    L.append("## Goals")
    L.append("")
    grows = []
    for g in goals:
        r, t = goal_value_text(g)
        grows.append([g["name"], r, t, status_text(g), g["detail"], cite(goal_files(g, merged), idx)])
    L.append(table(["goal", "measured", "target", "status", "detail (what the ratio is)", "from"], grows))
    L.append("")
    n_met = sum(1 for g in goals if g["met"] is True)
    n_miss = sum(1 for g in goals if g["met"] is False)
    n_nm = sum(1 for g in goals if g["met"] is None)
    L.append(f"{n_met} met, {n_miss} missed, {n_nm} not measured.")
    L.append("")

    if chart_paths:
        L.append("## Charts")
        L.append("")
        md_dir = os.path.dirname(os.path.abspath(md_path))
        captions = {"speedup.png": "Speed-up per case", "limits.png": "Fraction of the matmul rate / copy bandwidth",
                    "coldstart.png": "Cold start", "tuning_cost.png": "Tuning cost",
                    "block.png": "Transformer block"}
        for name in ("speedup.png", "limits.png", "coldstart.png", "tuning_cost.png", "block.png"):
            if name in chart_paths:
                rel = os.path.relpath(os.path.abspath(chart_paths[name]), md_dir).replace(os.sep, "/")
                L.append(f"![{captions[name]}]({rel})")
                L.append("")

    L.append("## Cases")
    L.append("")
    L.append("Times are medians in ms. \"Kiln ms\" is the tuned fused plan Kiln serves (the unfused chain's time in parentheses, where measured). "
             "%matmul rate = achieved TFLOP/s / limits.matmul_bf16_tflops; %copy BW = min_bytes / time / "
             "limits.copy_tbps. † marks a value whose measurement recorded an error (listed under the table). "
             "\"From\" names the part files of a family's figures, in merge order: where a case was measured "
             "again, the later file's figures replace the earlier one's.")
    L.append("")
    fams = by_family(cases)
    for fam in FAMILIES + [f for f in fams if f not in FAMILIES]:
        if fam in fams:
            L.append(family_section(fam, fams[fam], None))
            pc = as_dict(as_dict(merged.get("provenance")).get("cases"))
            files = []
            for c in fams[fam]:
                files += [f for f in pc.get(c.id, []) if f not in files]
            L.append(f"From: {cite(files, idx)}.")
            L.append("")

    L.append("### Tuned vs heuristic, per graph")
    L.append("")
    rows = []
    for c in cases:
        if not c.measured:
            continue
        r = c.tuned_vs_heuristic
        spread = div(c.kiln.get("worst_ms"), c.kiln.get("best_ms"))
        rows.append([c.family, c.name, cell(c, "kiln", "heuristic_ms"), cell(c, "kiln", "tuned_ms"), fx(r),
                     ("yes" if r >= 1.2 else "no") if r is not None else NM,
                     cell(c, "kiln", "best_ms"), cell(c, "kiln", "worst_ms"), fx(spread),
                     fmt_any(c.kiln.get("candidates")) if c.kiln.get("candidates") is not None else NM])
    L.append(table(["family", "shape", "heuristic ms", "tuned ms", "heuristic/tuned", "≥ 1.2 (heuristic poor)",
                    "best ms", "worst ms", "worst/best", "candidates"], rows) if rows else NM)
    L.append("")

    L += same_harness_section(cases)
    L.append("## Transformer block")
    L.append("")
    L.append("Hidden 4096, 32 heads, MLP 4x, bf16, pre-norm; seven Kiln graphs replayed from one CUDA graph "
             "(\"graph\") or launched on a stream (\"stream\"). GPU time per block in ms; wall = host wall "
             "clock per block.")
    L.append("")
    rows = []
    for b in block_rows(merged, block_shapes):
        k, t = b["kiln"], b["torch"]
        g = lambda d, key: fmt(pos(d.get(key)))  # noqa: E731
        rows.append([b["batch"], b["tokens"], g(k, "graph_ms"), g(k, "graph_wall_ms"), g(k, "stream_ms"),
                     g(k, "stream_wall_ms"), g(t, "eager_ms"), g(t, "eager_wall_ms"), g(t, "compile_nocg_ms"),
                     g(t, "compile_nocg_wall_ms"), g(t, "compile_cg_ms"), g(t, "compile_cg_wall_ms"),
                     fx(b["vs"].get("eager_ms")), fx(b["vs_best"]) + (f" ({b['best_mode']})" if b["best_mode"]
                                                                      else ""),
                     fpct(b["flop_frac"]), g(t, "compile_nocg_compile_s"), g(t, "compile_cg_compile_s")])
    L.append(table(["batch", "tokens", "Kiln graph ms", "Kiln graph wall ms", "Kiln stream ms",
                    "Kiln stream wall ms", "eager ms", "eager wall ms", "compile no-CG ms", "compile no-CG wall ms",
                    "compile CG ms", "compile CG wall ms", "eager/Kiln", "best torch/Kiln", "%matmul rate",
                    "compile no-CG s", "compile CG s"], rows) if rows else NM)
    L.append("")
    if rows:
        L.append(f"From: {cite(as_dict(merged.get('provenance')).get('block') or [], idx)}.")
        L.append("")
    berrs = [(b, k, v) for b in block_rows(merged, block_shapes) for k, v in b["errors"].items()]
    for b, k, v in berrs:
        L.append(f"- error, batch {b['batch']} tokens {b['tokens']}, `{k}`: {md_escape(v)}")
    if berrs:
        L.append("")

    errors = as_dict(merged.get("errors"))

    def measured(k, names):  # an error of a measurement that a later part made: the value shown has none
        key = str(k).split(".")[-1]
        return any(num(as_dict(merged.get(n)).get(x)) is not None for n in names for x in (key, key + "_ms", key + "_s"))

    def section_errors(name):
        es = [(k, v) for k, v in errors.items() if name in k and not measured(k, [name])]
        es += [(k, v) for k, v in normalize_errors(as_dict(merged.get(name)).get("errors"), name).items()
               if not measured(k, [name])]
        return "".join(f"\n- error `{k}`: {md_escape(v)}" for k, v in es)

    prov = as_dict(merged.get("provenance"))
    cs = as_dict(merged.get("cold_start"))
    L.append("## Cold start")
    L.append("")
    L.append("Two kinds of measurement, which give different figures. `plan_load_bench` repeats a load and a "
             "build in one process (medians of 5): cuDNN's once-per-process initialization is paid before the "
             "samples, so these are the steady costs of a load and a build. `planner_cold_start` and "
             "`kiln replay` start a new process: the first plan also pays cuDNN's first-use work unless "
             "Kiln's cuDNN primer has paid it (docs/runtime.md \"Cold start\"). docs/runtime.md gives the "
             "current code's new-process figures; the revision each part below was measured at is in the "
             "part-file table above.")
    L.append("")
    if cs:
        L.append(figure_table(cs, as_dict(prov.get("cold_start")), idx, COLD_START_FIGURES))
        L.append("")
        L.append(cold_start_details(cs, as_dict(prov.get("cold_start")), idx))
    else:
        L.append(NM + ".")
    L.append(section_errors("cold_start"))
    L.append("")
    dy = as_dict(merged.get("dynamic"))
    L.append("## Dynamic shapes")
    L.append("")
    if dy:
        L.append(figure_table(dy, as_dict(prov.get("dynamic")), idx, DYNAMIC_FIGURES))
        L.append("")
        L.append(dynamic_details(dy, as_dict(prov.get("dynamic")), idx))
    else:
        L.append(NM + ".")
    L.append(section_errors("dynamic"))
    L.append("")
    cap = as_dict(merged.get("capture"))
    L.append("## CUDA graph capture")
    L.append("")
    if cap:
        L.append(figure_table(cap, as_dict(prov.get("capture")), idx, CAPTURE_FIGURES))
        L.append("")
        L.append(capture_details(cap, as_dict(prov.get("capture")), idx))
    else:
        L.append(NM + ".")
    L.append(section_errors("capture"))
    L.append("")
    sections = ("cold_start", "dynamic", "capture")
    other = [(k, v) for k, v in errors.items() if not any(s in k for s in sections) and not measured(k, sections)]
    if other:
        L.append("## Other errors recorded")
        L.append("")
        for k, v in other:
            L.append(f"- `{k}`: {md_escape(v)}")
        L.append("")

    L.append("## Missed goals")
    L.append("")
    why = as_dict(meta.get("why"))
    missed = [g for g in goals if g["met"] is False]
    if not missed:
        L.append("None" + (" (some goals were not measured)." if n_nm else "."))
    for g in missed:
        r, t = goal_value_text(g)
        L.append(f"- **{g['name']}**: {r} (target {t}). {g['detail']}")
        L.append(f"  why: {why.get(g['name']) or WHY_DEFAULT}")
    L.append("")
    notm = [g for g in goals if g["met"] is None]
    if notm:
        L.append("## Goals not measured")
        L.append("")
        for g in notm:
            L.append(f"- {g['name']}: {g['detail']}")
        L.append("")
    md = "\n".join(L)
    while "\n\n\n" in md:
        md = md.replace("\n\n\n", "\n\n")
    return scrub_text(md)  # no path of the machine that ran a part reaches the report


# ----------------------------------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("parts", nargs="+", help="suite part files (JSON), later ones override earlier ones")
    ap.add_argument("--out-dir", default="bench/results/h200",
                    help="where suite.json, summary.json and the charts go (default bench/results/h200)")
    ap.add_argument("--markdown", default="BENCHMARKS.md", help="the Markdown report (default BENCHMARKS.md)")
    a = ap.parse_args(argv)
    parts = read_parts(a.parts)
    merged = merge(parts)
    expected, block_shapes = load_shapes()
    cases = build_cases(merged, expected)
    goals = compute_goals(cases, merged, block_shapes)

    if os.path.exists(a.out_dir) and not os.path.isdir(a.out_dir):
        print(f"error: --out-dir {a.out_dir} exists and is not a folder", file=sys.stderr)
        sys.exit(2)
    if os.path.isdir(a.markdown):
        print(f"error: --markdown {a.markdown} is a folder, not a file", file=sys.stderr)
        sys.exit(2)
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "suite.json"), "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.out_dir, "summary.json"), "w") as f:
        json.dump({"meta": merged["meta"], "goals": goals}, f, indent=1)
        f.write("\n")
    chart_paths = charts(cases, merged, block_shapes, a.out_dir)
    md = markdown(cases, merged, goals, block_shapes, chart_paths, a.markdown, a.out_dir)
    md_dir = os.path.dirname(os.path.abspath(a.markdown))
    os.makedirs(md_dir, exist_ok=True)
    with open(a.markdown, "w") as f:
        f.write(md)
        f.write("\n")
    n_met = sum(1 for g in goals if g["met"] is True)
    n_miss = sum(1 for g in goals if g["met"] is False)
    print(f"wrote {os.path.join(a.out_dir, 'suite.json')}, {os.path.join(a.out_dir, 'summary.json')}, "
          f"{len(chart_paths)} charts, {a.markdown}; goals: {n_met} met, {n_miss} missed, "
          f"{len(goals) - n_met - n_miss} not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
