#!/usr/bin/env bash
# examples/cmake-consumer: pare_compress() of the installed package (find_package(pare)) runs
# `pare pipeline` as a build step with the installed pare, writes a valid model, does not rerun
# when nothing changed, reruns when the recipe changes (reusing unchanged stages), fails the build
# on a bad recipe, and refuses bad arguments at configure time.
source "$(dirname "$0")/lib.sh"
: "${PARE_BUILD_DIR:?}" "${PARE_SOURCE_DIR:?}"
cmake --install "$PARE_BUILD_DIR" --prefix "$work/prefix" > "$work/install.log"
cp -r "$PARE_SOURCE_DIR/examples/cmake-consumer" "$work/src"  # a copy: the recipe is edited below
build=$work/build model=$work/build/tiny.int8.onnx recipe=$work/src/tiny.yaml
comment="pare pipeline tiny.yaml: compressing into tiny.int8.onnx"
mtime() { stat -c %.9Y "$1"; }

cmake -S "$work/src" -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; fail "configure"; finish; }
if ninja -C "$build" -t commands tiny_model | grep -qF "$work/prefix/bin/pare pipeline $recipe --run-dir $build/pare-runs/tiny_model --out $model --quiet"; then
  echo "ok: the build step runs the installed pare pipeline"
else
  fail "unexpected build command: $(ninja -C "$build" -t commands tiny_model)"
fi

# 1. The first build runs the pipeline and writes a valid model.
cmake --build "$build" > "$work/build1.log" 2>&1 || { cat "$work/build1.log"; fail "first build"; finish; }
grep -qF "$comment" "$work/build1.log" && echo "ok: the first build ran the pipeline" || fail "no '$comment' in: $(cat "$work/build1.log")"
[ -s "$model" ] || { fail "no $model"; finish; }
expect_exit 0 "QuantizeLinear" -- "$PARE" inspect "$model"
expect_exit 0 '"status": *"done"' -- cat "$build/pare-runs/tiny_model/run.json"

# 2. Nothing changed: nothing runs, the model is not rewritten.
m1=$(mtime "$model")
cmake --build "$build" > "$work/build2.log" 2>&1 || { cat "$work/build2.log"; fail "second build"; }
if grep -qF "$comment" "$work/build2.log"; then fail "the pipeline reran with nothing changed: $(cat "$work/build2.log")"; else echo "ok: no rerun with nothing changed"; fi
[ "$(mtime "$model")" = "$m1" ] && echo "ok: the model was not rewritten" || fail "the model was rewritten"
explain=$(ninja -C "$build" -n -d explain tiny_model 2>&1)
grep -q "no work to do" <<<"$explain" && echo "ok: ninja -n: no work to do" || fail "ninja -n -d explain: $explain"

# 3. The recipe's time stamp changed: the pipeline reruns (its stages are reused), and then rests.
sleep 1.1 && touch "$recipe"
cmake --build "$build" > "$work/build3.log" 2>&1 || { cat "$work/build3.log"; fail "build after touch"; }
grep -qF "$comment" "$work/build3.log" && echo "ok: touching the recipe reran the pipeline" || fail "no rerun after touching the recipe: $(cat "$work/build3.log")"
[ "$(mtime "$model")" != "$m1" ] && echo "ok: the model is newer" || fail "the model was not rewritten after touching the recipe"
cmake --build "$build" > "$work/build4.log" 2>&1 || true
grep -qF "$comment" "$work/build4.log" && fail "the pipeline reran again after the touched recipe's build" || echo "ok: no rerun after that"

# 4. A changed quantize stage: the pipeline reruns; the teacher stage's model is reused.
teacher=$(ls -d "$build"/pare-runs/tiny_model/01-* | head -1)/model.onnx
t1=$(mtime "$teacher" || true)
sleep 1.1 && sed -i 's/calib-samples: 128/calib-samples: 64/' "$recipe"
cmake --build "$build" > "$work/build5.log" 2>&1 || { cat "$work/build5.log"; fail "build after the recipe changed"; }
grep -qF "$comment" "$work/build5.log" && echo "ok: changing the recipe reran the pipeline" || fail "no rerun after changing the recipe"
[ -n "$t1" ] && [ "$(mtime "$teacher")" = "$t1" ] && echo "ok: the teacher stage was reused" || fail "the teacher stage ran again"
expect_exit 0 "QuantizeLinear" -- "$PARE" inspect "$model"

# 5. A bad recipe fails the build with the recipe's error, and stays out of date until fixed.
sleep 1.1 && sed -i 's/calib-samples: 64/calib-sampels: 64/' "$recipe"
expect_exit 1 "calib-sampels" -- cmake --build "$build"
expect_exit 1 "calib-sampels" -- cmake --build "$build"
sed -i 's/calib-sampels: 64/calib-samples: 64/' "$recipe"
expect_exit 0 "" -- cmake --build "$build"

# 6. Argument errors are configure errors that name the argument.
bad() {  # bad NAME 'ARGUMENTS' PATTERN
  mkdir -p "$work/$1" && cp "$recipe" "$work/$1/"
  printf 'cmake_minimum_required(VERSION 3.18)\nproject(bad LANGUAGES CXX)\nfind_package(pare REQUIRED)\npare_compress(%s)\n' "$2" > "$work/$1/CMakeLists.txt"
  expect_exit 1 "$3" -- cmake -S "$work/$1" -B "$work/$1/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix"
}
bad no_recipe "TARGET m OUTPUT m.onnx" "pare_compress: missing RECIPE argument"
bad no_output "TARGET m RECIPE tiny.yaml" "pare_compress: missing OUTPUT argument"
bad no_target "RECIPE tiny.yaml OUTPUT m.onnx" "pare_compress: missing TARGET argument"
bad unknown "TARGET m RECIPE tiny.yaml OUTPUT m.onnx RUNDIR r" "unknown argument.*'RUNDIR"
bad unknown_after_depends "TARGET m RECIPE tiny.yaml OUTPUT m.onnx DEPENDS tiny.yaml RUNDIR r" "unknown argument.*'RUNDIR"
bad no_file "TARGET m RECIPE nope.yaml OUTPUT m.onnx" "RECIPE '.*nope.yaml'"
finish
