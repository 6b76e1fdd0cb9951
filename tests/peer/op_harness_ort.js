#!/usr/bin/env node
// The op harness's ONNX Runtime side: runs every case core_tests wrote (OpHarness.
// WritesEveryCaseForOnnxRuntime: one-node models, .npy inputs, pare's outputs, manifest.jsonl) in
// onnxruntime-node, in one process, and compares with pare's outputs under each case's tolerance
// (|pare - ort| <= atol + rtol * |ort|; integer and bool outputs within atol steps, mostly 0).
// Prints the ops covered out of those registered and the worst differences per op family, and a
// FAIL line naming the op and case for every mismatch.
//
//   node op_harness_ort.js DIR        (exit 0: all agree; 1: a mismatch or a case ORT refused)
'use strict';

const fs = require('fs');
const path = require('path');
const { readNpy } = require('./npy.js');

function die(msg) {
  process.stderr.write(`op_harness_ort: ${msg}\n`);
  process.exit(2);
}

/// Worst differences of `pare` against `ort`; `ok` when every element is within tolerance.
function compare(pare, ort, atol, rtol) {
  const r = { ok: true, abs: 0, rel: 0, why: '' };
  if (pare.type !== ort.type) return { ...r, ok: false, why: `type ${pare.type} vs onnxruntime ${ort.type}` };
  if (pare.dims.join(',') !== ort.dims.join(','))
    return { ...r, ok: false, why: `shape [${pare.dims}] vs onnxruntime [${ort.dims}]` };
  const exactType = !['float32', 'float64'].includes(ort.type);  // integers and bools: within atol steps
  if (exactType) rtol = 0;
  for (let i = 0; i < ort.data.length; ++i) {
    const a = Number(pare.data[i]);  // int64 (BigInt) values here are small
    const b = Number(ort.data[i]);
    if (Number.isNaN(a) || Number.isNaN(b)) {
      if (!(Number.isNaN(a) && Number.isNaN(b))) {
        r.ok = false;
        r.abs = Infinity;
        r.why = r.why || `element ${i}: pare ${a}, onnxruntime ${b}`;
      }
      continue;
    }
    if (a === b) continue;  // also equal infinities
    const e = Math.abs(a - b);
    if (e > r.abs) r.abs = e;
    if (Math.abs(b) >= 1e-3 && e / Math.abs(b) > r.rel) r.rel = e / Math.abs(b);
    if (!(e <= atol + rtol * Math.abs(b))) {
      if (r.ok) r.why = `element ${i}: pare ${a}, onnxruntime ${b}`;
      r.ok = false;
    }
  }
  return r;
}

async function main() {
  const dir = process.argv[2];
  if (!dir) die('usage: op_harness_ort.js DIR');
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    die(`cannot load onnxruntime-node (run scripts/install-peers and set NODE_PATH): ${e.message}`);
  }
  const lines = fs.readFileSync(path.join(dir, 'manifest.jsonl'), 'utf8').split('\n').filter((l) => l.trim());
  const registered = JSON.parse(lines[0]).registered;  // [op, family]
  const cases = lines.slice(1).map((l) => JSON.parse(l));

  const families = {};
  const family = (name) =>
    (families[name] = families[name] || { ops: new Set(), cases: 0, abs: 0, absCase: '-', rel: 0, relCase: '-' });
  const byRef = { ort: new Set(), 'ort-graph': new Set(), hand: new Set() };
  const notes = new Map();
  const failures = [];
  const started = Date.now();
  for (const c of cases) {
    let worst = { ok: true, abs: 0, rel: 0, why: '' };
    if (c.ref === 'hand') {
      worst = { ok: c.ok, abs: c.abs, rel: c.rel, why: 'differs from the hand reference' };
    } else {
      try {
        const session = await ort.InferenceSession.create(path.join(dir, c.model), {
          graphOptimizationLevel: 'disabled',
          intraOpNumThreads: 1,
          interOpNumThreads: 1,
          logSeverityLevel: 3,  // the opset 6 case would warn about legacy support
        });
        const feeds = {};
        for (const [name, file] of c.inputs) {
          const t = readNpy(path.join(dir, file));
          feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
        }
        const results = await session.run(feeds);
        for (const [name, file] of c.outputs) {
          const got = results[name];
          const pare = readNpy(path.join(dir, file));
          const d = compare(pare, { type: got.type, data: got.data, dims: got.dims }, c.atol, c.rtol);
          worst.abs = Math.max(worst.abs, d.abs);
          worst.rel = Math.max(worst.rel, d.rel);
          if (!d.ok && worst.ok) worst = { ...worst, ok: false, why: `output ${name}: ${d.why}` };
        }
      } catch (e) {
        worst = { ok: false, abs: NaN, rel: NaN, why: `onnxruntime cannot run it: ${String(e.message || e).split('\n')[0]}` };
      }
    }
    if (c.note) notes.set(c.op, c.note);
    const f = family(c.family);
    f.ops.add(c.op);
    f.cases += 1;
    if (worst.abs > f.abs) [f.abs, f.absCase] = [worst.abs, c.case];
    if (worst.rel > f.rel) [f.rel, f.relCase] = [worst.rel, c.case];
    if (worst.ok) byRef[c.ref].add(c.op);
    else
      failures.push(`FAIL ${c.op} (case ${c.case}, tolerance atol ${c.atol} rtol ${c.rtol}): ${worst.why}; ` +
                    `max abs diff ${worst.abs}, max rel diff ${worst.rel}`);
  }

  const failed = new Set(failures.map((l) => l.split(' ')[1]));
  const covered = registered.filter(([op]) => !failed.has(op) && (byRef.ort.has(op) || byRef['ort-graph'].has(op) || byRef.hand.has(op)));
  const missing = registered.filter(([op]) => !cases.some((c) => c.op === op)).map(([op]) => op);
  const fmt = (v) => (Number.isNaN(v) ? 'n/a' : v === 0 ? '0' : v.toExponential(2));
  const out = [];
  out.push(`op harness: ${covered.length} of ${registered.length} registered ops agree with their reference ` +
           `(${cases.length} cases in ${((Date.now() - started) / 1000).toFixed(1)} s)`);
  const handOnly = [...byRef.hand].filter((op) => !byRef.ort.has(op) && !byRef['ort-graph'].has(op));
  out.push(`  references: ONNX Runtime ${byRef.ort.size} ops, an equivalent ONNX Runtime graph ${byRef['ort-graph'].size} ` +
           `(${[...byRef['ort-graph']].join(', ')}), a hand reference only ${handOnly.length} (${handOnly.join(', ')})`);
  for (const [op, note] of notes) out.push(`  ${op}: ${note}`);
  out.push('');
  out.push('family       ops cases  worst abs diff (case)                          worst rel diff, |ref| >= 1e-3 (case)');
  for (const name of ['elementwise', 'nn', 'tensor', 'quant']) {
    const f = family(name);
    out.push(`${name.padEnd(12)} ${String(f.ops.size).padStart(3)} ${String(f.cases).padStart(5)}  ` +
             `${(fmt(f.abs) + ' (' + f.absCase + ')').padEnd(46)} ${fmt(f.rel)} (${f.relCase})`);
  }
  process.stdout.write(out.join('\n') + '\n');
  for (const op of missing) failures.push(`FAIL ${op}: registered but no case (tests/core/op_harness_cases_test.cpp)`);
  if (failures.length) {
    process.stdout.write(failures.join('\n') + '\n');
    process.stdout.write(`FAILED: ${failures.length} mismatch(es)\n`);
    process.exit(1);
  }
  process.stdout.write('PASSED: every registered op agrees with its reference\n');
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
