// Runs an ONNX model's forward pass with onnxruntime-node, the second
// reference executor (Debian has no onnxruntime for Python):
//
//   node zoo/ort_forward.js MODEL.onnx INPUT_DIR OUT_DIR
//
// reads INPUT_DIR/NAME.npy for every graph input and writes OUT_DIR/NAME.npy
// for every graph output. NODE_PATH must reach onnxruntime-node (scripts/
// setup.sh installs it under build/ort; see check_ort.py).
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

// numpy's .npy format, version 1 and 2, little-endian, C order.
const NPY_TYPES = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array],
  '<i2': ['int16', Int16Array], '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array], '<u2': ['uint16', Uint16Array],
  '<u4': ['uint32', Uint32Array], '<u8': ['uint64', BigUint64Array],
  '|b1': ['bool', Uint8Array], '<f2': ['float16', Uint16Array],
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 0, 6) !== '\x93NUMPY')
    throw new Error(`${file}: not an .npy file`);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header))
    throw new Error(`${file}: Fortran order is not supported`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1]
                    .split(',').map((s) => s.trim()).filter((s) => s)
                    .map(Number);
  const kind = NPY_TYPES[descr];
  if (!kind) throw new Error(`${file}: dtype ${descr} is not supported`);
  const [type, Arr] = kind;
  const count = shape.reduce((a, b) => a * b, 1);
  const bytes = buf.subarray(start + headerLen);
  const copy = new Uint8Array(count * Arr.BYTES_PER_ELEMENT);
  copy.set(bytes.subarray(0, copy.length));
  let data = new Arr(copy.buffer);
  if (type === 'bool') data = Uint8Array.from(data).map((x) => x !== 0);
  return new ort.Tensor(type, type === 'bool' ? Array.from(data) : data,
                        shape);
}

function writeNpy(file, tensor) {
  const descr = Object.keys(NPY_TYPES).find(
      (k) => NPY_TYPES[k][0] === tensor.type);
  if (!descr) throw new Error(`output dtype ${tensor.type} is not supported`);
  const dims = tensor.dims.join(', ') + (tensor.dims.length === 1 ? ',' : '');
  let header = `{'descr': '${descr}', 'fortran_order': False, ` +
               `'shape': (${dims}), }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  let data = tensor.data;
  if (tensor.type === 'bool') data = Uint8Array.from(data, (x) => (x ? 1 : 0));
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const tmp = file + '.tmp';
  fs.writeFileSync(tmp, Buffer.concat([head, Buffer.from(header, 'latin1'),
                                       body]));
  fs.renameSync(tmp, file);
}

async function main() {
  const [model, inputDir, outDir] = process.argv.slice(2);
  if (!outDir) {
    console.error('usage: node ort_forward.js MODEL.onnx INPUT_DIR OUT_DIR');
    process.exit(2);
  }
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'], graphOptimizationLevel: 'disabled',
    intraOpNumThreads: 1,
  });
  const feeds = {};
  for (const name of session.inputNames)
    feeds[name] = readNpy(path.join(inputDir, name + '.npy'));
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, {recursive: true});
  for (const name of session.outputNames)
    writeNpy(path.join(outDir, name.replace(/[^A-Za-z0-9_.-]/g, '_') + '.npy'),
             results[name]);
}

main().catch((e) => {
  console.error(`ort_forward.js: ${e.message}`);
  process.exit(1);
});
