"""gguf-py's side of tests/peer/gguf_peer_test.sh.

  gguf_peer.py make DIR [REAL.gguf]

writes DIR/synthetic.gguf with gguf-py's GGUFWriter (metadata of every value type; tensors of each
type pare dequantizes that gguf-py can dequantize: quantized by gguf.quants.quantize where gguf-py
can, else random blocks with finite fp16 scales), and DIR/manifest.json: for each file (the
synthetic one and REAL.gguf if given) its metadata as GGUFReader reads it and, per tensor, its type,
PyTorch-order shape, the CRC-32 of its stored bytes and of gguf.quants.dequantize's float32 values,
and for some tensors those values as DIR/<n>.npy. pare's gtest GgufPeer.FromFiles checks them.
"""
import json
import os
import sys
import zlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V
from gguf.quants import dequantize, quantize

# Types gguf-py quantizes itself, and the K-quants it only dequantizes: for those, the fields that
# hold fp16 scales (byte offsets in a block) get finite values, the rest random bytes.
QUANTIZED = [Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]
RANDOM_BLOCKS = {Q.Q2_K: [80, 82], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}


def random_blocks(rng, qtype, rows, cols):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for at in RANDOM_BLOCKS[qtype]:
        scales = (rng.standard_normal((rows, cols // block)) * 0.01).astype(np.float16)
        raw[:, :, at:at + 2] = scales.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, -1)


def write_synthetic(path, rng):
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1e-5)
    w.add_uint64("t.u64", 2**63 - 1)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.string", "héllo, wörld")
    w.add_array("t.strings", ["a", "", "tökén", "\n"])
    w.add_array("t.bools", [True, False, True])
    w.add_array("t.floats", [0.5, -2.25, 1e-7])
    for vtype, values in [(V.UINT8, [0, 255]), (V.INT8, [-128, 127]), (V.UINT16, [0, 65535]),
                          (V.INT16, [-32768, 32767]), (V.UINT32, [0, 2**32 - 1]), (V.INT32, [-(2**31), 7]),
                          (V.UINT64, [0, 2**63 - 1]), (V.INT64, [-(2**63), 2**63 - 1]),
                          (V.FLOAT64, [1.5, -1e300])]:
        w.add_key_value(f"t.array.{vtype.name.lower()}", values, V.ARRAY, sub_type=vtype)
    w.add_custom_alignment(64)
    for i, qtype in enumerate(QUANTIZED + list(RANDOM_BLOCKS)):
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        rows, cols = 3 + i % 3, max(block, 32) * (2 + i % 2)
        if qtype in RANDOM_BLOCKS:
            w.add_tensor(f"{qtype.name}.matrix", random_blocks(rng, qtype, rows, cols), raw_dtype=qtype)
            continue
        data = rng.standard_normal((rows, cols)).astype(np.float32)
        data[0, :4] = [0.0, -0.0, 1e-8, 65504.0]
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(f"{qtype.name}.matrix", quantize(data, qtype))
        else:
            w.add_tensor(f"{qtype.name}.matrix", quantize(data, qtype), raw_dtype=qtype)
    w.add_tensor("F32.vector", rng.standard_normal(7).astype(np.float32))
    w.add_tensor("Q4_1.3d", quantize(rng.standard_normal((2, 3, 64)).astype(np.float32), Q.Q4_1), raw_dtype=Q.Q4_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def metadata(reader):
    out = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the header, which GGUFReader lists as fields
        entry = {"key": key, "type": field.types[0].name.lower()}
        if field.types[0] == V.ARRAY:
            entry["elem"] = field.types[1].name.lower()
        value = field.contents()
        plain = lambda v: v.item() if isinstance(v, np.generic) else v
        entry["value"] = [plain(v) for v in value] if isinstance(value, list) else plain(value)
        out.append(entry)
    return out


def describe(reader, path, out_dir, npy_every, counter):
    tensors = []
    for i, t in enumerate(reader.tensors):
        values = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        shape = [int(d) for d in reversed(t.shape)]
        values = values.reshape(shape)
        entry = {"name": t.name, "type": t.tensor_type.name, "shape": shape,
                 "raw_crc32": zlib.crc32(np.ascontiguousarray(t.data).tobytes()),
                 "crc32": zlib.crc32(values.tobytes())}
        if i % npy_every == 0:
            entry["npy"] = f"{counter[0]}.npy"
            np.save(os.path.join(out_dir, entry["npy"]), values)
            counter[0] += 1
        tensors.append(entry)
    return {"file": path, "version": int(reader.fields["GGUF.version"].contents()),
            "metadata": metadata(reader), "tensors": tensors}


def main():
    if len(sys.argv) < 3 or sys.argv[1] != "make":
        sys.exit(__doc__)
    out_dir = sys.argv[2]
    rng = np.random.default_rng(38)
    synthetic = os.path.join(out_dir, "synthetic.gguf")
    write_synthetic(synthetic, rng)
    counter = [0]
    files = [describe(gguf.GGUFReader(synthetic), synthetic, out_dir, 1, counter)]
    types = {t["type"] for t in files[0]["tensors"]}
    print(f"synthetic.gguf: {len(files[0]['metadata'])} keys, {len(files[0]['tensors'])} tensors of {sorted(types)}")
    for real in sys.argv[3:]:
        # Every tensor by CRC, every 17th in full (token_embd, the norms and Q4_1 matrices among them).
        files.append(describe(gguf.GGUFReader(real), real, out_dir, 17, counter))
        types = {t["type"] for t in files[-1]["tensors"]}
        print(f"{os.path.basename(real)}: {len(files[-1]['metadata'])} keys, {len(files[-1]['tensors'])} tensors "
              f"of {sorted(types)}")
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(files, f)


if __name__ == "__main__":
    main()
