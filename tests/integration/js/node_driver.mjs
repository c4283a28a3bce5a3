// Runs one scenario in Node: argv[2] is the client module's path, argv[3] the
// JSON config.  Reports go to stdout, one JSON object a line; the target id
// comes as lines on stdin.  When the subscription ends by itself the process
// must exit by itself too: a client that kept a reconnection timer would keep
// Node alive, and the test would see it.
import { runScenario } from "./scenario.mjs";

const mod = await import(process.argv[2]);
const cfg = JSON.parse(process.argv[3]);
let target = null;
let rest = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => {
  rest += d;
  const lines = rest.split("\n");
  rest = lines.pop();
  for (const l of lines) if (l.trim() !== "") target = Number(l);
});
await runScenario(mod, cfg, {
  report: (o) => process.stdout.write(JSON.stringify(o) + "\n"),
  target: async () => target,
  fetch: globalThis.fetch,
});
process.stdin.destroy();
