#!/usr/bin/env node
// Runs an ONNX model with onnxruntime-node on .npy inputs and writes the outputs as .npy.
//
//   node ort_run.js MODEL.onnx --input [NAME=]X.npy ... --output [NAME=]Y.npy ...
//                   [--threads T] [--opt-level disabled|basic|extended|all] [--list]
//
// Inputs without NAME bind to the model's inputs in order; an output without NAME is the first
// model output. --list prints the model's input and output names and exits.
// onnxruntime-node is found through NODE_PATH (scripts/install-peers prints the folder).
'use strict';

const fs = require('fs');

function die(msg, code = 2) {
  process.stderr.write(`ort_run: ${msg}\n`);
  process.exit(code);
}

const { readNpy, writeNpy } = require('./npy.js');

// ---- command line ------------------------------------------------------------------------------

function parseArgs(argv) {
  const a = { model: null, inputs: [], outputs: [], threads: 0, opt: 'all', list: false };
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) die(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--input' || arg === '-i') a.inputs.push(value());
    else if (arg === '--output' || arg === '-o') a.outputs.push(value());
    else if (arg === '--threads') a.threads = Number(value());
    else if (arg === '--opt-level') a.opt = value();
    else if (arg === '--list') a.list = true;
    else if (arg === '--help' || arg === '-h') {
      process.stdout.write(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 10).join('\n') + '\n');
      process.exit(0);
    } else if (arg.startsWith('-')) die(`unknown option ${arg}`);
    else if (a.model === null) a.model = arg;
    else die(`unexpected argument ${arg}`);
  }
  if (!a.model) die('usage: ort_run.js MODEL.onnx --input [NAME=]X.npy ... --output [NAME=]Y.npy ...');
  if (!['disabled', 'basic', 'extended', 'all'].includes(a.opt)) die(`bad --opt-level ${a.opt}`);
  return a;
}

function binding(s) {
  const eq = s.indexOf('=');
  return eq < 0 ? ['', s] : [s.slice(0, eq), s.slice(eq + 1)];
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    die(`cannot load onnxruntime-node (run scripts/install-peers and set NODE_PATH): ${e.message}`, 1);
  }
  const opts = { graphOptimizationLevel: args.opt };
  if (args.threads > 0) {
    opts.intraOpNumThreads = args.threads;
    opts.interOpNumThreads = 1;
  }
  let session;
  try {
    session = await ort.InferenceSession.create(args.model, opts);
  } catch (e) {
    die(`cannot load ${args.model}: ${e.message}`, 1);
  }
  if (args.list) {
    process.stdout.write(JSON.stringify({ inputs: session.inputNames, outputs: session.outputNames }) + '\n');
    return;
  }
  const feeds = {};
  let next = 0;
  for (const spec of args.inputs) {
    let [name, path] = binding(spec);
    if (!name) {
      if (next >= session.inputNames.length) die(`--input ${spec}: the model takes only ${session.inputNames.length} input(s)`);
      name = session.inputNames[next];
    } else if (!session.inputNames.includes(name)) {
      die(`--input ${spec}: the model has no input '${name}' (inputs: ${session.inputNames.join(' ')})`);
    }
    next = session.inputNames.indexOf(name) + 1;
    const t = readNpy(path);
    feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
  }
  for (const name of session.inputNames)
    if (!(name in feeds)) die(`no --input given for model input '${name}'`);
  const outs = args.outputs.map((spec) => {
    const [name, path] = binding(spec);
    return [name || session.outputNames[0], path];
  });
  for (const [name] of outs)
    if (!session.outputNames.includes(name))
      die(`--output: the model has no output '${name}' (outputs: ${session.outputNames.join(' ')})`);
  const results = await session.run(feeds, outs.map(([name]) => name));
  for (const [name, path] of outs) {
    const t = results[name];
    writeNpy(path, t.type, t.data, t.dims);
  }
}

main().catch((e) => die(e && e.stack ? e.stack : String(e), 1));
