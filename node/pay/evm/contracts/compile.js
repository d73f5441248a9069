// Compiles the contracts with the pinned solc-js and writes build/: for
// each contract its ABI, creation bytecode and metadata. With --check it
// compiles and compares with what build/ holds instead, and fails if they
// differ. Run through `go generate ./node/pay/evm` (npm ci first).
"use strict";
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const here = __dirname;
const contracts = ["PaymentChannels", "TestToken"];
const sources = {};
for (const c of contracts) {
  sources[c + ".sol"] = { content: fs.readFileSync(path.join(here, c + ".sol"), "utf8") };
}
const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    metadata: { bytecodeHash: "ipfs" },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "metadata"] } },
  },
};

function findImports(p) {
  const file = p.startsWith("@openzeppelin/") ? path.join(here, "node_modules", p) : path.join(here, p);
  try {
    return { contents: fs.readFileSync(file, "utf8") };
  } catch (e) {
    return { error: "not found: " + p };
  }
}

const out = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (out.errors || []).filter((e) => e.severity === "error");
// Warnings in the imported library are its own; ours are shown.
const ours = (e) => !(e.sourceLocation && e.sourceLocation.file.startsWith("@openzeppelin/"));
for (const e of (out.errors || []).filter(ours)) console.error(e.formattedMessage);
if (errors.length) process.exit(1);

const check = process.argv.includes("--check");
const build = path.join(here, "build");
if (!check) fs.mkdirSync(build, { recursive: true });
let differ = false;
for (const c of contracts) {
  const o = out.contracts[c + ".sol"][c];
  const files = {
    [c + ".abi"]: JSON.stringify(o.abi, null, 2) + "\n",
    [c + ".bin"]: o.evm.bytecode.object + "\n",
    [c + ".metadata.json"]: o.metadata,
  };
  for (const [name, body] of Object.entries(files)) {
    const file = path.join(build, name);
    if (!check) {
      fs.writeFileSync(file, body);
      continue;
    }
    let have = "";
    try {
      have = fs.readFileSync(file, "utf8");
    } catch (e) {}
    if (have !== body) {
      console.error("build/" + name + " does not match " + c + ".sol compiled by solc " + solc.version());
      differ = true;
    }
  }
}
if (differ) process.exit(1);
console.log((check ? "checked " : "compiled ") + contracts.join(", ") + " with solc " + solc.version());
