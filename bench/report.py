#!/usr/bin/env python3
"""Merge the benchmark suite's part files and write the report.

    python3 bench/report.py PART.json [PART.json ...] --out-dir bench/results/h200 --markdown BENCHMARKS.md

Writes into --out-dir: suite.json (the merged parts), summary.json ({"meta", "goals"}) and the PNG charts
(speedup, limits, coldstart, tuning_cost, block); and the Markdown report at --markdown.

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
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

FAMILIES = ["conv_bias_relu", "matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe", "sdpa",
            "layer_norm", "rms_norm"]
FLOP_BOUND = {"conv_bias_relu", "matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe", "sdpa"}
NORMS = {"layer_norm", "rms_norm"}
MATMUL_FAMILIES = {"matmul_bias_gelu", "matmul", "matmul_amax", "fp8_recipe"}
FAMILY_TITLES = {
    "conv_bias_relu": "Convolution + bias + ReLU (ResNet-50 layers, fp16 NHWC, batch 32)",
    "matmul_bias_gelu": "Matmul + bias + GELU (bf16)",
    "matmul": "Plain matmul (bf16)",
    "matmul_amax": "Matmul + AMAX (bf16)",
    "fp8_recipe": "FP8 recipe (e4m3 inputs, bf16 output, AMAX, next scale)",
    "sdpa": "Scaled dot-product attention, forward (bf16)",
    "layer_norm": "LayerNorm (bf16, bf16 scale/bias)",
    "rms_norm": "RMSNorm (bf16, bf16 scale)",
}
# peer key in case["torch"] -> label
PEERS = [("eager_ms", "eager"), ("compile_ms", "torch.compile"), ("tunableop_ms", "TunableOp"),
         ("mm_only_eager_ms", "eager matmul only"), ("cudnn_ms", "SDPA cuDNN"), ("flash_ms", "SDPA flash")]
PEER_LABEL = dict(PEERS)
# peers shown in a family's table even when none of its cases measured them
FAMILY_PEERS = {
    "conv_bias_relu": ["eager_ms", "compile_ms"],
    "matmul_bias_gelu": ["eager_ms", "compile_ms", "tunableop_ms"],
    "matmul": ["eager_ms", "compile_ms", "tunableop_ms"],
    "matmul_amax": ["eager_ms", "mm_only_eager_ms", "compile_ms", "tunableop_ms"],
    "fp8_recipe": ["eager_ms", "compile_ms", "tunableop_ms"],
    "sdpa": ["cudnn_ms", "flash_ms"],
    "layer_norm": ["eager_ms", "compile_ms"],
    "rms_norm": ["eager_ms", "compile_ms"],
}
NM = "not measured"
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
    for path, d in parts:
        m = as_dict(d.get("meta"))
        meta_parts.append(dict(m, file=path))
        for k, v in m.items():
            if v is not None:
                meta[k] = v
        lim = as_dict(d.get("limits"))
        limits_parts.append(dict(lim, file=path))
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
            if cid in cases:
                cases[cid] = deep_merge(cases[cid], c)
            else:
                cases[cid] = dict(c)
                case_order.append(cid)
        for b in d.get("block") or []:
            if not isinstance(b, dict):
                continue
            key = (b.get("batch"), b.get("tokens"))
            if key in block:
                block[key] = deep_merge(block[key], b)
            else:
                block[key] = dict(b)
                block_order.append(key)
        for s in sections:
            if isinstance(d.get(s), dict):
                sections[s] = deep_merge(sections[s], d[s])
        for k, v in normalize_errors(d.get("errors"), os.path.basename(path)).items():
            errors[k] = v
    meta["parts"] = meta_parts
    limits["parts"] = limits_parts
    out = {"meta": meta, "limits": limits,
           "cases": [cases[i] for i in case_order],
           "block": [block[k] for k in block_order]}
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
    method = meta.get("method")
    if isinstance(method, list):
        method = " ".join(str(x) for x in method)
    if isinstance(method, dict):
        method = "; ".join(f"{k}: {v}" for k, v in method.items())
    L.append(f"**Method.** {method}" if method else
             "**Method.** The measurement method (timing, warm-up, L2 flushing, repetitions) is described in "
             "bench/README.md.")
    L.append("")
    L.append(f"**Date:** {meta.get('date') or NM}")
    L.append("")
    vrows = [[k, fmt_any(meta.get(k)) if meta.get(k) is not None else NM]
             for k in ("gpu", "driver", "cuda", "cudnn", "frontend", "torch", "git_revision")]
    vrows.append(["limits.matmul_bf16_tflops", fmt(limits.get("matmul_bf16_tflops"), " TFLOP/s")])
    vrows.append(["limits.copy_tbps", fmt(limits.get("copy_tbps"), " TB/s")])
    L.append(table(["", "version / value"], vrows))
    L.append("")
    parts = meta.get("parts") or []
    L.append("**Command:**" if len(parts) <= 1 else f"**Commands** ({len(parts)} part files, later parts "
                                                     f"override earlier ones per key):")
    L.append("")
    if len(parts) <= 1:
        L.append("```")
        L.append(argv_text(meta.get("argv")))
        L.append("```")
    else:
        for p in parts:
            extra = ", ".join(f"{k} {p[k]}" for k in ("date", "git_revision") if p.get(k))
            L.append(f"- `{os.path.basename(str(p.get('file')))}`{(' (' + extra + ')') if extra else ''}: "
                     f"`{argv_text(p.get('argv'))}`")
    L.append("")

    L.append("## Goals")
    L.append("")
    grows = []
    for g in goals:
        r, t = goal_value_text(g)
        grows.append([g["name"], r, t, status_text(g), g["detail"]])
    L.append(table(["goal", "measured", "target", "status", "detail"], grows))
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
             "limits.copy_tbps. † marks a value whose measurement recorded an error (listed under the table).")
    L.append("")
    fams = by_family(cases)
    for fam in FAMILIES + [f for f in fams if f not in FAMILIES]:
        if fam in fams:
            L.append(family_section(fam, fams[fam], None))

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

    cs = as_dict(merged.get("cold_start"))
    L.append("## Cold start")
    L.append("")
    if cs:
        L.append(kv_table(cs, [
            ("load_ms", "load one plan from the store (ms)"),
            ("heuristic_build_ms", "build one plan from the heuristics (ms)"),
            ("runtime_compiled_build_ms", "build one runtime-compiled plan (ms)"),
            ("load_100_ms", "load 100 plans (ms)"), ("build_100_ms", "build 100 plans (ms)"),
            ("first_result_with_store_s", "first result, with a store (s)"),
            ("first_result_without_store_s", "first result, without a store (s)")],
            [("heuristic build / load", div(cs.get("heuristic_build_ms"), cs.get("load_ms"))),
             ("runtime-compiled build / load", div(cs.get("runtime_compiled_build_ms"),
                                                  pos(cs.get("runtime_compiled_load_ms")) or cs.get("load_ms"))),
             ("build 100 / load 100", div(cs.get("build_100_ms"), cs.get("load_100_ms"))),
             ("first result without / with store", div(cs.get("first_result_without_store_s"),
                                                        cs.get("first_result_with_store_s")))]))
    else:
        L.append(NM + ".")
    L.append(section_errors("cold_start"))
    L.append("")
    dy = as_dict(merged.get("dynamic"))
    L.append("## Dynamic shapes")
    L.append("")
    if dy:
        L.append(kv_table(dy, [("stopgap_first_ms", "first call through the stop-gap plan (ms)"),
                               ("static_build_ms", "building a static plan (ms)"),
                               ("promoted_vs_tuned", "promoted plan time / tuned plan time, per shape")],
                          [("static build / stop-gap first call", div(dy.get("static_build_ms"),
                                                                      dy.get("stopgap_first_ms")))]))
    else:
        L.append(NM + ".")
    L.append(section_errors("dynamic"))
    L.append("")
    cap = as_dict(merged.get("capture"))
    L.append("## CUDA graph capture")
    L.append("")
    if cap:
        L.append(kv_table(cap, [("single_speedup", "one graph: launch vs captured replay (x)"),
                                ("chain_speedup", "chain of graphs: launch vs captured replay (x)")]))
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
    return "\n".join(L).replace("\n\n\n", "\n\n")


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
