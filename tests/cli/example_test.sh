#!/usr/bin/env bash
# examples/distill builds against the installed package (find_package(pare)) and runs.
source "$(dirname "$0")/lib.sh"
: "${PARE_BUILD_DIR:?}" "${PARE_SOURCE_DIR:?}"
cmake --install "$PARE_BUILD_DIR" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$PARE_SOURCE_DIR/examples/distill" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || { cat "$work/configure.log"; fail "configure"; finish; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log"; fail "build"; finish; }
make_npy_data "$work" 256
expect_exit 0 "student accuracy" -- "$work/build/distill_example" lenet5 "npy:$work/x.npy,$work/y.npy" "$work/s.onnx" 1
expect_exit 0 "parameters" -- "$PARE" inspect "$work/s.onnx"
expect_exit 2 "nope.onnx" -- "$work/build/distill_example" "$work/nope.onnx" "npy:$work/x.npy,$work/y.npy" "$work/t.onnx"
finish
