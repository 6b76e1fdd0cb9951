#!/usr/bin/env node
// Times an ONNX model in onnxruntime-node: the ONNX Runtime side of bench/rt_bench.py.
//
//   node bench/ort_bench.js MODEL.onnx --input X.npy [--threads T] [--seconds S] [--warmup W] [--iters N]
//
// One session (intra-op threads T, one inter-op thread, sequential execution, all graph
// optimizations), `--warmup` untimed runs, then runs until both `--iters` runs and `--seconds` have
// passed. Prints one JSON line: p50/p90/p99/mean latency in ms, iterations, samples/s (the input's
// first dim over the mean latency) and the process's peak resident memory in KB.
// onnxruntime-node is found through NODE_PATH (scripts/install-peers prints the folder).
'use strict';

const path = require('path');
const { readNpy } = require(path.join(__dirname, '..', 'tests', 'peer', 'npy.js'));

function die(msg, code = 2) {
  process.stderr.write(`ort_bench: ${msg}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const a = { model: null, input: null, threads: 1, seconds: 2, warmup: 5, iters: 10 };
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) die(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--input') a.input = value();
    else if (arg === '--threads') a.threads = Number(value());
    else if (arg === '--seconds') a.seconds = Number(value());
    else if (arg === '--warmup') a.warmup = Number(value());
    else if (arg === '--iters') a.iters = Number(value());
    else if (arg.startsWith('-')) die(`unknown option ${arg}`);
    else if (a.model === null) a.model = arg;
    else die(`unexpected argument ${arg}`);
  }
  if (!a.model || !a.input) die('usage: ort_bench.js MODEL.onnx --input X.npy [--threads T] [--seconds S]');
  return a;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    die(`cannot load onnxruntime-node (run scripts/install-peers and set NODE_PATH): ${e.message}`, 1);
  }
  const session = await ort.InferenceSession.create(a.model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all',
  });
  const x = readNpy(a.input);
  const feeds = { [session.inputNames[0]]: new ort.Tensor(x.type, x.data, x.dims) };
  for (let i = 0; i < a.warmup; ++i) await session.run(feeds);
  const ms = [];
  const start = process.hrtime.bigint();
  for (;;) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    const t1 = process.hrtime.bigint();
    ms.push(Number(t1 - t0) / 1e6);
    if (ms.length >= a.iters && Number(t1 - start) / 1e9 >= a.seconds) break;
  }
  const sorted = [...ms].sort((p, q) => p - q);
  const pct = (p) => sorted[Math.min(sorted.length - 1, Math.round(p * (sorted.length - 1)))];
  const mean = ms.reduce((s, v) => s + v, 0) / ms.length;
  process.stdout.write(JSON.stringify({
    engine: 'ort', batch: x.dims[0], threads: a.threads, iters: ms.length, p50_ms: pct(0.5), p90_ms: pct(0.9),
    p99_ms: pct(0.99), mean_ms: mean, samples_per_s: (x.dims[0] * 1000) / mean,
    peak_rss_kb: process.resourceUsage().maxRSS,
  }) + '\n');
}

main().catch((e) => die(e && e.stack ? e.stack : String(e), 1));
