"""The op harness's ONNX Runtime side: runs every case core_tests wrote (OpHarness.
WritesEveryCaseForOnnxRuntime: one-node models, .npy inputs, pare's outputs, manifest.jsonl) in
ONNX Runtime (PyPI onnxruntime), in one process, and compares with pare's outputs under each case's
tolerance (|pare - ort| <= atol + rtol * |ort|; integer and bool outputs within atol steps, mostly 0).
Prints the ops covered out of those registered and the worst differences per op family, and a
FAIL line naming the op and case for every mismatch.

  python op_harness_ort.py DIR        (exit 0: all agree; 1: a mismatch or a case ORT refused)
"""
import json
import math
import os
import sys
import time

import numpy as np


def die(msg):
    sys.stderr.write(f"op_harness_ort: {msg}\n")
    sys.exit(2)


def compare(pare, ort, atol, rtol):
    """Worst differences of `pare` against `ort`; ok when every element is within tolerance."""
    r = {"ok": True, "abs": 0.0, "rel": 0.0, "why": ""}
    if pare.dtype != ort.dtype:
        return {**r, "ok": False, "why": f"type {pare.dtype} vs onnxruntime {ort.dtype}"}
    if pare.shape != ort.shape:
        return {**r, "ok": False, "why": f"shape {list(pare.shape)} vs onnxruntime {list(ort.shape)}"}
    if ort.dtype not in (np.float32, np.float64):
        rtol = 0.0  # integers and bools: within atol steps
    a = pare.astype(np.float64).reshape(-1)
    b = ort.astype(np.float64).reshape(-1)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    bad_nan = nan_a != nan_b
    if bad_nan.any():
        i = int(np.argmax(bad_nan))
        r.update(ok=False, abs=math.inf, why=f"element {i}: pare {a[i]}, onnxruntime {b[i]}")
    both = ~(nan_a | nan_b)
    with np.errstate(invalid="ignore"):
        e = np.where(both & (a != b), np.abs(a - b), 0.0)  # equal infinities count as equal
    if e.size and e.max() > r["abs"]:
        r["abs"] = float(e.max())
    big = both & (np.abs(b) >= 1e-3)
    if big.any():
        r["rel"] = max(r["rel"], float((e[big] / np.abs(b[big])).max()))
    with np.errstate(invalid="ignore"):
        off = both & ~(e <= atol + rtol * np.abs(b))
    if off.any():
        i = int(np.argmax(off))
        if r["ok"]:
            r["why"] = f"element {i}: pare {a[i]}, onnxruntime {b[i]}"
        r["ok"] = False
    return r


def run_case(ort, d, c):
    worst = {"ok": True, "abs": 0.0, "rel": 0.0, "why": ""}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3  # the opset 6 case would warn about legacy support
    try:
        session = ort.InferenceSession(os.path.join(d, c["model"]), so, providers=["CPUExecutionProvider"])
        feeds = {name: np.load(os.path.join(d, f)) for name, f in c["inputs"]}
        names = [name for name, _ in c["outputs"]]
        results = dict(zip(names, session.run(names, feeds)))
    except Exception as e:  # ORT's own exception types
        return {"ok": False, "abs": math.nan, "rel": math.nan,
                "why": f"onnxruntime cannot run it: {str(e).splitlines()[0] if str(e) else type(e).__name__}"}
    for name, f in c["outputs"]:
        got = np.asarray(results[name])
        dd = compare(np.load(os.path.join(d, f)), got, c["atol"], c["rtol"])
        worst["abs"] = max(worst["abs"], dd["abs"])
        worst["rel"] = max(worst["rel"], dd["rel"])
        if not dd["ok"] and worst["ok"]:
            worst.update(ok=False, why=f"output {name}: {dd['why']}")
    return worst


def main():
    if len(sys.argv) != 2:
        die("usage: op_harness_ort.py DIR")
    d = sys.argv[1]
    try:
        import onnxruntime as ort
    except ImportError as e:
        die(f"cannot import onnxruntime (scripts/install-deps installs it into .venv): {e}")
    lines = [l for l in open(os.path.join(d, "manifest.jsonl")) if l.strip()]
    registered = json.loads(lines[0])["registered"]  # [op, family]
    cases = [json.loads(l) for l in lines[1:]]

    families = {}

    def family(name):
        return families.setdefault(name, {"ops": set(), "cases": 0, "abs": 0.0, "abs_case": "-", "rel": 0.0,
                                          "rel_case": "-"})

    by_ref = {"ort": set(), "ort-graph": set(), "hand": set()}
    notes, failures = {}, []
    started = time.time()
    for c in cases:
        if c["ref"] == "hand":
            worst = {"ok": c["ok"], "abs": c["abs"], "rel": c["rel"], "why": "differs from the hand reference"}
        else:
            worst = run_case(ort, d, c)
        if c.get("note"):
            notes[c["op"]] = c["note"]
        f = family(c["family"])
        f["ops"].add(c["op"])
        f["cases"] += 1
        if worst["abs"] > f["abs"]:
            f["abs"], f["abs_case"] = worst["abs"], c["case"]
        if worst["rel"] > f["rel"]:
            f["rel"], f["rel_case"] = worst["rel"], c["case"]
        if worst["ok"]:
            by_ref[c["ref"]].add(c["op"])
        else:
            failures.append(f"FAIL {c['op']} (case {c['case']}, tolerance atol {c['atol']} rtol {c['rtol']}): "
                            f"{worst['why']}; max abs diff {worst['abs']}, max rel diff {worst['rel']}")

    failed = {l.split(" ")[1] for l in failures}
    covered = [op for op, _ in registered
               if op not in failed and (op in by_ref["ort"] or op in by_ref["ort-graph"] or op in by_ref["hand"])]
    with_case = {c["op"] for c in cases}
    missing = [op for op, _ in registered if op not in with_case]

    def fmt(v):
        return "n/a" if math.isnan(v) else "0" if v == 0 else f"{v:.2e}"

    print(f"op harness: {len(covered)} of {len(registered)} registered ops agree with their reference "
          f"({len(cases)} cases in {time.time() - started:.1f} s)")
    hand_only = sorted(by_ref["hand"] - by_ref["ort"] - by_ref["ort-graph"])
    print(f"  references: ONNX Runtime {len(by_ref['ort'])} ops, an equivalent ONNX Runtime graph "
          f"{len(by_ref['ort-graph'])} ({', '.join(sorted(by_ref['ort-graph']))}), a hand reference only "
          f"{len(hand_only)} ({', '.join(hand_only)})")
    for op, note in notes.items():
        print(f"  {op}: {note}")
    print()
    print("family       ops cases  worst abs diff (case)                          worst rel diff, |ref| >= 1e-3 (case)")
    for name in ("elementwise", "nn", "tensor", "quant"):
        f = family(name)
        print(f"{name:<12} {len(f['ops']):>3} {f['cases']:>5}  {fmt(f['abs']) + ' (' + f['abs_case'] + ')':<46} "
              f"{fmt(f['rel'])} ({f['rel_case']})")
    failures += [f"FAIL {op}: registered but no case (tests/core/op_harness_cases_test.cpp)" for op in missing]
    if failures:
        print("\n".join(failures))
        print(f"FAILED: {len(failures)} mismatch(es)")
        sys.exit(1)
    print("PASSED: every registered op agrees with its reference")


if __name__ == "__main__":
    main()
