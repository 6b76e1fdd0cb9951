#!/usr/bin/python3
"""Module boundaries, checked from the #include lines: which top-level folder may include which.

    /usr/bin/python3 tests/arch/include_rules.py [ROOT]      check the tree (exit 1 naming each violation)
    /usr/bin/python3 tests/arch/include_rules.py --self-test  show that a violation is caught

The rules (who may include whom):
  core/            core, libtorch                       (nothing else of pare)
  dist/            dist, core
  train/           train, core, dist (the Trainer knows no teacher: distillation hands it a loss)
  engine/          engine, core, dist, and for the pare_rt engine export/rt_bridge.h and pare_rt's
                   public API rt/rt.h
  lm/              lm, core, engine, quantize (language models: text, tokenizers, checkpoints, the architecture table)
  distill/         distill, core, dist, train, engine
  compress/        compress, core, dist, train, engine, distill, prune, quantize (the compressions that
                   train: pruning with recovery, quantization-aware training)
  prune/           prune, core
  quantize/        quantize, core
  export/          export, core, and pare_rt's public API rt/rt.h (the writers check what pare_rt loads)
  rt/              rt and the torch-free base of core (core/onnx_reader.h, core/error.h,
                   core/file_util.h); no libtorch header (<torch/...>, <ATen/...>, <c10/...>) in it
                   or in that base
  examples/edge/   rt only (what an edge application carries)
  pipeline/        pipeline, core (stages run the pare executable; cli/ supplies the CommandSchema)
  cli/, tests/, bench/, examples/ (other)   everything
"""
import os
import re
import sys
import tempfile

MODULES = ["core", "dist", "train", "engine", "lm", "distill", "compress", "prune", "quantize", "export", "rt", "federated", "pipeline",
           "cli"]
TORCH_FREE_BASE = {"core/onnx_reader.h", "core/onnx_reader.cpp", "core/error.h", "core/error.cpp",
                   "core/file_util.h", "core/file_util.cpp"}
ALLOWED = {
    "core": {"core"},
    "dist": {"dist", "core"},
    "train": {"train", "core", "dist"},
    "engine": {"engine", "core", "dist", "export/rt_bridge.h", "rt/rt.h"},
    "distill": {"distill", "core", "dist", "train", "engine"},
    "compress": {"compress", "core", "dist", "train", "engine", "distill", "prune", "quantize"},
    "lm": {"lm", "core", "engine", "quantize"},
    "prune": {"prune", "core"},
    "quantize": {"quantize", "core"},
    "export": {"export", "core", "rt/rt.h"},
    "rt": {"rt"} | {f for f in TORCH_FREE_BASE if f.endswith(".h")},
    "examples/edge": {"rt"},
    "federated": {"federated", "core", "train", "engine", "distill"},
    "pipeline": {"pipeline", "core"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TORCH = re.compile(r"^(torch|ATen|c10)/")


def area(path):
    """The rule set a file falls under, or None (everything allowed)."""
    if path.startswith("examples/edge/"):
        return "examples/edge"
    top = path.split("/", 1)[0]
    return top if top in ALLOWED else None


def allowed(rules, header):
    return any(header == r or header.startswith(r + "/") for r in rules)


def check(root):
    problems = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir.split(os.sep)[0] in (".git", "build") or rel_dir.startswith("build"):
            dirnames[:] = []
            continue
        for name in sorted(filenames):
            if not name.endswith((".h", ".cpp", ".c", ".cc")):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            a = area(rel)
            torch_free = a == "rt" or a == "examples/edge" or rel in TORCH_FREE_BASE
            if a is None and not torch_free:
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    kind, header = m.groups()
                    if torch_free and TORCH.match(header):
                        problems.append(f"{rel}:{lineno}: includes <{header}>, but {rel} must build without libtorch")
                    if kind == '"' and a is not None and header.split("/", 1)[0] in MODULES + ["examples"]:
                        if not allowed(ALLOWED[a], header):
                            problems.append(f"{rel}:{lineno}: includes \"{header}\", but {a}/ may include only "
                                            + ", ".join(sorted(ALLOWED[a])))
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(f"{d}/prune")
        os.makedirs(f"{d}/rt")
        with open(f"{d}/prune/a.cpp", "w") as f:
            f.write('#include "core/graph.h"\n#include "quantize/ptq.h"\n')
        with open(f"{d}/rt/b.cpp", "w") as f:
            f.write('#include "core/onnx_reader.h"\n#include <ATen/ATen.h>\n#include "core/module.h"\n')
        got = check(d)
        want = ['prune/a.cpp:2: includes "quantize/ptq.h"', "rt/b.cpp:2: includes <ATen/ATen.h>",
                'rt/b.cpp:3: includes "core/module.h"']
        missing = [w for w in want if not any(g.startswith(w) for g in got)]
        if missing or len(got) != len(want):
            print("self-test FAILED: expected", want, "got", got)
            return 1
        print("self-test: the three planted violations are reported, nothing else")
        return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross a module boundary (rules: tests/arch/include_rules.py)")
        return 1
    print("ok: every #include keeps to the module boundaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
