// Reference encoder for the parity test and benchmark: the tiktoken npm package (tiktoken's
// Rust core compiled to WASM) with o200k_base ranks and the Kimi split pattern, `&&`
// intersections as written in tokenization_kimi.py.
//
//   node tiktoken_ref.cjs encode VOCAB_DIR OUT.json FILE...   ids per file -> JSON {file: [ids]}
//   node tiktoken_ref.cjs bench FILE SECONDS                    prints "MB/s <cpu-time based> wall_MB/s <...>"
//
// tiktoken encodes strings, not bytes; the engine's rule for ill-formed UTF-8 (each ill-formed
// byte is one single-byte token, the well-formed runs around it are encoded separately) is
// applied here with Node's own UTF-8 validator, so the two sides share no code.
"use strict";
const fs = require("fs");
const path = require("path");
const { isUtf8 } = require("buffer");
const { Tiktoken } = require("tiktoken/lite");
const o200k = require("tiktoken/encoders/o200k_base.json");

const KIMI_PATTERN = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");

function makeEncoder(vocabDir) {
  const specials = vocabDir ? JSON.parse(fs.readFileSync(path.join(vocabDir, "specials.json"), "utf8")) : {};
  return new Tiktoken(o200k.bpe_ranks, specials, KIMI_PATTERN);
}

function leadLength(b) {
  if (b < 0x80) return 1;
  if (b >= 0xc0 && b < 0xe0) return 2;
  if (b >= 0xe0 && b < 0xf0) return 3;
  if (b >= 0xf0 && b < 0xf8) return 4;
  return 0;
}

function encodeBytes(enc, buf) {
  const out = [];
  let runStart = 0;
  let i = 0;
  const flush = (end) => {
    if (end > runStart) for (const id of enc.encode_ordinary(buf.subarray(runStart, end).toString("utf8"))) out.push(id);
  };
  while (i < buf.length) {
    const len = leadLength(buf[i]);
    if (len > 0 && i + len <= buf.length && isUtf8(buf.subarray(i, i + len))) {
      i += len;
      continue;
    }
    flush(i);
    out.push(enc.encode_single_token(buf.subarray(i, i + 1)));
    i += 1;
    runStart = i;
  }
  flush(buf.length);
  return out;
}

function main() {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === "encode") {
    const [vocabDir, outPath, ...files] = args;
    const enc = makeEncoder(vocabDir);
    const result = {};
    for (const f of files) result[f] = encodeBytes(enc, fs.readFileSync(f));
    fs.writeFileSync(outPath, JSON.stringify(result));
    enc.free();
  } else if (mode === "bench") {
    const [file, seconds] = args;
    const enc = makeEncoder(null);
    const buf = fs.readFileSync(file);
    const text = buf.toString("utf8");
    encodeBytes(enc, buf.subarray(0, Math.min(buf.length, 1 << 16)));  // warm up
    const limit = Number(seconds || 5) * 1000;
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    let bytes = 0;
    let ids = 0;
    do {
      ids += enc.encode_ordinary(text).length;
      bytes += buf.length;
    } while (Number(process.hrtime.bigint() - t0) / 1e6 < limit);
    const sec = Number(process.hrtime.bigint() - t0) / 1e9;
    const cu = process.cpuUsage(c0);
    const cpu = (cu.user + cu.system) / 1e6;  // whole process: the encoder is single-threaded
    console.log(`MB/s ${(bytes / cpu / 1e6).toFixed(3)} wall_MB/s ${(bytes / sec / 1e6).toFixed(3)} ids ${ids} bytes ${bytes} seconds ${sec.toFixed(3)}`);
    enc.free();
  } else {
    console.error("usage: tiktoken_ref.cjs encode VOCAB_DIR OUT.json FILE... | bench FILE SECONDS");
    process.exit(2);
  }
}

main();
