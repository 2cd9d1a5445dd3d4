// Reference encoder for the parity test and benchmark: the tiktoken npm package (tiktoken's
// Rust core compiled to WASM) with o200k_base ranks and the Kimi split pattern, `&&`
// intersections as written in tokenization_kimi.py.
//
//   node tiktoken_ref.cjs encode VOCAB_DIR OUT.json FILE...   ids per file -> JSON {file: [ids]}
//   node tiktoken_ref.cjs bench FILE SECONDS [REPEATS]          prints "MB/s <median cpu-time based> wall_MB/s <...>"
//   node tiktoken_ref.cjs print FILE                            ids comma-separated on stdout (what
//                                                               `k3-tokenizer encode` does; whole-process timing)
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
  if (isUtf8(buf)) return Array.from(enc.encode_ordinary(buf.toString("utf8")));  // the common case, no per-byte loop
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
  } else if (mode === "print") {
    const enc = makeEncoder(null);
    const ids = encodeBytes(enc, fs.readFileSync(args[0]));
    fs.writeSync(1, ids.join(",") + "\n");
    enc.free();
  } else if (mode === "bench") {
    // Same protocol as bench_tokenizer.cpp: REPEATS runs of SECONDS each, medians printed.
    const [file, seconds, repeatsArg] = args;
    const enc = makeEncoder(null);
    const buf = fs.readFileSync(file);
    const text = buf.toString("utf8");
    encodeBytes(enc, buf.subarray(0, Math.min(buf.length, 1 << 16)));  // warm up
    const limit = Number(seconds || 2) * 1000;
    const repeats = Math.max(1, Number(repeatsArg || 5));
    const median = (v) => {
      const s = [...v].sort((a, b) => a - b);
      const n = s.length;
      return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    };
    const cpuRates = [];
    const wallRates = [];
    let ids = 0;
    for (let r = 0; r < repeats; ++r) {
      const t0 = process.hrtime.bigint();
      const c0 = process.cpuUsage();
      let bytes = 0;
      do {
        ids = enc.encode_ordinary(text).length;
        bytes += buf.length;
      } while (Number(process.hrtime.bigint() - t0) / 1e6 < limit);
      const sec = Number(process.hrtime.bigint() - t0) / 1e9;
      const cu = process.cpuUsage(c0);
      const cpu = (cu.user + cu.system) / 1e6;  // whole process: the encoder is single-threaded
      cpuRates.push(bytes / cpu / 1e6);
      wallRates.push(bytes / sec / 1e6);
    }
    console.log(`MB/s ${median(cpuRates).toFixed(3)} wall_MB/s ${median(wallRates).toFixed(3)} ids ${ids} bytes ${buf.length} repeats ${repeats} all ${cpuRates.map((x) => x.toFixed(3)).join(",")}`);
    enc.free();
  } else {
    console.error("usage: tiktoken_ref.cjs encode VOCAB_DIR OUT.json FILE... | bench FILE SECONDS [REPEATS] | print FILE");
    process.exit(2);
  }
}

main();
