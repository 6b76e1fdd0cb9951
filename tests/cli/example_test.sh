#!/usr/bin/env bash
# examples/api: one program per stage of pare's C++ API (train, distill, prune, quantize, export,
# pipeline) builds against the installed package (find_package(pare)) and runs, each on what the
# one before wrote; a bad input exits 2 naming the file.
source "$(dirname "$0")/lib.sh"
: "${PARE_BUILD_DIR:?}" "${PARE_SOURCE_DIR:?}"
cmake --install "$PARE_BUILD_DIR" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$PARE_SOURCE_DIR/examples/api" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || { cat "$work/configure.log"; fail "configure"; finish; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log"; fail "build"; finish; }
for f in "$PARE_SOURCE_DIR"/examples/api/*.cpp; do
  n=$(wc -l < "$f")
  [ "$n" -lt 60 ] && echo "ok: $(basename "$f") is $n lines" || fail "$(basename "$f") is $n lines (examples stay under 60)"
done
make_npy_data "$work" 256
data="npy:$work/x.npy,$work/y.npy" bin=$work/build
expect_exit 0 "test accuracy" -- "$bin/train_example" lenet5 "$data" "$work/t.onnx" 1
expect_exit 0 "student accuracy" -- "$bin/distill_example" "$work/t.onnx" "$data" "$work/s.onnx" 1
expect_exit 0 "parameters [0-9]+ -> [0-9]+, accuracy .* recovered" -- "$bin/prune_example" "$work/t.onnx" "$data" "$work/p.onnx" 0.5
expect_exit 0 "SQNR" -- "$bin/quantize_example" "$work/p.onnx" "$data" "$work/q.onnx"
expect_exit 0 "QuantizeLinear" -- "$PARE" inspect "$work/q.onnx"
expect_exit 0 "bytes" -- "$bin/export_example" "$work/q.onnx" "$work/e.onnx" rt
expect_exit 0 "parameters" -- "$PARE" inspect "$work/e.onnx"
expect_exit 0 "report .*report.html" -- "$bin/pipeline_example" "$PARE_SOURCE_DIR/examples/cmake-consumer/tiny.yaml" \
  "$work/run" "$work/prefix/bin/pare"
expect_exit 0 '"status": *"done"' -- cat "$work/run/run.json"
expect_exit 2 "nope.onnx" -- "$bin/distill_example" "$work/nope.onnx" "$data" "$work/t2.onnx"
no_file "$work/t2.onnx"
expect_exit 2 "nope.yaml" -- "$bin/pipeline_example" "$work/nope.yaml" "$work/run2" "$work/prefix/bin/pare"
finish
