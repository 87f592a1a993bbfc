"""Kiln's error measures in PyTorch: kiln::measure_error and kiln::judge (src/validate/numerics.cc) over
one output and its reference, with the tolerance the normalized graph gives that output."""

import math

import torch


def measure_error(out, ref, tol, magnitude=None):
    """kiln::measure_error over logical elements (float64 tensors of one shape) and kiln::judge; with a
    magnitude tensor M each element's band widens by acc_coeff * M_i and nmse's limit by the allowance."""
    a, r = out.reshape(-1).to(torch.float64), ref.reshape(-1).to(torch.float64)
    r_fin, a_fin = torch.isfinite(r), torch.isfinite(a)
    same = (torch.isnan(a) & torch.isnan(r)) | (a == r)
    ref_nf_mismatch = ~r_fin & ~same          # a non-finite reference matches only the same value
    out_nf = r_fin & ~a_fin                   # NaN/Inf where the reference is finite
    both = r_fin & a_fin
    zero = torch.zeros_like(r)
    diff = torch.where(both, (a - r).abs(), zero)
    rabs = torch.where(both, r.abs(), zero)
    allowed = tol["atol"] + tol["rtol"] * rabs
    sum_sq_mag = 0.0
    if magnitude is not None:
        m = torch.where(both, magnitude.reshape(-1).to(torch.float64), zero)
        allowed = allowed + tol["acc_coeff"] * m
        sum_sq_mag = float((m * m).sum())
    floor = tol["rel_floor"] if tol["rel_floor"] > 0 else 1e-30
    rel = diff / torch.clamp(rabs, min=floor)
    sum_sq_err = float((diff * diff).sum())
    sum_sq_ref = float((rabs * rabs).sum())
    e = {
        "count": a.numel(),
        "max_abs": float(diff.max()) if a.numel() else 0.0,
        "max_rel": float(rel.max()) if a.numel() else 0.0,
        "nmse": sum_sq_err / sum_sq_ref if sum_sq_ref > 0 else sum_sq_err,
        "nmse_allowance": (tol["acc_nmse_coeff"] * (sum_sq_mag / sum_sq_ref if sum_sq_ref > 0 else sum_sq_mag)
                           if magnitude is not None else 0.0),
        "nan_count": int(out_nf.sum()),
        "mismatch_count": int(ref_nf_mismatch.sum() + out_nf.sum() + (both & (diff > allowed)).sum()),
    }
    # worst_index as measure_error picks it: the last NaN/Inf output, else the first non-finite reference
    # not matched, else the first largest |out - ref| / (atol + rtol|ref|).
    if e["nan_count"]:
        e["worst_index"] = int(torch.nonzero(out_nf)[-1])
    elif bool(ref_nf_mismatch.any()):
        e["worst_index"] = int(torch.nonzero(ref_nf_mismatch)[0])
    elif bool(both.any()):
        big = torch.finfo(torch.float64).max
        ratio = torch.where(allowed > 0, diff / torch.where(allowed > 0, allowed, torch.ones_like(allowed)),
                            torch.where(diff > 0, torch.full_like(diff, big), zero))
        ratio = torch.where(both, ratio, torch.full_like(ratio, -math.inf))
        e["worst_index"] = int(torch.argmax(ratio))
    else:
        e["worst_index"] = -1
    e["nmse_limit"] = tol["nmse_max"] + e["nmse_allowance"]
    e["verdict"] = ("Incorrect" if e["nan_count"] or e["mismatch_count"] or not (e["nmse"] <= e["nmse_limit"])
                    else "Passed")
    return e
