#!/usr/bin/env bash
# pare teacher-cache and pare distill --teacher cache:DIR: the cache is written (per rank under
# pare launch), a student distills from it, and misuse (other data, another temperature,
# augmentation, hints, a missing cache) exits 2 naming the problem. A cache written again over one
# replaces it whole; a folder that holds something else is refused.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 256
data="npy:$work/x.npy,$work/y.npy"
"$PARE" train --model lenet5 --data "$data" --epochs 1 --batch-size 32 --no-val --quiet --out "$work/teacher.onnx"

expect_exit 0 '"bytes_per_sample":14' -- "$PARE" teacher-cache --teacher "$work/teacher.onnx" --data "$data" \
  --top-k 3 -T 4 --json --out "$work/cache"
[ -f "$work/cache/index.json" ] && [ -f "$work/cache/shard-0.probs.npy" ] && echo "ok: cache files" || fail "cache files"
student=(--student mlp:784-32-10 --data "$data" --epochs 2 --batch-size 32 --quiet)
d=(distill --teacher "cache:$work/cache" "${student[@]}")
expect_exit 0 "" -- "$PARE" "${d[@]}" -T 4 --out "$work/student.onnx"
[ -f "$work/student.onnx" ] && echo "ok: student from the cache" || fail "no student"

expect_exit 2 "T=4.*--temperature 4" -- "$PARE" "${d[@]}" -T 2 --out "$work/bad.onnx"
expect_exit 2 "augment needs a live teacher" -- "$PARE" "${d[@]}" --augment flip --out "$work/bad.onnx"
expect_exit 2 "no value named 'relu1'" -- "$PARE" "${d[@]}" --hint relu1:fc1 --out "$work/bad.onnx"
"$PY" - "$work" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
x = np.load(f"{d}/x.npy"); x[0] = 1 - x[0]; np.save(f"{d}/x2.npy", x)
PYEOF
expect_exit 2 "another dataset" -- "$PARE" distill --teacher "cache:$work/cache" --student mlp:784-32-10 \
  --data "npy:$work/x2.npy,$work/y.npy" --epochs 1 --quiet --out "$work/bad.onnx"
# The teacher reads no labels (issue 18, item 2): a cache of the inputs alone serves the labelled
# dataset, and is the same cache.
expect_exit 0 "" -- "$PARE" teacher-cache --teacher "$work/teacher.onnx" --data "npy:$work/x.npy" \
  --top-k 3 -T 4 --quiet --out "$work/cache_x"
cmp "$work/cache/shard-0.probs.npy" "$work/cache_x/shard-0.probs.npy" && echo "ok: cache without labels" \
  || fail "a cache from npy:X.npy differs"
expect_exit 0 "" -- "$PARE" distill --teacher "cache:$work/cache_x" "${student[@]}" -T 4 --out "$work/student_x.onnx"
expect_exit 2 "no labels.*distillation" -- "$PARE" distill --teacher "$work/teacher.onnx" --student mlp:784-32-10 \
  --data "npy:$work/x.npy" --epochs 1 --quiet --out "$work/bad.onnx"
expect_exit 2 "index.json" -- "$PARE" distill --teacher "cache:$work/nope" "${student[@]}" --out "$work/bad.onnx"
expect_exit 2 "top-k" -- "$PARE" teacher-cache --teacher "$work/teacher.onnx" --data "$data" --top-k 0 --out "$work/bad"
no_file "$work/bad.onnx"

# Sampled kind, and two ranks writing one shard each: the same distribution as one process.
expect_exit 0 "" -- "$PARE" teacher-cache --teacher "$work/teacher.onnx" --data "$data" --sample 16 --quiet \
  --out "$work/sampled"
expect_exit 0 "" -- "$PARE" distill --teacher "cache:$work/sampled" "${student[@]}" --out "$work/student2.onnx"
expect_exit 0 "" -- "$PARE" launch --nproc-per-node 2 -- "$PARE" teacher-cache --teacher "$work/teacher.onnx" \
  --data "$data" --top-k 3 --quiet --out "$work/cache2"
"$PY" - "$work" <<'PYEOF' && echo "ok: 2-rank cache = 1-rank cache" || fail "2-rank cache differs"
import json, sys, numpy as np
d = sys.argv[1]
idx = json.load(open(f"{d}/cache2/index.json"))
assert [s["rank"] for s in idx["shards"]] == [0, 1], idx["shards"]
two = np.concatenate([np.load(f"{d}/cache2/shard-{r}.probs.npy") for r in (0, 1)]).astype(np.float32)
one = np.load(f"{d}/cache/shard-0.probs.npy").astype(np.float32)
assert two.shape == one.shape and np.abs(two - one).max() <= 1e-3, np.abs(two - one).max()
PYEOF
# Written again over itself (top-3 -> top-5): the new cache whole, nothing staged left over.
expect_exit 0 '"entries":5' -- "$PARE" teacher-cache --teacher "$work/teacher.onnx" --data "$data" --top-k 5 -T 4 \
  --json --out "$work/cache"
[ -d "$work/cache.partial" ] && fail "cache.partial left behind"
"$PY" -c "import numpy as np, sys; assert np.load(sys.argv[1]).shape[1] == 5" "$work/cache/shard-0.probs.npy" \
  && echo "ok: the cache was replaced" || fail "the old shards are still there"
mkdir "$work/other"; touch "$work/other/keep.txt"
expect_exit 2 "other' is a folder that holds no teacher cache" -- "$PARE" teacher-cache --teacher "$work/teacher.onnx" \
  --data "$data" --quiet --out "$work/other"
[ -f "$work/other/keep.txt" ] && echo "ok: the other folder is untouched" || fail "the other folder was changed"
expect_exit 2 "cannot create the folder '.*missing/cache.partial': No such file" -- "$PARE" teacher-cache \
  --teacher "$work/teacher.onnx" --data "$data" --quiet --out "$work/missing/cache"
finish
