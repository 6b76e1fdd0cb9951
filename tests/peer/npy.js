// .npy files for the onnxruntime-node scripts (tests/peer/ort_run.js, bench/ort_bench.js): format
// versions 1.0, 2.0 and 3.0, little-endian, C order.
'use strict';

const fs = require('fs');

function die(msg, code = 2) {
  process.stderr.write(`npy: ${msg}\n`);
  process.exit(code);
}

const DTYPES = {
  // descr -> [onnxruntime type, TypedArray, bytes per element]
  '<f4': ['float32', Float32Array, 4],
  '<f8': ['float64', Float64Array, 8],
  '<i8': ['int64', BigInt64Array, 8],
  '<i4': ['int32', Int32Array, 4],
  '<i2': ['int16', Int16Array, 2],
  '|i1': ['int8', Int8Array, 1],
  '|u1': ['uint8', Uint8Array, 1],
  '|b1': ['bool', Uint8Array, 1],
};

function readNpy(path) {
  const buf = fs.readFileSync(path);
  const magic = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);  // \x93NUMPY
  if (buf.length < 10 || !buf.subarray(0, 6).equals(magic)) die(`${path}: not a .npy file`);
  const major = buf[6];
  let headerLen, offset;
  if (major === 1) {
    headerLen = buf.readUInt16LE(8);
    offset = 10;
  } else if (major === 2 || major === 3) {
    headerLen = buf.readUInt32LE(8);
    offset = 12;
  } else {
    die(`${path}: unsupported .npy format version ${major}`);
  }
  const header = buf.subarray(offset, offset + headerLen).toString('latin1');
  const descr = /'descr'\s*:\s*'([^']+)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) die(`${path}: malformed .npy header: ${header.trim()}`);
  if (fortran[1] === 'True') die(`${path}: Fortran-order arrays are not supported`);
  let d = descr[1];
  if (d === '=f4' || d === '=f8' || d === '=i8' || d === '=i4' || d === '=i2') d = '<' + d.slice(1);
  if (d === '<u1' || d === '=u1') d = '|u1';
  if (d === '<i1' || d === '=i1') d = '|i1';
  const info = DTYPES[d];
  if (!info) die(`${path}: unsupported dtype '${descr[1]}' (supported: ${Object.keys(DTYPES).join(' ')})`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = dims.reduce((a, b) => a * b, 1);
  const start = offset + headerLen;
  const [type, Ctor, size] = info;
  if (buf.length - start !== n * size)
    die(`${path}: shape [${dims}] of ${d} needs ${n * size} bytes, the file has ${buf.length - start}`);
  // Copy into a fresh, aligned buffer (the file's data offset need not be a multiple of 8).
  const data = new Ctor(n);
  Buffer.from(data.buffer).set(buf.subarray(start, start + n * size));
  return { type: type === 'bool' ? 'bool' : type, data: type === 'bool' ? Uint8Array.from(data) : data, dims };
}

const DESCR_OF = {
  float32: ['<f4', 4], float64: ['<f8', 8], int64: ['<i8', 8], int32: ['<i4', 4],
  int16: ['<i2', 2], int8: ['|i1', 1], uint8: ['|u1', 1], bool: ['|b1', 1],
};

function writeNpy(path, type, data, dims) {
  const info = DESCR_OF[type];
  if (!info) die(`cannot write output of type ${type} to ${path}`, 1);
  const [descr, size] = info;
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  // Pad with spaces so that magic + version + length + header + '\n' is a multiple of 64.
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]).copy(pre);
  pre.writeUInt16LE(header.length, 8);
  let bytes;
  if (type === 'bool') bytes = Buffer.from(Uint8Array.from(data, (v) => (v ? 1 : 0)));
  else bytes = Buffer.from(data.buffer, data.byteOffset, data.length * size);
  const tmp = `${path}.tmp.${process.pid}`;
  fs.writeFileSync(tmp, Buffer.concat([pre, Buffer.from(header, 'latin1'), bytes]));
  fs.renameSync(tmp, path);
}

module.exports = { readNpy, writeNpy };
