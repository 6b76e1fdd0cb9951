#!/usr/bin/env bash
# pare pipeline: a small recipe end to end; stages skipped while unchanged; SIGKILL mid-stage and
# --resume give the same artifacts byte for byte; bad recipes exit 2 naming the line and key and
# write nothing; a stage that fails stops the run and names itself.
source "$(dirname "$0")/lib.sh"
: "${PARE_SOURCE_DIR:?}"
make_npy_data "$work" 2048
cd "$work"
cat > tiny.yaml <<'YAML'
name: tiny
data: npy:x.npy,y.npy
seed: 3
stages:
  - stage: teacher
    model: mlp:784-64-10
    epochs: 2
    batch-size: 64
  - stage: distill
    student: cnn,width=8,fc=0
    epochs: 3
    batch-size: 32
    checkpoint-every: 4
    threads: 1
  - stage: quantize
    calib-samples: 64
  - stage: export
    target: rt
  - stage: eval
    engine: rt
YAML

# The plan, before anything ran: every stage runs; nothing is written.
expect_exit 0 "01-teacher \(teacher, recipe line 5\): runs" -- "$PARE" pipeline tiny.yaml --run-dir run1 --dry-run
[ -e run1 ] && fail "--dry-run wrote the run folder"

# The whole run, then the same recipe again: everything is skipped and nothing changes.
"$PARE" pipeline tiny.yaml --run-dir run1 --out final.onnx 2> run1.log || { cat run1.log; fail "the run failed"; }
for d in 01-teacher 02-distill 03-quantize 04-export; do
  [ -s "run1/$d/model.onnx" ] && grep -q '"status": "done"' "run1/$d/stage.json" && echo "ok: $d done" || fail "$d: no model or not done"
done
grep -q '"accuracy"' run1/05-eval/stage.json && echo "ok: eval stage measured" || fail "eval stage has no accuracy"
cmp -s final.onnx run1/04-export/model.onnx && echo "ok: --out is the final model" || fail "--out differs from the final model"
[ -s run1/report.html ] && echo "ok: report.html" || fail "no report.html"
"$PY" - <<'PYEOF' && echo "ok: run.json and stage summaries" || fail "run.json or stage.json content"
import json
run = json.load(open("run1/run.json"))
assert run["format"] == "pare-run-1" and run["status"] == "done", run
assert run["final"] == "04-export/model.onnx", run["final"]
for d in run["stages"][:4]:
    s = json.load(open(f"run1/{d}/stage.json"))
    assert s["summary"]["file_bytes"] > 0 and s["summary"]["accuracy"] is not None, (d, s["summary"])
    assert s["layers"], d
assert json.load(open("run1/03-quantize/stage.json"))["quantization"], "no SQNR per layer"
assert json.load(open("run1/04-export/stage.json"))["summary"]["engine"] == "rt"
assert len(open("run1/02-distill/metrics.jsonl").readlines()) == 3
PYEOF
expect_exit 0 "done in" -- "$PARE" pipeline tiny.yaml --run-dir run1 --until distill --out until.onnx
cmp -s until.onnx run1/02-distill/model.onnx && echo "ok: --until: --out is that stage's model" || fail "--until: --out is not the distill model"
md5sum run1/*/model.onnx > sums.before
expect_exit 0 "5/5\] eval: unchanged, skipped" -- "$PARE" pipeline tiny.yaml --run-dir run1
md5sum -c --quiet sums.before && echo "ok: a second run changes nothing" || fail "a second run changed an artifact"
# A changed option reruns that stage and those after it, not the ones before.
sed 's/^    epochs: 3/    epochs: 2/' tiny.yaml > tiny2.yaml
out=$("$PARE" pipeline tiny2.yaml --run-dir run1 --dry-run)
grep -q "01-teacher.*unchanged, skipped" <<<"$out" && grep -q "02-distill.*: runs$" <<<"$out" &&
  grep -q "03-quantize.*runs (after 02-distill)" <<<"$out" && echo "ok: the plan reruns from the changed stage" ||
  fail "plan after a change:"$'\n'"$out"

# SIGKILL in the middle of the distill stage, then --resume: the finished stage is skipped, the
# killed one resumes from its checkpoint, and every artifact equals the uninterrupted run's.
"$PARE" pipeline tiny.yaml --run-dir run2 --quiet &
pid=$!
for _ in $(seq 1 1200); do [ -f run2/02-distill/checkpoint.pt ] && break; sleep 0.05; done
expect_exit 1 "run folder 'run2' is in use by another pare pipeline" -- "$PARE" pipeline tiny.yaml --run-dir run2
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
sleep 0.5
[ -f run2/02-distill/checkpoint.pt ] || fail "no checkpoint before the kill"
[ -f run2/02-distill/model.onnx ] && fail "the distill stage finished before the kill: the test did not test resume"
for p in $(pgrep -x pare); do  # stages run in their run folder
  [ "$(readlink "/proc/$p/cwd")" == "$work/run2" ] && fail "a stage outlived the killed pipeline: $(tr '\0' ' ' < "/proc/$p/cmdline")"
done
"$PARE" pipeline tiny.yaml --run-dir run2 --resume 2> resume.log || { cat resume.log; fail "--resume failed"; }
grep -q "teacher: unchanged, skipped" resume.log && grep -q "distill (distill): resuming from its checkpoint" resume.log &&
  echo "ok: --resume skipped the teacher and resumed the distill stage" || fail "resume log:"$'\n'"$(cat resume.log)"
for d in 01-teacher 02-distill 03-quantize 04-export; do
  cmp -s "run1/$d/model.onnx" "run2/$d/model.onnx" && echo "ok: $d identical after kill and resume" || fail "$d differs after resume"
done

# nproc: 2 runs a stage under pare launch: here a teacher sharded tensor parallel over 2 ranks.
cat > dist.yaml <<'YAML'
data: npy:x.npy,y.npy
seed: 3
stages:
  - stage: teacher
    model: run1/01-teacher/model.onnx
  - stage: distill
    nproc: 2
    teacher-parallel: tp
    student: mlp:784-16-10
    epochs: 1
    batch-size: 64
YAML
expect_exit 0 "" -- "$PARE" pipeline dist.yaml --run-dir run4 --quiet
grep -q '"status": "done"' run4/02-distill/stage.json && grep -q 'data parallel over 2 ranks' run4/02-distill/log.txt &&
  echo "ok: an nproc: 2 stage ran under pare launch" || fail "nproc stage: $(cat run4/02-distill/log.txt)"

# The example recipes are valid (checked, planned, nothing run).
for r in "$PARE_SOURCE_DIR"/examples/recipes/*.yaml; do
  expect_exit 0 "01-teacher \(teacher" -- "$PARE" pipeline "$r" --run-dir plan --dry-run
done

# Bad recipes: exit 2, the recipe's line and key named, no run folder.
bad() {  # bad NAME PATTERN: tiny.yaml edited by the sed script on stdin
  local name=$1 pattern=$2
  sed -f /dev/stdin tiny.yaml > "$name.yaml"
  expect_exit 2 "$pattern" -- "$PARE" pipeline "$name.yaml" --run-dir "bad-$name"
  [ -e "bad-$name" ] && fail "$name: a bad recipe left a run folder"
  return 0
}
bad syntax 'syntax.yaml:6:.*YAML syntax error' <<<'6s/.*/    model: cnn: 2/'
bad kind "kind.yaml:9: key 'stage': unknown stage 'distil' \(known: teacher, distill" <<<'9s/distill/distil/'
bad key "key.yaml:7: key 'epoch': unknown key for a teacher stage \(pare train has no --epoch\)" <<<'7s/epochs/epoch/'
bad type "type.yaml:11: key 'epochs':.*three" <<<'11s/3/three/'
bad choice "choice.yaml:18: key 'target':.*tflite" <<<'18s/rt/tflite/'
bad file "file.yaml:6: key 'model': file 'gone.onnx' not found" <<<'6s/mlp:784-64-10/gone.onnx/'
bad data "data.yaml:2: key 'data': data file 'x.npz' not found" <<<'2s/x.npy/x.npz/'
bad reserved "reserved.yaml:8: key 'out': set by the pipeline" <<<'8s/batch-size: 64/out: t.onnx/'
bad ref "ref.yaml:10: key 'student': 'teachr' is no earlier stage" <<<'10s/cnn,width=8,fc=0/teachr/'
bad noartifact "noartifact.yaml:.*key 'input': stage 'eval' .* writes no model" <<<'$a\  - stage: export\n    input: eval\n    target: onnx'
bad top "top.yaml:3: key 'sed': unknown key \(a recipe has name" <<<'3s/seed/sed/'
bad dup "dup.yaml:.*key 'name': stage name 'teacher' already used at line 5" <<<'$a\  - stage: teacher\n    name: teacher\n    model: cnn'
expect_exit 2 "--from distil: .* has no such stage" -- "$PARE" pipeline tiny.yaml --run-dir run1 --from distil
expect_exit 2 "cannot open 'nope.yaml'" -- "$PARE" pipeline nope.yaml --run-dir bad-nope

# A stage that fails at run time stops the run: it is named with its recipe line, the stages
# after it do not run, and the run folder still gets its report.
head -c 300 run1/01-teacher/model.onnx > broken.onnx
sed 's/model: mlp:784-64-10/model: broken.onnx/; /epochs: 2/d; /batch-size: 64/d' tiny.yaml > failing.yaml
expect_exit 2 "stage 'distill' \(failing.yaml:7\) failed with exit code 2" -- "$PARE" pipeline failing.yaml --run-dir run3
[ -e run3/03-quantize/stage.json ] && fail "a stage after the failed one ran"
grep -q '"status": "failed"' run3/run.json && [ -s run3/report.html ] && echo "ok: failed run recorded and reported" ||
  fail "failed run: run.json or report"
finish
