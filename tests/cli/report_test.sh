#!/usr/bin/env bash
# pare report end to end on synthetic run folders (format "pare-run-1", no training needed):
#   - a finished run of five stages (teacher, distill, prune skipped: its stage.json started before
#     the run, quantize with its SQNR layers, eval with null summary fields) whose names and recipe
#     hold characters HTML must escape:
#     exit 0, the path printed, one self-contained file (no URL, no src=/href=, no @import/url()),
#     the text escaped, one table row per stage;
#   - the report opened in headless Chromium: no console message at all (an error or an uncaught
#     exception would log one; a scratch page with a deliberate error shows the check can fail), the
#     SVG charts the fixture implies counted in the rendered DOM (6: two Pareto plots, two training
#     curves, per-layer sparsity, one SQNR chart), and a screenshot at
#     $PARE_BUILD_DIR/report-screenshot.png;
#   - a partial run (running, a stage without summary, a torn metrics line, an unreadable stage.json,
#     a listed stage with no folder): a report with 5 charts and a "No data" note for SQNR;
#   - bad input: a missing folder, a folder without run.json, run.json that is not JSON or not of
#     format pare-run-1: exit 2 naming the file, and no report.html written.
# Needs chromium (scripts/install-deps installs it); fails without it.
source "$(dirname "$0")/lib.sh"
shots=${PARE_BUILD_DIR:-$work}

# make_run DIR KIND: writes a synthetic run folder; KIND is "done" or "partial".
make_run() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, os, sys
run, kind = sys.argv[1:]
os.makedirs(run)
def write(path, obj):
    with open(os.path.join(run, path), "w") as f:
        f.write(obj if isinstance(obj, str) else json.dumps(obj, indent=1))
def layers(sparsity):
    shapes = [("conv1", "Conv", [16, 1, 3, 3]), ("conv2 <&> \"b\"", "Conv", [32, 16, 3, 3]),
              ("fc1", "Gemm", [128, 1568]), ("fc2", "Gemm", [10, 128])]
    return [{"name": n, "op": op, "parameters": 1000 * (i + 1), "flops": 5000 * (i + 1), "sparsity": s,
             "weight_shape": w, "output_shape": [1, w[0]]} for i, ((n, op, w), s) in enumerate(zip(shapes, sparsity))]
def metrics(d, accs):
    lines = [json.dumps({"epoch": e + 1, "samples": 60000, "seconds": 70.0, "steps": 469, "train_accuracy": a - 0.02,
                         "train_loss": 3 * (1.05 - accs[0]) / (e + 1.5), "val_accuracy": a, "val_loss": 0.3}) for e, a in enumerate(accs)]
    write(f"{d}/metrics.jsonl", "\n".join(lines) + "\n")
def stage(d, name, kind, idx, summary, status="done", **extra):
    os.makedirs(os.path.join(run, d), exist_ok=True)
    s = {"name": name, "kind": kind, "index": idx, "line": 3 + 4 * idx, "command": ["pare", kind],
         "key": "9f1c%02d" % idx, "status": status, "seconds": 10.5 * idx * idx, "artifact": "model.onnx",
         "input": None, "summary": summary, "metrics": None, "started": "2026-12-01T08:%02d:00Z" % idx, **extra}
    write(f"{d}/stage.json", s)
def summ(acc, size, lat, sparsity=0.0, engine="torch"):
    return {"accuracy": acc, "file_bytes": size, "parameters": size // 4, "flops_per_sample": size * 12,
            "sparsity": sparsity, "latency_ms": lat, "engine": engine}

recipe = 'name: fmnist <small> & "fast"\n# a comment with <script>alert("x")</script> & \'quotes\'\nstages:\n  - teacher: {load: teacher.onnx}\n'
write("recipe.yaml", recipe)
meta = {"format": "pare-run-1", "name": 'fmnist <small> & "fast"', "recipe": "/tmp/r&d/recipe.yaml",
        "pare_version": "0.6.0", "torch_version": "1.13.1",
        "machine": {"cpu": "AMD EPYC 7B13 <vm>", "cores": 2, "memory_bytes": 25000000000,
                    "os": "Debian GNU/Linux 12 (bookworm)", "host": "build&test"},
        "started": "2026-12-01T08:00:00Z"}
if kind == "done":
    stage("01-teacher", "teacher", "teacher", 1, summ(0.9187, 827986, 0.41), layers=layers([0, 0, 0, 0]), metrics="metrics.jsonl")
    metrics("01-teacher", [0.85, 0.89, 0.905, 0.9187])
    stage("02-distill", "distill <kd>", "distill", 2, summ(0.9012, 210000, 0.15), layers=layers([0, 0, 0, 0]), metrics="metrics.jsonl")
    metrics("02-distill", [0.80, 0.86, 0.88, 0.895, 0.9012])
    # Skipped: the pipeline left its stage.json from an earlier run, started before this one.
    stage("03-prune", "prune", "prune", 3, summ(0.8950, 209000, 0.14, 0.62), started="2026-11-30T17:02:11Z",
          layers=layers([0.5, 0.7, 0.8, 0.1]), metrics="metrics.jsonl")
    metrics("03-prune", [0.88, 0.895])
    q = [{"node": n, "op": op, "weight": n + ".weight", "weight_sqnr_db": w, "output_sqnr_db": o, "per_channel": True}
         for n, op, w, o in [("conv1", "Conv", 41.2, 38.5), ("conv2 <&> \"b\"", "Conv", 39.9, 35.1),
                             ("fc1", "Gemm", 45.9, 43.3), ("fc2", "Gemm", 44.0, None)]]
    stage("04-quantize", "quantize", "quantize", 4, summ(0.8941, 60500, 0.08, 0.6, "rt"), layers=layers([0.5, 0.7, 0.8, 0.1]),
          quantization=q)
    stage("05-eval", "eval", "eval", 5, {"accuracy": 0.8941, "file_bytes": None, "parameters": None,
          "flops_per_sample": None, "sparsity": None, "latency_ms": None, "engine": None}, artifact=None)
    meta.update(status="done", finished="2026-12-01T08:13:32Z", seconds=812.3, final="04-quantize/model.onnx",
                stages=["01-teacher", "02-distill", "03-prune", "04-quantize", "05-eval"])
else:
    stage("01-teacher", "teacher", "teacher", 1, summ(0.9187, 827986, 0.41), layers=layers([0, 0, 0, 0]), metrics="metrics.jsonl")
    metrics("01-teacher", [0.85, 0.9187])
    stage("02-distill", "distill", "distill", 2, None, status="running", metrics="metrics.jsonl")
    metrics("02-distill", [0.80, 0.86])
    with open(os.path.join(run, "02-distill/metrics.jsonl"), "a") as f:
        f.write('{"epoch": 3, "train_lo')  # torn: the stage is writing it
    os.makedirs(os.path.join(run, "03-prune"))
    write("03-prune/stage.json", "{not json")
    meta.update(status="running", seconds=None, stages=["01-teacher", "02-distill", "03-prune", "04-quantize"])
write("run.json", meta)
PYEOF
}

# console_lines LOG: the console messages Chromium logged (it writes every console.* call and
# uncaught exception as a line with "CONSOLE"; the other lines are its own dbus/GPU noise).
console_lines() { grep -F "CONSOLE" "$1" || true; }

# render HTML DOM LOG [SCREENSHOT]: loads HTML in headless Chromium, dumps the DOM after its scripts ran.
render() {
  local shot=()
  [ -n "${4:-}" ] && shot=(--screenshot="$4" --window-size=1280,4000 --hide-scrollbars)
  timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$work/chromium-profile" --enable-logging=stderr --v=0 "${shot[@]}" \
    --dump-dom "file://$1" >"$2" 2>"$3" || fail "chromium exited $? on $1: $(tail -3 "$3")"
}

count_charts() { grep -o '<svg class="chart"' "$1" | wc -l; }

# 1. A finished run.
run="$work/run"
make_run "$run" done
expect_exit 0 "^$run/report.html$" -- "$PARE" report "$run"
html="$run/report.html"
[ -s "$html" ] && echo "ok: report.html written" || fail "no report.html"
ls "$html".tmp* >/dev/null 2>&1 && fail "a temporary file was left behind" || echo "ok: no temporary file"
if grep -nE 'https?://|(src|href)[[:space:]]*=|@import|url\(' "$html"; then
  fail "the report refers to something outside itself (lines above)"
else
  echo "ok: self-contained (no URL, src=, href=, @import or url())"
fi
grep -qF 'alert(&quot;x&quot;)' "$html" && ! grep -qF '<script>alert' "$html" && echo "ok: recipe escaped" \
  || fail "recipe text not escaped"
grep -qF 'fmnist &lt;small&gt; &amp; &quot;fast&quot;' "$html" && grep -qF 'distill &lt;kd&gt;' "$html" \
  && grep -qF 'conv2 &lt;&amp;&gt; &quot;b&quot;' "$html" && echo "ok: names escaped" || fail "names not escaped"
[ "$(grep -o '<script' "$html" | wc -l)" -eq 1 ] && echo "ok: one script element" || fail "script elements: $(grep -c '<script' "$html")"
[ "$(grep -o '<tr data-stage=' "$html" | wc -l)" -eq 5 ] && echo "ok: one table row per stage" || fail "table rows"
for want in '13 min 32 s' '04-quantize/model.onnx' '13.7&times;' '-2.46 pp' '>skipped</span>' '0.080 <span class="muted">rt</span>'; do
  grep -qF -- "$want" "$html" && echo "ok: header/table show '$want'" || fail "report lacks '$want'"
done
expect_exit 0 "^$work/other.html$" -- "$PARE" report "$run" --out "$work/other.html"
cmp -s "$html" "$work/other.html" && echo "ok: --out writes the same report" || fail "--out differs"

# 2. Chromium: the console check must be able to fail, then the report must pass it.
if ! command -v chromium >/dev/null 2>&1; then
  fail "chromium is not installed (scripts/install-deps installs it): the report was not rendered"
else
  printf '<!DOCTYPE html><p>x</p><script>console.error("planted"); no_such_function();</script>\n' >"$work/planted.html"
  render "$work/planted.html" "$work/planted.dom" "$work/planted.log"
  [ "$(console_lines "$work/planted.log" | wc -l)" -ge 2 ] && echo "ok: a planted console error is seen" \
    || fail "the console check cannot see a planted error: $(cat "$work/planted.log")"
  render "$html" "$work/report.dom" "$work/report.log" "$shots/report-screenshot.png"
  if [ -n "$(console_lines "$work/report.log")" ]; then fail "console messages:"$'\n'"$(console_lines "$work/report.log")"
  else echo "ok: no console message"; fi
  n=$(count_charts "$work/report.dom")
  [ "$n" -eq 6 ] && echo "ok: 6 charts rendered" || fail "rendered $n charts, want 6"
  names=$(grep -o 'data-chart="[^"]*"' "$work/report.dom" | tr '\n' ' ')
  [ "$names" = 'data-chart="pareto_size" data-chart="pareto_latency" data-chart="val_accuracy" data-chart="train_loss" data-chart="layer_sparsity" data-chart="sqnr_04-quantize" ' ] \
    && echo "ok: chart names" || fail "charts: $names"
  [ "$(grep -c 'data-empty=' "$work/report.dom")" -eq 0 ] && echo "ok: no 'no data' note" || fail "unexpected 'no data' note"
  "$PY" - "$shots/report-screenshot.png" <<'PYEOF' && echo "ok: screenshot $shots/report-screenshot.png" || fail "screenshot"
import struct, sys
head = open(sys.argv[1], "rb").read(24)
assert head[:8] == b"\x89PNG\r\n\x1a\n", head
assert struct.unpack(">II", head[16:24]) == (1280, 4000), struct.unpack(">II", head[16:24])
PYEOF
fi

# 3. A partial run: still running, a stage without summary, a torn metrics line, an unreadable
# stage.json, a stage not started.
part="$work/partial"
make_run "$part" partial
expect_exit 0 "report.html" -- "$PARE" report "$part"
grep -qF 'unreadable' "$part/report.html" && grep -qF 'no stage.json' "$part/report.html" \
  && echo "ok: the partial run's stages are shown" || fail "partial run's stages"
if command -v chromium >/dev/null 2>&1; then
  render "$part/report.html" "$work/partial.dom" "$work/partial.log"
  [ -z "$(console_lines "$work/partial.log")" ] && echo "ok: partial: no console message" \
    || fail "partial: console messages: $(console_lines "$work/partial.log")"
  n=$(count_charts "$work/partial.dom")
  [ "$n" -eq 5 ] && echo "ok: partial: 5 charts" || fail "partial: rendered $n charts, want 5"
  grep -qF 'data-empty="sqnr"' "$work/partial.dom" && echo "ok: partial: SQNR says no data" || fail "partial: SQNR note"
fi

# 4. Bad input: exit 2 naming the file, nothing written.
expect_exit 2 "nope.*not a folder" -- "$PARE" report "$work/nope"
no_file "$work/nope"
mkdir "$work/empty"
expect_exit 2 "empty/run.json.*missing" -- "$PARE" report "$work/empty"
no_file "$work/empty/report.html"
mkdir "$work/badjson" && printf '{"format": "pare-run-1",' >"$work/badjson/run.json"
expect_exit 2 "badjson/run.json.*not valid JSON" -- "$PARE" report "$work/badjson"
no_file "$work/badjson/report.html"
mkdir "$work/format" && printf '{"format": "pare-run-0"}' >"$work/format/run.json"
expect_exit 2 "format/run.json.*pare-run-1.*pare-run-0" -- "$PARE" report "$work/format"
no_file "$work/format/report.html"
printf '[1, 2]' >"$work/format/run.json"
expect_exit 2 "format/run.json.*pare-run-1.*array" -- "$PARE" report "$work/format"
expect_exit 2 "run_dir is required|RUN_DIR|required" -- "$PARE" report

finish
