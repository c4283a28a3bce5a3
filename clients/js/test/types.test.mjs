// index.d.ts, type-checked: every code example of README.md is compiled with
// `tsc --noEmit --strict` against the declarations (TypeScript is this
// package's one dev dependency: `npm ci` here, which scripts/test.sh runs).
// A deliberately wrong snippet must be refused, so the check can fail.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const TSC = path.join(ROOT, "node_modules", "typescript", "bin", "tsc");

// What the README's examples call but do not define (the application's own code).
const PRELUDE = `
declare function render(item: unknown): void;
declare function reloadEverything(): Promise<void>;
declare function showError(text: string | undefined): void;
declare function loadCheckpoint(): Promise<string | null>;
declare function handle(item: unknown): Promise<void>;
declare function saveCheckpoint(id: string): Promise<void>;
declare const process: { env: Record<string, string | undefined> };
declare const url: string;
declare const onItem: (item: { id: string }) => void;
`;

function examples() {
  const md = fs.readFileSync(path.join(ROOT, "README.md"), "utf8");
  const out = [];
  for (const m of md.matchAll(/```(js|html)\n([\s\S]*?)```/g)) {
    let code = m[2];
    if (m[1] === "html") {
      const s = code.match(/<script type="module">\n([\s\S]*?)<\/script>/);
      if (!s) continue;
      code = s[1];
    }
    // The browser example imports the file itself; both mean the package.
    code = code.replace(/from "[^"]*studio-stream-client[^"]*"/g, 'from "studio-stream-client"');
    out.push(code);
  }
  return out;
}

function tsc(snippets) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "studio-js-types-"));
  try {
    const files = snippets.map((code, i) => {
      const f = path.join(dir, `example${i}.ts`);
      fs.writeFileSync(f, `${PRELUDE}\n${code}\nexport {};\n`);
      return f;
    });
    fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({
      compilerOptions: {
        strict: true, noEmit: true, target: "es2022", module: "es2022", moduleResolution: "bundler",
        lib: ["es2022", "dom"], types: [], skipLibCheck: false,
        paths: { "studio-stream-client": [path.join(ROOT, "index.d.ts")] },
      },
      files,
    }));
    const r = spawnSync(process.execPath, [TSC, "-p", path.join(dir, "tsconfig.json")], { encoding: "utf8" });
    return { status: r.status, out: (r.stdout || "") + (r.stderr || "") };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test("TypeScript is installed (npm ci in clients/js)", () => {
  assert.ok(fs.existsSync(TSC), `${TSC} is missing: run npm ci in clients/js (scripts/test.sh does)`);
});

test("every README example type-checks against index.d.ts with --strict", { skip: !fs.existsSync(TSC) }, () => {
  const ex = examples();
  assert.ok(ex.length >= 3, `README examples found: ${ex.length}`);
  const r = tsc(ex);
  assert.equal(r.status, 0, `tsc --noEmit --strict over the README's examples:\n${r.out}`);
});

test("the check can fail: writing a readonly state or a wrong option is refused", { skip: !fs.existsSync(TSC) }, () => {
  const r = tsc([
    'import { subscribe } from "studio-stream-client";\nconst s = subscribe({ url: "u", topics: ["t"] });\ns.state = "open";\n',
    'import { subscribe } from "studio-stream-client";\nsubscribe({ url: "u", topics: ["t"], onItem: (i: number) => {} });\n',
  ]);
  assert.notEqual(r.status, 0, "tsc accepted wrong code");
  assert.match(r.out, /read-only property/);
  assert.match(r.out, /example1\.ts/);
});
