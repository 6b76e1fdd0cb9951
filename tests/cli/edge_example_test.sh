#!/usr/bin/env bash
# examples/edge links pare_rt alone: built against the installed package (find_package(pare_rt)),
# it carries no libtorch, and its C++ and C programs classify as `pare run --engine rt` does.
source "$(dirname "$0")/lib.sh"
: "${PARE_BUILD_DIR:?}" "${PARE_SOURCE_DIR:?}"
cmake --install "$PARE_BUILD_DIR" --prefix "$work/prefix" > "$work/install.log"
lib=$(ls "$work"/prefix/lib*/libpare_rt.so* | head -1)
if ldd "$lib" | grep -q torch; then fail "libpare_rt links libtorch: $(ldd "$lib" | grep torch)"; else echo "ok: libpare_rt.so has no libtorch"; fi
cmake -S "$PARE_SOURCE_DIR/examples/edge" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || { cat "$work/configure.log"; fail "configure"; finish; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log"; fail "build"; finish; }
for exe in edge_classify edge_classify_c; do
  if ldd "$work/build/$exe" | grep -q torch; then fail "$exe links libtorch"; else echo "ok: $exe has no libtorch"; fi
done

# A quantized lenet5 (random weights, calibrated on the data) and 64 images as raw float32.
make_npy_data "$work" 64
"$PY" -c "import numpy as np; np.load('$work/x.npy').astype('<f4').tofile('$work/x.f32')"
"$PARE" quantize lenet5 --calib "npy:$work/x.npy,$work/y.npy" --quiet --out "$work/q.onnx" > /dev/null
"$PARE" run "$work/q.onnx" --engine rt --input "$work/x.npy" --output "$work/y_rt.npy"
"$PY" -c "import numpy as np; print('\n'.join(str(int(k)) for k in np.load('$work/y_rt.npy').argmax(1)))" > "$work/want.txt"
for exe in "edge_classify $work/q.onnx $work/x.f32" "edge_classify_c $work/q.onnx $work/x.f32 28 28"; do
  read -r -a cmd <<< "$exe"
  if "$work/build/${cmd[0]}" "${cmd[@]:1}" > "$work/got.txt" 2> "$work/err.txt" && cmp -s "$work/got.txt" "$work/want.txt"; then
    echo "ok: ${cmd[0]} classifies as pare run --engine rt"
  else
    fail "${cmd[0]}: $(cat "$work/err.txt"; diff "$work/got.txt" "$work/want.txt" | head -5)"
  fi
done
expect_exit 2 "nope.onnx" -- "$work/build/edge_classify" "$work/nope.onnx" "$work/x.f32"
expect_exit 2 "nope.onnx" -- "$work/build/edge_classify_c" "$work/nope.onnx" "$work/x.f32" 28 28
head -c 1000 "$work/q.onnx" > "$work/cut.onnx"
expect_exit 2 "cut.onnx.*(truncated|not a valid)" -- "$work/build/edge_classify_c" "$work/cut.onnx" "$work/x.f32" 28 28
finish
