#!/usr/bin/env bash
# A teacher sharded over 2 ranks (--teacher-parallel tp|pp|auto) teaches what the whole teacher
# teaches: the pipeline gives the same model, tensor parallel the same losses within float
# tolerance; `pare run --parallel` gives the whole model's outputs; bad requests exit 2.
source "$(dirname "$0")/lib.sh"
make_npy_data "$work" 256
data="npy:$work/x.npy,$work/y.npy"
kd=("$PARE" distill --teacher cnn --student mlp:784-32-10 --data "$data" --epochs 3 --batch-size 32 --seed 5
    --threads 1 --lr 1e-2 --quiet)
launch=("$PARE" launch --nproc-per-node 2 --)

expect_exit 0 "" -- "${launch[@]}" "${kd[@]}" --metrics "$work/whole.jsonl" --out "$work/whole.onnx"
expect_exit 0 "" -- "${launch[@]}" "${kd[@]}" --teacher-parallel pp --metrics "$work/pp.jsonl" --out "$work/pp.onnx"
cmp -s "$work/whole.onnx" "$work/pp.onnx" && echo "ok: pipeline teacher = whole teacher (identical bytes)" \
  || compare_runs "$work/whole.jsonl" "$work/pp.jsonl" "$work/whole.onnx" "$work/pp.onnx" "pipeline teacher = whole teacher"
expect_exit 0 "" -- "${launch[@]}" "${kd[@]}" --teacher-parallel tp --metrics "$work/tp.jsonl" --out "$work/tp.onnx"
compare_runs "$work/whole.jsonl" "$work/tp.jsonl" "$work/whole.onnx" "$work/tp.onnx" "tensor-parallel teacher = whole teacher"

# auto: the teacher does not fit twice in 0.1 MB, and both ranks share a node.
auto=("$PARE" distill --teacher cnn --student mlp:784-32-10 --data "$data" --epochs 1 --no-val --threads 1
      --teacher-parallel auto --out "$work/auto.onnx")
expect_exit 0 "teacher-parallel auto: tp, because .*share a node" -- \
  "${launch[@]}" "${auto[@]}" --teacher-memory 0.1
expect_exit 0 "teacher-parallel auto: none, because .*fit" -- "${launch[@]}" "${auto[@]}"

# pare teacher-cache with a sharded teacher writes the cache the whole teacher writes; 255 rows over
# 2 ranks (127 and 128) in batches of 127 leave rank 0 a batch short, which it joins with an empty one.
cache=("$PARE" teacher-cache --teacher cnn --data "npy:$work/x255.npy,$work/y255.npy" --batch-size 127 --top-k 3 --quiet)
"$PY" -c "import numpy as np; np.save('$work/x255.npy', np.load('$work/x.npy')[:255]); np.save('$work/y255.npy', np.load('$work/y.npy')[:255])"
expect_exit 0 "" -- "${launch[@]}" "${cache[@]}" --out "$work/cache.whole"
for mode in tp pp; do
  expect_exit 0 "" -- "${launch[@]}" "${cache[@]}" --teacher-parallel $mode --out "$work/cache.$mode"
  "$PY" - "$work/cache.whole" "$work/cache.$mode" <<'PYEOF' && echo "ok: teacher-cache --teacher-parallel $mode" || fail "teacher-cache $mode differs"
import sys, numpy as np
a, b = sys.argv[1:3]
for r in (0, 1):
    for k in ("classes", "probs"):
        x, y = (np.load(f"{d}/shard-{r}.{k}.npy") for d in (a, b))
        assert x.shape == y.shape, (k, x.shape, y.shape)
        if k == "classes":
            assert (x == y).mean() > 0.99, (r, k)
        else:
            assert np.abs(x.astype(np.float32) - y.astype(np.float32)).max() < 2e-3, (r, k)
PYEOF
done

# pare run --parallel: each rank's rows through the sharded model, equal to the whole model.
"$PARE" run cnn -i "$work/x.npy" -o "$work/cnn.whole.npy"
for mode in tp pp; do
  expect_exit 0 "rank 1: [0-9]+ parameters" -- "${launch[@]}" "$PARE" run cnn -i "$work/x.npy" -o "$work/cnn.$mode.npy" --parallel $mode
  "$PY" -c "import numpy as np, sys; d = np.abs(np.load('$work/cnn.whole.npy') - np.load('$work/cnn.$mode.npy')).max(); print('$mode max diff', d); sys.exit(int(d > 1e-5))" \
    && echo "ok: run --parallel $mode = whole" || fail "run --parallel $mode differs from the whole model"
done

expect_exit 2 "needs more than one process.*pare launch" -- "${kd[@]}" --teacher-parallel tp --out "$work/bad.onnx"
no_file "$work/bad.onnx"
# --teacher-memory 0.5: a stage may hold 0.25 MB of weights, and the cnn has 0.83 MB for 2 stages.
expect_exit 2 "do not fit in 2 pipeline stages of at most 0.25 MB" -- \
  "${launch[@]}" "${kd[@]}" --teacher-parallel pp --teacher-memory 0.5 --out "$work/bad.onnx"
no_file "$work/bad.onnx"
expect_exit 2 "must be none, tp, pp or auto, got 'zero'" -- "${kd[@]}" --teacher-parallel zero --out "$work/bad.onnx"
expect_exit 2 "shards one teacher, got 2" -- "${kd[@]}" --teacher lenet5 --teacher-parallel pp --out "$work/bad.onnx"
no_file "$work/bad.onnx"
expect_exit 2 "needs more than one process" -- "$PARE" run cnn -i "$work/x.npy" -o "$work/bad.npy" --parallel tp
no_file "$work/bad.npy"
finish
